import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
} from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { Informer } from '../../lib/kube/informer.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { startControlPlane } from '../harness/controlplane.js';
import { ManagedProcess, freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { printTable } from './table.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

/** Peak resident set (VmHWM) and CPU seconds (user + system) of a process, from /proc. */
export function processUsage(pid: number): { peakRssMiB: number; cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const hwm = /VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? '0';
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
  return { peakRssMiB: Number(hwm) / 1024, cpuSeconds: ticks / 100 };
}

function metrics(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(`http://127.0.0.1:${port}/metrics`, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          resolve(text);
        });
      })
      .on('error', reject);
  });
}

function sumMetric(text: string, name: string, filter = ''): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || line.startsWith('#') || !line.includes(filter)) continue;
    const rest = line.slice(name.length);
    if (rest !== '' && !rest.startsWith('{') && !rest.startsWith(' ')) continue;
    sum += Number(line.split(' ').pop() ?? 0);
  }
  return sum;
}

async function waitFor(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function scenario(replicas: number, qps: number, burst: number): Promise<(string | number)[]> {
  const cp = await startControlPlane({ installCRDs: true });
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 1000, burst: 1000, userAgent: 'bench' });
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
      `--kube-api-qps=${qps}`,
      `--kube-api-burst=${burst}`,
      '--v=1',
    ],
    logFile: path.join(cp.workDir, 'manager.log'),
  });
  const machines = new Informer<Machine>({
    client,
    resource: MachineResource,
    namespace: 'default',
    logger: nullLogger,
  });
  const nodes = new Informer<Node>({ client, resource: CoreResources.nodes, logger: nullLogger });
  try {
    proc.start();
    machines.start();
    nodes.start();
    await Promise.all([machines.waitForSync(), nodes.waitForSync()]);
    await client.create(MachineClassResource, {
      apiVersion: API_VERSION,
      kind: 'MachineClass',
      metadata: { name: 'bench', namespace: 'default' },
      provider: 'virtual',
      providerSpec: {},
    });
    await client.create(MachineDeploymentResource, {
      apiVersion: API_VERSION,
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
    await waitFor('the manager to serve metrics', () => proc.running, 10_000);
    for (;;) {
      try {
        await metrics(port);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    await new Promise((r) => setTimeout(r, 1000));
    const before = await metrics(port);
    const requestsBefore = sumMetric(before, 'rest_client_requests_total');

    const t0 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', replicas);
    const running = (): number =>
      machines.list().filter((m) => m.status?.currentStatus?.phase === 'Running').length;
    await waitFor(`${replicas} Running`, () => running() === replicas, 1_800_000);
    const upSeconds = (Date.now() - t0) / 1000;
    const afterUp = await metrics(port);
    const requestsUp = sumMetric(afterUp, 'rest_client_requests_total') - requestsBefore;
    const driverCalls = sumMetric(afterUp, 'mcm_cloud_api_driver_request_duration_seconds_count');

    // At rest: nothing changes, so no request should be needed.
    await new Promise((r) => setTimeout(r, 5000));
    const restStart = sumMetric(await metrics(port), 'rest_client_requests_total');
    await new Promise((r) => setTimeout(r, 30_000));
    const restRate = (sumMetric(await metrics(port), 'rest_client_requests_total') - restStart) / 30;

    const t1 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', 0);
    const vms = (): number =>
      nodes.list().filter((n) => n.metadata.labels?.['virtual.mcm-ts.io/vm'] === 'true').length;
    await waitFor('0 machines and 0 VMs', () => machines.size() === 0 && vms() === 0, 1_800_000);
    const downSeconds = (Date.now() - t1) / 1000;
    const usage = processUsage(proc.pid ?? 0);
    return [
      replicas,
      `${qps}/${burst}`,
      upSeconds,
      requestsUp / replicas,
      driverCalls / replicas,
      restRate,
      downSeconds,
      usage.peakRssMiB,
      (usage.cpuSeconds * 1000) / replicas,
    ];
  } finally {
    await machines.stop();
    await nodes.stop();
    await proc.stop();
    client.close();
    await cp.stop();
  }
}

export async function benchLifecycle(): Promise<void> {
  const sizes = (process.env.BENCH_MACHINES ?? '100,1000').split(',').map(Number);
  const rows: (string | number)[][] = [];
  for (const n of sizes)
    rows.push(
      await scenario(n, Number(process.env.BENCH_QPS ?? 200), Number(process.env.BENCH_BURST ?? 400)),
    );
  printTable(
    'Machine lifecycle on the virtual provider (real kube-apiserver; manager as a separate process, 0 s boot)',
    [
      'machines',
      'qps/burst',
      '0→N Running (s)',
      'API requests/machine',
      'driver calls/machine',
      'requests/s at rest',
      'N→0, no VM left (s)',
      'peak RSS (MiB)',
      'CPU ms/machine',
    ],
    rows,
  );
  console.log(
    "API requests: the manager's own clients (controllers and the virtual cloud); at rest: 30 s with nothing changing.",
  );
  console.log('Set BENCH_MACHINES (e.g. 100,1000,5000), BENCH_QPS and BENCH_BURST to change the scenario.');
}
