// `npm run bench aws`: a MachineDeployment 0→N→0 of gardener's AWS sample class on the EC2 emulator
// (moto), side by side: our manager (one process), and gardener MCM v0.62.1 with gardener's own AWS
// machine-controller v0.28.0 (unchanged; `bash hack/tools.sh mcm-aws-anchor`). Each side runs on a
// fresh control plane and emulator and reaches EC2 through the counting proxy; Nodes come from the
// kubelet simulator (made Ready by kwok). Reports time, EC2 calls per machine by action, peak RSS
// and CPU (gardener's two processes summed), and our Kubernetes requests per machine. The emulator
// is the ceiling (~55 RunInstances/s; every filtered DescribeInstances scans all instances), so
// sizes stay modest by default.

import { existsSync } from 'node:fs';
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
import { ManagedProcess, freePort, waitUntil } from '../harness/process.js';
import { mcmAnchorDir, mcmAwsAnchorDir, readToolVersions, repoRoot } from '../harness/tools.js';
import { processUsage } from './lifecycle.bench.js';
import { installAnchorCRDs } from './scale.bench.js';
import { printTable } from './table.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

type Impl = 'ours' | 'gardener';

/**
 * From an instance running to its Node registering (the kubelet simulator's boot):
 * BENCH_AWS_BOOT_S, default 2. Real instances take 30 s or more; gardener's machine controller
 * needs the Node to come later than its own view of the instance (see KUBELET_FROM_PROXY).
 */
const BOOT_DELAY_MS = bootDelayMs(process.env.BENCH_AWS_BOOT_S);

function bootDelayMs(env: string | undefined): number {
  const s = Number(env ?? '2');
  if (!(s >= 0)) throw new Error(`BENCH_AWS_BOOT_S: "${env ?? ''}" is not a number of seconds`);
  return s * 1000;
}

interface AwsRun {
  impl: Impl;
  machines: number;
  row: (string | number)[];
  /** EC2 calls per machine by action, 0→N and N→0 together. */
  byAction: Map<string, number>;
  /** Calls an SDK sent again by itself (attempt 2 or later), 0→N→0, all actions. */
  retried: number;
  /** TerminateInstances calls sent again by the SDK. */
  terminateRetried: number;
  /** Instances named by more than one TerminateInstances call, and the most calls for one. */
  terminatedAgain: number;
  mostTerminations: number;
}

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

