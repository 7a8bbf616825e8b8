// `npm run bench aws`: a MachineDeployment 0→N→0 of gardener's AWS sample class on the EC2 emulator
// (moto), the manager as a separate process reaching EC2 through the counting proxy, Nodes from the
// kubelet simulator (made Ready by kwok). Reports time, EC2 calls per machine by action, Kubernetes
// requests per machine, peak RSS and CPU. The emulator is the ceiling (~55 RunInstances/s; every
// filtered DescribeInstances scans all instances), so sizes stay modest by default.

import path from 'node:path';

import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
} from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { Informer } from '../../lib/kube/informer.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { startControlPlane } from '../harness/controlplane.js';
import {
  CLUSTER_TAG,
  REGION,
  isLive,
  provisionCloud,
  sampleMachineClass,
  sampleSecret,
  taggedInstances,
} from '../harness/ec2cloud.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { startMoto } from '../harness/moto.js';
import { ManagedProcess, freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { processUsage } from './lifecycle.bench.js';
import { printTable } from './table.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

async function metricsText(port: number): Promise<string> {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`);
  return r.text();
}

function sumMetric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest !== '' && !rest.startsWith('{') && !rest.startsWith(' ')) continue;
    sum += Number(line.split(' ').pop() ?? 0);
  }
  return sum;
}

async function waitFor(
  what: string,
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface AwsRun {
  row: (string | number)[];
  /** EC2 calls per machine by action, 0→N and N→0 together. */
  byAction: Map<string, number>;
}

async function scenario(replicas: number): Promise<AwsRun> {
  const moto = await startMoto();
  const proxy = new Ec2FaultProxy(moto.endpoint);
  const endpoint = await proxy.start();
  const cp = await startControlPlane({ installCRDs: true, kwok: true });
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 1000, burst: 1000, userAgent: 'bench' });
  const cloud = await provisionCloud(moto.endpoint);
  const kubelet = new Ec2KubeletSimulator({
    endpoint: moto.endpoint,
    region: REGION,
    clusterTag: CLUSTER_TAG,
    client,
  });
  const port = await freePort();
  const proc = new ManagedProcess({
    name: 'manager',
    command: process.execPath,
    args: [
      managerScript,
      `--control-kubeconfig=${cp.kubeconfigPath}`,
      '--namespace=default',
      '--leader-elect=false',
      '--address=127.0.0.1',
      `--port=${port}`,
      '--v=1',
    ],
    logFile: path.join(cp.workDir, 'manager.log'),
    env: { ...process.env, AWS_ENDPOINT_URL_EC2: endpoint },
  });
  const machines = new Informer<Machine>({
    client,
    resource: MachineResource,
    namespace: 'default',
    logger: nullLogger,
  });
  try {
    proc.start();
    kubelet.start();
    machines.start();
    await machines.waitForSync();
    await client.create(CoreResources.secrets, sampleSecret());
    await client.create(MachineClassResource, sampleMachineClass(cloud, 'bench'));
    await client.create(MachineDeploymentResource, {
      apiVersion: 'machine.sapcloud.io/v1alpha1',
      kind: 'MachineDeployment',
      metadata: { name: 'bench', namespace: 'default' },
      spec: {
        replicas: 0,
        selector: { matchLabels: { app: 'bench' } },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
        template: {
          metadata: { labels: { app: 'bench' } },
          spec: { class: { kind: 'MachineClass', name: 'bench' } },
        },
      },
    });
    await waitFor(
      'the manager to serve metrics',
      async () => {
        try {
          await metricsText(port);
          return true;
        } catch {
          return false;
        }
      },
      30_000,
    );
    await new Promise((r) => setTimeout(r, 1000));
    proxy.resetCounts();
    const requestsBefore = sumMetric(await metricsText(port), 'rest_client_requests_total');

    const t0 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', replicas);
    const running = (): number =>
      machines.list().filter((m) => m.status?.currentStatus?.phase === 'Running').length;
    await waitFor(`${replicas} Running`, () => running() === replicas, 1_800_000);
    const upSeconds = (Date.now() - t0) / 1000;
    const upCalls = [...proxy.calls.values()].reduce((a, b) => a + b, 0);
    const requestsUp = sumMetric(await metricsText(port), 'rest_client_requests_total') - requestsBefore;

    const t1 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', 0);
    await waitFor('0 machines', () => machines.size() === 0, 1_800_000);
    const downSeconds = (Date.now() - t1) / 1000;
    const left = (await taggedInstances(cloud.ec2)).filter(isLive).length;
    const totalCalls = [...proxy.calls.values()].reduce((a, b) => a + b, 0);
    const usage = processUsage(proc.pid ?? 0);
    const byAction = new Map([...proxy.calls].map(([action, n]) => [action, n / replicas]));
    return {
      row: [
        replicas,
        upSeconds,
        downSeconds,
        upCalls / replicas,
        totalCalls / replicas,
        requestsUp / replicas,
        left,
        usage.peakRssMiB,
        (usage.cpuSeconds * 1000) / replicas,
      ],
      byAction,
    };
  } finally {
    await machines.stop();
    await proc.stop();
    await kubelet.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    client.close();
    await cp.stop();
    await proxy.stop();
    await moto.stop();
  }
}

export async function benchAws(): Promise<void> {
  const sizes = (process.env.BENCH_AWS_MACHINES ?? '50,200').split(',').map(Number);
  const runs: AwsRun[] = [];
  for (const n of sizes) runs.push(await scenario(n));
  printTable(
    "AWS provider on the EC2 emulator (moto 5.2.5; gardener's sample class; manager as a separate process)",
    [
      'machines',
      '0→N Running (s)',
      'N→0 (s)',
      'EC2 calls/machine 0→N',
      'EC2 calls/machine 0→N→0',
      'API requests/machine 0→N',
      'instances left',
      'peak RSS (MiB)',
      'CPU ms/machine',
    ],
    runs.map((r) => r.row),
  );
  const actions = [...new Set(runs.flatMap((r) => [...r.byAction.keys()]))].sort();
  printTable(
    'EC2 calls per machine by action, 0→N→0 (counted at the proxy in front of the emulator)',
    ['machines', ...actions],
    runs.map((r, i) => [sizes[i] ?? 0, ...actions.map((a) => r.byAction.get(a) ?? 0)]),
  );
  console.log(
    "Not compared yet: gardener MCM v0.62.1 with gardener's own AWS machine-controller (v0.28.0, built from ../shared/third_party) on the same emulator.",
  );
}
