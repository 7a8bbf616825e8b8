// Latency of the externalgrpc server at cluster scale, and the real cluster-autoscaler's loop time
// against it. The machine objects and Nodes are written straight into a real kube-apiserver (no
// controllers run, so nothing changes under the measurement); the server reads them through the
// same shared informers the manager uses.

import { Label } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { AutoscalerServer } from '../../lib/autoscaler/server.js';
import { SharedInformers } from '../../lib/controllers/context.js';
import { KubeClient } from '../../lib/kube/client.js';
import { RealClock } from '../../lib/kube/clock.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { startAutoscaler } from '../harness/autoscaler.js';
import { startControlPlane } from '../harness/controlplane.js';
import { cloudProviderClient } from '../harness/grpcclient.js';
import { autoscalerUnavailableReason, newestAutoscalerVersion } from '../harness/tools.js';
import { printTable } from './table.js';
import type { Registry } from 'prom-client';

const NS = 'default';

async function pool<T>(items: T[], width: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const item = items[next++] as T;
        await fn(item);
      }
    }),
  );
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

async function timed(n: number, call: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await call(i);
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out.sort((a, b) => a - b);
}

function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

/** Calls served so far and seconds spent in the server, by method (from the server's metrics). */
async function servedCalls(registry: Registry): Promise<Map<string, { count: number; sum: number }>> {
  const metric = await registry.getSingleMetric('mcm_autoscaler_grpc_request_duration_seconds')?.get();
  const out = new Map<string, { count: number; sum: number }>();
  for (const v of metric?.values ?? []) {
    const method = String(v.labels.method);
    const e = out.get(method) ?? { count: 0, sum: 0 };
    const name = (v as { metricName?: string }).metricName ?? '';
    if (name.endsWith('_count')) e.count += v.value;
    else if (name.endsWith('_sum')) e.sum += v.value;
    out.set(method, e);
  }
  return out;
}