/** Whether cond came true within the limit. */
async function waitFor(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

const KUBELET_FROM_PROXY = process.env.BENCH_AWS_KUBELET === 'proxy';

/** How long a phase (0→N, N→0) may take before the side's row reports where it stood instead. */
const PHASE_LIMIT_MS = Number(process.env.BENCH_AWS_PHASE_LIMIT_MIN ?? '30') * 60_000;

/** Why gardener's side cannot run here, or undefined when it can. */
function gardenerUnavailable(): string | undefined {
  const mc = path.join(mcmAwsAnchorDir(), 'bin', 'machine-controller');
  const mcm = path.join(mcmAnchorDir(), 'bin', 'machine-controller-manager');
  if (!existsSync(mc))
    return `gardener's AWS machine-controller is not built (${mc}); run bash hack/tools.sh mcm-aws-anchor`;
  if (!existsSync(mcm)) return `gardener MCM is not built (${mcm}); run bash hack/tools.sh mcm-anchor`;
  return undefined;
}

interface Started {
  procs: ManagedProcess[];
  /** The metrics port of our manager (0 for gardener's side). */
  port: number;
}

/** Our manager, or gardener's MCM plus its AWS machine-controller, with gardener's worker counts. */
async function startSide(impl: Impl, kubeconfig: string, logDir: string, endpoint: string): Promise<Started> {
  const common = [
    `--control-kubeconfig=${kubeconfig}`,
    '--namespace=default',
    '--leader-elect=false',
    '--address=127.0.0.1',
    '--v=1',
  ];
  const specs =
    impl === 'ours'
      ? [{ name: 'manager', command: process.execPath, args: [managerScript, ...common] }]
      : [
          {
            name: 'machine-controller-manager',
            command: path.join(mcmAnchorDir(), 'bin', 'machine-controller-manager'),
            args: [...common, `--target-kubeconfig=${kubeconfig}`, '--concurrent-syncs=10'],
          },
          {
            name: 'machine-controller',
            command: path.join(mcmAwsAnchorDir(), 'bin', 'machine-controller'),
            args: [...common, `--target-kubeconfig=${kubeconfig}`, '--concurrent-syncs=50'],
          },
        ];
  const procs: ManagedProcess[] = [];
  let ourPort = 0;
  for (const spec of specs) {
    const port = await freePort();
    if (impl === 'ours') ourPort = port;
    const proc = new ManagedProcess({
      name: spec.name,
      command: spec.command,
      args: [...spec.args, `--port=${port}`],
      logFile: path.join(logDir, `${spec.name}.log`),
      env: { ...process.env, AWS_ENDPOINT_URL_EC2: endpoint },
    });
    procs.push(proc);
    proc.start();
    await waitUntil(
      spec.name,
      async () => {
        try {
          return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok;
        } catch {
          return false;
        }
      },
      { timeoutMs: 60_000, process: proc },
    );
  }
  return { procs, port: ourPort };
}

async function scenario(impl: Impl, replicas: number): Promise<AwsRun> {
  const moto = await startMoto();
  const proxy = new Ec2FaultProxy(moto.endpoint);
  const endpoint = await proxy.start();
  const cp = await startControlPlane({ installCRDs: impl === 'ours', kwok: true });
  if (impl === 'gardener') await installAnchorCRDs(cp);
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 1000, burst: 1000, userAgent: 'bench' });
  const cloud = await provisionCloud(moto.endpoint);
  const kubelet = new Ec2KubeletSimulator({
    endpoint: moto.endpoint,
    region: REGION,
    clusterTag: CLUSTER_TAG,
    client,
    // Real instances take a while to boot; the emulator's start instantly. Without a boot, a Node
    // can exist before CreateMachine's answer is handled, which gardener MCM takes for a stale
    // node (it deletes the VM and fails the machine).
    bootDelayMs: BOOT_DELAY_MS,
    // BENCH_AWS_KUBELET=proxy: Nodes come from the instances each side starts (RunInstances
    // answers seen at the proxy, as a kubelet boots on its instance), with the full poll only as a
    // rare node lifecycle: the default poll of every instance each 500 ms takes most of the
    // emulator's one process at 1,000 machines. Not the default: registering exactly the boot
    // delay after RunInstances answers makes gardener's machine controller, whose CreateMachine
    // is still waiting for the instance to be visible, take the Node for a stale one (it deletes
    // the instance and fails the machine), so its side stops converging (seen at 200 and 1,000).
    ...(KUBELET_FROM_PROXY ? { intervalMs: 15_000 } : {}),
  });
  if (KUBELET_FROM_PROXY) kubelet.watch(proxy);
  const machines = new Informer<Machine>({
    client,
    resource: MachineResource,
    namespace: 'default',
    logger: nullLogger,
  });
  let started: Started = { procs: [], port: 0 };
  try {
    started = await startSide(impl, cp.kubeconfigPath, cp.workDir, endpoint);
    const port = started.port;
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
    await new Promise((r) => setTimeout(r, 1000));
    proxy.resetCounts();
    const requests = async (): Promise<number> =>
      impl === 'ours' ? sumMetric(await metricsText(port), 'rest_client_requests_total') : 0;
    const requestsBefore = await requests();

    const t0 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', replicas);
    const running = (): number =>
      machines.list().filter((m) => m.status?.currentStatus?.phase === 'Running').length;
    const up = await waitFor(() => running() === replicas, PHASE_LIMIT_MS);
    const limit = `> ${PHASE_LIMIT_MS / 1000}`;
    // A side that does not finish in the limit reports where it stood then.
    const upSeconds = up ? (Date.now() - t0) / 1000 : `${limit} (${running()} Running)`;
    const upCalls = [...proxy.calls.values()].reduce((a, b) => a + b, 0);
    const requestsUp = (await requests()) - requestsBefore;

    const t1 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', 'default', 0);
    const down = up && (await waitFor(() => machines.size() === 0, PHASE_LIMIT_MS));
    const downSeconds = !up ? '-' : down ? (Date.now() - t1) / 1000 : `${limit} (${machines.size()} left)`;
    const left = (await taggedInstances(cloud.ec2)).filter(isLive).length;
    const totalCalls = [...proxy.calls.values()].reduce((a, b) => a + b, 0);
    const usages = started.procs.map((p) => processUsage(p.pid ?? 0));
    const rss = usages.reduce((a, u) => a + u.peakRssMiB, 0);
    const cpu = usages.reduce((a, u) => a + u.cpuSeconds, 0);
    const v = readToolVersions();
    return {
      impl,
      machines: replicas,
      row: [
        impl === 'ours' ? 'ours' : `gardener MCM ${v.MCM_ANCHOR_VERSION} + AWS ${v.MCM_AWS_ANCHOR_VERSION}`,
        replicas,
        upSeconds,
        downSeconds,
        upCalls / replicas,
        totalCalls / replicas,
        impl === 'ours' ? requestsUp / replicas : '-',
        left,
        rss,
        (cpu * 1000) / replicas,
      ],
      byAction: new Map([...proxy.calls].map(([action, n]) => [action, n / replicas])),
      retried: [...proxy.retried.values()].reduce((a, b) => a + b, 0),
      terminateRetried: proxy.retried.get('TerminateInstances') ?? 0,
      terminatedAgain: [...proxy.terminations.values()].filter((n) => n > 1).length,
      mostTerminations: Math.max(0, ...proxy.terminations.values()),
    };
  } finally {
    await machines.stop();
    for (const p of started.procs) await p.stop();
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
  // BENCH_AWS_SIDES=ours runs our side alone (gardener's takes about twice as long).
  const why = process.env.BENCH_AWS_SIDES === 'ours' ? 'BENCH_AWS_SIDES=ours' : gardenerUnavailable();
  const impls: Impl[] = why === undefined ? ['ours', 'gardener'] : ['ours'];
  const runs: AwsRun[] = [];
  for (const n of sizes) for (const impl of impls) runs.push(await scenario(impl, n));
  printTable(
    `AWS on the EC2 emulator (moto 5.2.5; gardener's sample class; each side on its own control plane and emulator; nodes register ${BOOT_DELAY_MS / 1000} s after their instance runs)`,
    [
      'implementation',
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
    ['implementation', 'machines', ...actions],
    runs.map((r) => [r.row[0] ?? '', r.machines, ...actions.map((a) => r.byAction.get(a) ?? 0)]),
  );
  printTable(
    'Calls sent more than once, 0→N→0: SDK retries (the `amz-sdk-request` header says attempt 2 or later) and instances named by more than one TerminateInstances',
    [
      'implementation',
      'machines',
      'SDK retries (all actions)',
      'TerminateInstances retried by the SDK',
      'instances terminated more than once',
      'most TerminateInstances for one instance',
    ],
    runs.map((r) => [
      r.row[0] ?? '',
      r.machines,
      r.retried,
      r.terminateRetried,
      r.terminatedAgain,
      r.mostTerminations,
    ]),
  );
  if (why !== undefined) console.log(`gardener's side not run: ${why}`);
  console.log(
    "API requests/machine: our manager's own clients (its metrics); gardener's are not counted here (-). RSS and CPU: gardener's two processes summed.",
  );
}