export async function benchAutoscaler(): Promise<void> {
  const nodes = Number(process.env.BENCH_NODES ?? 5000);
  const groups = Number(process.env.BENCH_GROUPS ?? 100);
  const perGroup = Math.ceil(nodes / groups);
  const cp = await startControlPlane({ installCRDs: true });
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 2000, burst: 2000, userAgent: 'bench' });
  let server: AutoscalerServer | undefined;
  let informers: SharedInformers | undefined;
  try {
    const t0 = Date.now();
    const work: (() => Promise<unknown>)[] = [];
    for (let g = 0; g < groups; g++) {
      const name = `pool-${g}`;
      const mcd = await client.create<MachineDeployment>(MachineDeploymentResource, {
        apiVersion: API_VERSION,
        kind: 'MachineDeployment',
        metadata: {
          name,
          namespace: NS,
          annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: String(perGroup * 2) },
        },
        spec: {
          replicas: perGroup,
          selector: { matchLabels: { pool: name } },
          strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
          template: {
            metadata: { labels: { pool: name } },
            spec: { class: { kind: 'MachineClass', name: 'none' } },
          },
        },
      });
      const ms = await client.create<MachineSet>(MachineSetResource, {
        apiVersion: API_VERSION,
        kind: 'MachineSet',
        metadata: {
          name: `${name}-a`,
          namespace: NS,
          labels: { pool: name },
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind: 'MachineDeployment',
              name,
              uid: mcd.metadata.uid ?? '',
              controller: true,
            },
          ],
        },
        spec: {
          replicas: perGroup,
          selector: { matchLabels: { pool: name } },
          template: {
            metadata: { labels: { pool: name } },
            spec: { class: { kind: 'MachineClass', name: 'none' } },
          },
        },
      });
      for (let i = 0; i < perGroup; i++) {
        const m = `${name}-m${i}`;
        const providerID = `virtual://bench/${m}`;
        work.push(() =>
          client.create<Machine>(MachineResource, {
            apiVersion: API_VERSION,
            kind: 'Machine',
            metadata: {
              name: m,
              namespace: NS,
              labels: { pool: name, [Label.Node]: m },
              ownerReferences: [
                {
                  apiVersion: API_VERSION,
                  kind: 'MachineSet',
                  name: `${name}-a`,
                  uid: ms.metadata.uid ?? '',
                  controller: true,
                },
              ],
            },
            spec: { class: { kind: 'MachineClass', name: 'none' }, providerID },
          }),
        );
        work.push(async () => {
          await client.create<Node>(CoreResources.nodes, {
            apiVersion: 'v1',
            kind: 'Node',
            metadata: { name: m, labels: { pool: name, [Label.NodeMachineName]: m } },
            spec: { providerID },
          });
          await client.patch(
            CoreResources.nodes,
            m,
            {
              status: {
                capacity: { cpu: '4', memory: '8Gi', pods: '110' },
                allocatable: { cpu: '4', memory: '8Gi', pods: '110' },
                conditions: [
                  {
                    type: 'Ready',
                    status: 'True',
                    reason: 'KubeletReady',
                    lastHeartbeatTime: new Date().toISOString(),
                  },
                ],
              },
            },
            { type: 'merge', subresource: 'status' },
          );
        });
      }
    }
    await pool(work, 64, (w) => w());
    const setupS = (Date.now() - t0) / 1000;

    const registry = newRegistry();
    informers = new SharedInformers({ client, target: client, namespace: NS, logger: nullLogger, registry });
    server = new AutoscalerServer({
      address: '127.0.0.1:0',
      tls: undefined,
      groups: [],
      gpuLabel: '',
      gpuTypes: [],
      namespace: NS,
      client,
      informers,
      clock: new RealClock(),
      logger: nullLogger,
      registry,
      unhealthy: () => undefined,
    });
    informers.start();
    await informers.waitForSync();
    await server.start();
    const ca = cloudProviderClient(`127.0.0.1:${server.port}`);
    const total = groups * perGroup;
    const forNode = await timed(2000, (i) => {
      const g = i % groups;
      const m = `pool-${g}-m${Math.floor(i / groups) % perGroup}`;
      return ca.call('NodeGroupForNode', { node: { providerID: `virtual://bench/${m}`, name: m } });
    });
    const groupNodes = await timed(500, (i) => ca.call('NodeGroupNodes', { id: `${NS}/pool-${i % groups}` }));
    const groupList = await timed(200, () => ca.call('NodeGroups'));
    const rows = [
      ['NodeGroupForNode', forNode.length, percentile(forNode, 50), percentile(forNode, 99)],
      [
        `NodeGroupNodes (${perGroup} instances)`,
        groupNodes.length,
        percentile(groupNodes, 50),
        percentile(groupNodes, 99),
      ],
      [
        `NodeGroups (${groups} groups)`,
        groupList.length,
        percentile(groupList, 50),
        percentile(groupList, 99),
      ],
    ];
    printTable(
      `externalgrpc server latency at ${total} nodes in ${groups} groups (plaintext loopback, sequential calls; setup ${setupS.toFixed(0)} s)`,
      ['call', 'calls', 'p50 (ms)', 'p99 (ms)'],
      rows,
    );
    ca.close();

    const version = newestAutoscalerVersion();
    const why = autoscalerUnavailableReason(version);
    if (why !== undefined) {
      console.log(`cluster-autoscaler loop time not measured: ${why}`);
      return;
    }
    const before = await servedCalls(registry);
    const cpuBefore = process.cpuUsage();
    const autoscaler = await startAutoscaler({
      version,
      controlPlane: cp,
      address: `127.0.0.1:${server.port}`,
      grpcTimeout: '30s',
      verbosity: 1,
      flags: { 'scan-interval': '10s', 'scale-down-enabled': false },
      startTimeoutMs: 120_000,
    });
    try {
      const loops = Number(process.env.BENCH_CA_LOOPS ?? 6);
      const mainLoop = async (): Promise<{ count: number; sum: number }> => {
        const text = await autoscaler.metrics();
        const pick = (suffix: string): number =>
          Number(
            new RegExp(
              `cluster_autoscaler_function_duration_seconds_${suffix}\\{function="main"\\} ([0-9.e+-]+)`,
            ).exec(text)?.[1] ?? 0,
          );
        return { count: pick('count'), sum: pick('sum') };
      };
      const deadline = Date.now() + (loops + 4) * 12_000;
      let m = await mainLoop();
      while (m.count < loops && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 2000));
        m = await mainLoop();
      }
      printTable(
        `cluster-autoscaler ${version} main loop against our server (${total} nodes, ${groups} groups)`,
        ['loops', 'mean loop (ms)', 'our process: CPU ms per loop'],
        [
          [
            m.count,
            m.count === 0 ? 0 : (m.sum / m.count) * 1000,
            m.count === 0 ? 0 : cpuMs(process.cpuUsage(cpuBefore)) / m.count,
          ],
        ],
      );
      // Where the loop's calls go: our server's own per-method counters over the same loops.
      const after = await servedCalls(registry);
      const calls = [...after.entries()]
        .map(([method, e]): [string, { count: number; sum: number }] => {
          const b = before.get(method) ?? { count: 0, sum: 0 };
          return [method, { count: e.count - b.count, sum: e.sum - b.sum }];
        })
        .filter(([, e]) => e.count > 0)
        .sort((a, b) => b[1].count - a[1].count);
      printTable(
        `calls our server answered during those loops (time spent in the server, gRPC transport excluded)`,
        ['method', 'calls', 'calls/loop', 'server ms/call'],
        calls.map(([method, e]) => [
          method,
          e.count,
          m.count === 0 ? 0 : e.count / m.count,
          e.count === 0 ? 0 : (e.sum / e.count) * 1000,
        ]),
      );
    } finally {
      await autoscaler.stop();
    }
  } finally {
    await server?.stop();
    await informers?.stop();
    client.close();
    await cp.stop();
  }
}
