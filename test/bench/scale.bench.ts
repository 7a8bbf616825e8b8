// Scale, side by side with gardener MCM (the "anchor", built by `bash hack/tools.sh mcm-anchor`):
// on a real kube-apiserver, a MachineDeployment of gardener's sample shape goes 0 → N → 0 on the
// virtual cloud (0 s boot; a VM is its Node), once driven by our manager and once by gardener's
// machine-controller-manager plus its provider machine-controller with our Go driver of the same
// cloud (test/bench/anchor). Each run gets a fresh control plane. API requests are counted by the
// API server itself (its audit log, one record per request received), so both sides are counted
// the same way whatever their client libraries report.

import { spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { Informer } from '../../lib/kube/informer.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { ManagedProcess, freePort, waitUntil } from '../harness/process.js';
import { mcmAnchorDir, readToolVersions, repoRoot } from '../harness/tools.js';
import { processUsage } from './lifecycle.bench.js';
import { printTable } from './table.js';

const BENCH_USER_AGENT = 'mcm-scale-bench';
const NAMESPACE = 'default';
const AT_REST_SECONDS = 30;
/** The implementation is done with a change once it has sent nothing this long. */
const QUIET_MS = 5000;
const QUIET_MAX_MS = 600_000;
/** Workers: gardener's defaults on both sides (MCM 10 per controller, machine-controller 50). */
const CONCURRENT_SYNCS = 10;
const MACHINE_CONCURRENT_SYNCS = 50;

type Impl = 'ours' | 'anchor';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Setting {
  qps: number;
  burst: number;
}

interface Figures {
  upSeconds: number;
  /** From the scale until the implementation falls quiet (see AuditTail.quiet). */
  upRequestsPerMachine: number;
  /** Requests per second from the scale until all machines are Running. */
  upRequestRate: number;
  restRequestsPerSecond: number;
  downSeconds: number;
  downRequestsPerMachine: number;
  /** Sum over the implementation's processes of each one's peak resident set. */
  peakRssMiB: number;
  upCpuMsPerMachine: number;
  /** CPU seconds of the whole run, start-up and scale-down included. */
  cpuSeconds: number;
  /** Rolling update of all N machines to a second class; NaN when not run for this N. */
  rolloutSeconds: number;
  /** Most machines not being deleted at any watch event of the rollout, minus replicas + maxSurge. */
  rolloutBeyondLimit: number;
  rolloutRequestsPerMachine: number;
  /** Requests per machine during 0 → N by verb and resource, largest first. */
  upBreakdown: [string, number][];
  /** The same by client (user agent without version). */
  upClients: [string, number][];
}

// ------------------------------------------------------------------------------------------------
// Counting API requests from the audit log
// ------------------------------------------------------------------------------------------------

/** One record per request, at the moment it is received; nothing else. */
const AUDIT_POLICY = [
  'apiVersion: audit.k8s.io/v1',
  'kind: Policy',
  'omitStages: [ResponseStarted, ResponseComplete, Panic]',
  'rules:',
  '  - level: Metadata',
  '',
].join('\n');

interface AuditRecord {
  at: number;
  verb: string;
  resource: string;
  /** The user agent without version and platform, e.g. machine-controller-manager/machine-controller. */
  client: string;
}

interface AuditEvent {
  user?: { username?: string };
  userAgent?: string;
  verb?: string;
  objectRef?: { resource?: string; subresource?: string };
  requestReceivedTimestamp?: string;
}

function clientOf(userAgent: string): string {
  return userAgent.replace(/\/v[^ ]* \([^)]*\) kubernetes\/[^/]*/, '');
}

/**
 * Follows the audit log as kube-apiserver writes it (blocking mode: a record is in the file before
 * its request is served) and keeps the requests of the implementation under test: every request of
 * the harness's admin user except the benchmark's own client and kubectl (which installs the CRDs
 * before anything is measured).
 */
class AuditTail {
  readonly records: AuditRecord[] = [];
  private offset = 0;
  private rest = '';

  constructor(private readonly file: string) {}

  /** Reads what was appended since the last call. */
  poll(): void {
    if (!existsSync(this.file)) return;
    const fd = openSync(this.file, 'r');
    try {
      const size = fstatSync(fd).size;
      if (size <= this.offset) return;
      const buf = Buffer.alloc(size - this.offset);
      readSync(fd, buf, 0, buf.length, this.offset);
      this.offset = size;
      const lines = (this.rest + buf.toString('utf8')).split('\n');
      this.rest = lines.pop() ?? '';
      for (const line of lines) if (line !== '') this.add(JSON.parse(line) as AuditEvent);
    } finally {
      closeSync(fd);
    }
  }

  private add(e: AuditEvent): void {
    const ua = e.userAgent ?? '';
    if (e.user?.username !== 'admin' || ua.startsWith(BENCH_USER_AGENT) || ua.startsWith('kubectl')) return;
    const ref = e.objectRef;
    this.records.push({
      at: Date.parse(e.requestReceivedTimestamp ?? ''),
      verb: e.verb ?? '',
      resource:
        ref?.resource === undefined
          ? 'nonresource'
          : `${ref.resource}${ref.subresource === undefined ? '' : `/${ref.subresource}`}`,
      client: clientOf(ua),
    });
  }

  within(from: number, to: number): AuditRecord[] {
    return this.records.filter((r) => r.at >= from && r.at < to);
  }

  /**
   * Waits until the implementation has sent nothing for QUIET_MS (at most QUIET_MAX_MS after
   * `since`) and returns the end of its last request burst: just after its last request, or
   * `since` when it sent none. The work a scale causes does not end when the machines are Running
   * (bootstrap tokens are deleted, statuses catch up), so it is counted until this point.
   */
  async quiet(since: number): Promise<number> {
    const deadline = since + QUIET_MAX_MS;
    for (;;) {
      this.poll();
      const last = this.records.reduce((m, r) => Math.max(m, r.at), since);
      const now = Date.now();
      if (now - last >= QUIET_MS || now > deadline) return last === since ? since : last + 1;
      await sleep(250);
    }
  }
}

function breakdown(
  records: AuditRecord[],
  per: number,
  keyOf: (r: AuditRecord) => string,
): [string, number][] {
  const counts = new Map<string, number>();
  for (const r of records) counts.set(keyOf(r), (counts.get(keyOf(r)) ?? 0) + 1);
  return [...counts.entries()].map(([k, v]): [string, number] => [k, v / per]).sort((a, b) => b[1] - a[1]);
}

// ------------------------------------------------------------------------------------------------
// The two implementations
// ------------------------------------------------------------------------------------------------

function httpOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    http
      .get(url, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      })
      .on('error', () => {
        resolve(false);
      });
  });
}

async function startProcess(proc: ManagedProcess, healthz: string): Promise<void> {
  proc.start();
  await waitUntil(proc.opts.name, () => httpOk(healthz), { timeoutMs: 60_000, process: proc });
}

async function startOurs(cp: ControlPlane, s: Setting): Promise<ManagedProcess[]> {
  const port = await freePort();
  const proc = new ManagedProcess({
    name: 'manager',
    command: process.execPath,
    args: [
      // MCM_BENCH_SCALE_CPU_PROF=<dir>: a V8 CPU profile of our manager per run, written there.
      ...(process.env.MCM_BENCH_SCALE_CPU_PROF === undefined
        ? []
        : ['--cpu-prof', `--cpu-prof-dir=${process.env.MCM_BENCH_SCALE_CPU_PROF}`]),
      path.join(repoRoot, 'dist', 'cmd', 'manager.js'),
      `--control-kubeconfig=${cp.kubeconfigPath}`,
      `--namespace=${NAMESPACE}`,
      '--leader-elect=false',
      '--address=127.0.0.1',
      `--port=${port}`,
      `--kube-api-qps=${s.qps}`,
      `--kube-api-burst=${s.burst}`,
      `--concurrent-syncs=${CONCURRENT_SYNCS}`,
      `--machine-concurrent-syncs=${MACHINE_CONCURRENT_SYNCS}`,
      '--v=1',
    ],
    logFile: path.join(cp.workDir, 'manager.log'),
  });
  await startProcess(proc, `http://127.0.0.1:${port}/healthz`);
  return [proc];
}

async function startAnchor(cp: ControlPlane, s: Setting): Promise<ManagedProcess[]> {
  const bin = path.join(mcmAnchorDir(), 'bin');
  const common = [
    `--control-kubeconfig=${cp.kubeconfigPath}`,
    `--target-kubeconfig=${cp.kubeconfigPath}`,
    `--namespace=${NAMESPACE}`,
    '--leader-elect=false',
    '--address=127.0.0.1',
    `--kube-api-qps=${s.qps}`,
    `--kube-api-burst=${s.burst}`,
    '--v=1',
  ];
  const procs: ManagedProcess[] = [];
  for (const [name, syncs] of [
    ['machine-controller-manager', CONCURRENT_SYNCS],
    ['machine-controller', MACHINE_CONCURRENT_SYNCS],
  ] as const) {
    const port = await freePort();
    const proc = new ManagedProcess({
      name,
      command: path.join(bin, name),
      args: [...common, `--port=${port}`, `--concurrent-syncs=${syncs}`],
      logFile: path.join(cp.workDir, `${name}.log`),
    });
    procs.push(proc);
    await startProcess(proc, `http://127.0.0.1:${port}/healthz`);
  }
  return procs;
}

/** gardener's own CRDs of the anchor release (kubectl apply), established and discoverable. */
async function installAnchorCRDs(cp: ControlPlane): Promise<void> {
  const dir = path.join(mcmAnchorDir(), 'crds');
  const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'));
  const r = await cp.kubectl(['apply', '--server-side', ...files.flatMap((f) => ['-f', path.join(dir, f)])]);
  if (r.code !== 0) throw new Error(`installing gardener's CRDs: ${r.stderr}`);
  const w = await cp.kubectl(
    [
      'wait',
      '--for=condition=Established',
      '--timeout=60s',
      ...files.map((f) => `crd/${f.replace(/^machine\.sapcloud\.io_(.*)\.yaml$/, '$1.machine.sapcloud.io')}`),
    ],
    { timeoutMs: 70_000 },
  );
  if (w.code !== 0) throw new Error(`waiting for gardener's CRDs: ${w.stderr}`);
  await waitUntil(
    'machine.sapcloud.io discovery',
    async () => (await cp.request('GET', '/apis/machine.sapcloud.io/v1alpha1')).status === 200,
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

// ------------------------------------------------------------------------------------------------
// One run: 0 → N → 0 on a fresh control plane
// ------------------------------------------------------------------------------------------------

/** The class a rolling update moves every machine to. */
const ROLLOUT_CLASS = 'bench-b';
/**
 * The rolling update's strategy: gardener's sample (maxSurge 1, maxUnavailable 1, minReadySeconds
 * 500) would take hours for 1,000 machines, so the rollout uses a common production shape instead.
 */
const ROLLOUT_MAX_SURGE_PERCENT = 10;

const USER_DATA = '#!/bin/bash\n# join the cluster with <<BOOTSTRAP_TOKEN>> as <<MACHINE_NAME>>\n';

/** gardener's sample MachineDeployment (kubernetes/machine_objects), on a class of the virtual cloud. */
async function createObjects(client: KubeClient): Promise<void> {
  await client.create(CoreResources.secrets, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'bench-userdata', namespace: NAMESPACE },
    data: { userData: Buffer.from(USER_DATA).toString('base64') },
  });
  await client.create(MachineClassResource, {
    apiVersion: API_VERSION,
    kind: 'MachineClass',
    metadata: { name: 'bench', namespace: NAMESPACE },
    provider: 'virtual',
    providerSpec: {},
    secretRef: { name: 'bench-userdata', namespace: NAMESPACE },
  });
  await client.create(MachineClassResource, {
    apiVersion: API_VERSION,
    kind: 'MachineClass',
    metadata: { name: ROLLOUT_CLASS, namespace: NAMESPACE },
    provider: 'virtual',
    providerSpec: {},
    secretRef: { name: 'bench-userdata', namespace: NAMESPACE },
  });
  await client.create(MachineDeploymentResource, {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name: 'bench', namespace: NAMESPACE },
    spec: {
      replicas: 0,
      minReadySeconds: 500,
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 1 } },
      selector: { matchLabels: { 'test-label': 'test-label' } },
      template: {
        metadata: { labels: { 'test-label': 'test-label' } },
        spec: { class: { kind: 'MachineClass', name: 'bench' } },
      },
    },
  });
}

async function waitFor(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function usage(procs: ManagedProcess[]): { peakRssMiB: number; cpuSeconds: number } {
  let peakRssMiB = 0;
  let cpuSeconds = 0;
  for (const p of procs) {
    if (p.pid === undefined || !p.running) throw new Error(`${p.opts.name} is not running:\n${p.tail()}`);
    const u = processUsage(p.pid);
    peakRssMiB += u.peakRssMiB;
    cpuSeconds += u.cpuSeconds;
  }
  return { peakRssMiB, cpuSeconds };
}

/**
 * Rolls all n machines over to ROLLOUT_CLASS (maxSurge 10 %, maxUnavailable 0, minReadySeconds 0)
 * and waits until the deployment is complete: n machines, all Running on the new class, status
 * updated and available n. The peak is taken at every watch event of the machines.
 */
async function rollingUpdate(
  client: KubeClient,
  machines: Informer<Machine>,
  audit: AuditTail,
  n: number,
): Promise<{ seconds: number; beyondLimit: number; requestsPerMachine: number }> {
  const maxSurge = Math.ceil((n * ROLLOUT_MAX_SURGE_PERCENT) / 100);
  let peak = 0;
  const count = (): void => {
    let live = 0;
    for (const m of machines.list()) if (m.metadata.deletionTimestamp === undefined) live++;
    peak = Math.max(peak, live);
  };
  machines.addHandler({ onAdd: count, onUpdate: count, onDelete: count });
  const t0 = Date.now();
  await client.patch(
    MachineDeploymentResource,
    'bench',
    {
      spec: {
        minReadySeconds: 0,
        strategy: {
          type: 'RollingUpdate',
          rollingUpdate: { maxSurge: `${ROLLOUT_MAX_SURGE_PERCENT}%`, maxUnavailable: 0 },
        },
        template: { spec: { class: { kind: 'MachineClass', name: ROLLOUT_CLASS } } },
      },
    },
    { type: 'merge', namespace: NAMESPACE },
  );
  let md: MachineDeployment | undefined;
  const complete = (): boolean => {
    const all = machines.list();
    return (
      all.length === n &&
      all.every(
        (m) =>
          m.spec?.class?.name === ROLLOUT_CLASS &&
          m.metadata.deletionTimestamp === undefined &&
          m.status?.currentStatus?.phase === 'Running',
      )
    );
  };
  for (const deadline = Date.now() + 3_600_000; ;) {
    if (complete()) {
      md = await client.get<MachineDeployment>(MachineDeploymentResource, 'bench', NAMESPACE);
      const st = md.status;
      if (
        (st?.observedGeneration ?? 0) >= (md.metadata.generation ?? 1) &&
        st?.updatedReplicas === n &&
        st.availableReplicas === n &&
        st.replicas === n
      )
        break;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for the rolling update of ${n} machines`);
    await sleep(200);
  }
  const t1 = Date.now();
  const done = await audit.quiet(t0);
  return {
    seconds: (t1 - t0) / 1000,
    beyondLimit: Math.max(0, peak - (n + maxSurge)),
    requestsPerMachine: audit.within(t0, done).length / n,
  };
}

async function run(
  impl: Impl,
  n: number,
  s: Setting,
  auditDir: string,
  rollouts: Rollout[],
): Promise<Figures> {
  const auditLog = path.join(auditDir, `${impl}-${n}-${s.qps}.audit.log`);
  const policy = path.join(auditDir, 'policy.yaml');
  writeFileSync(policy, AUDIT_POLICY);
  const cp = await startControlPlane({
    installCRDs: impl === 'ours',
    apiServerFlags: [
      `--audit-policy-file=${policy}`,
      `--audit-log-path=${auditLog}`,
      '--audit-log-maxsize=100000',
      '--audit-log-mode=blocking',
    ],
  });
  const client = new KubeClient({
    kubeConfig: cp.kubeConfig,
    qps: 1000,
    burst: 1000,
    userAgent: BENCH_USER_AGENT,
  });
  const machines = new Informer<Machine>({
    client,
    resource: MachineResource,
    namespace: NAMESPACE,
    logger: nullLogger,
  });
  const nodes = new Informer<Node>({ client, resource: CoreResources.nodes, logger: nullLogger });
  let procs: ManagedProcess[] = [];
  try {
    if (impl === 'anchor') await installAnchorCRDs(cp);
    machines.start();
    nodes.start();
    await Promise.all([machines.waitForSync(), nodes.waitForSync()]);
    await createObjects(client);
    procs = impl === 'ours' ? await startOurs(cp, s) : await startAnchor(cp, s);
    // Running: the deployment controller has seen the (empty) deployment.
    await waitUntil(
      'the deployment to be observed',
      async () => {
        const md = await client.get<MachineDeployment>(MachineDeploymentResource, 'bench', NAMESPACE);
        return (md.status?.observedGeneration ?? 0) >= (md.metadata.generation ?? 1);
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const audit = new AuditTail(auditLog);
    await audit.quiet(Date.now());

    const cpu0 = usage(procs).cpuSeconds;
    const t0 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', NAMESPACE, n);
    const running = (): number =>
      machines.list().filter((m) => m.status?.currentStatus?.phase === 'Running').length;
    await waitFor(`${n} machines Running`, () => running() === n, 3_600_000);
    const tUp = Date.now();
    const upDone = await audit.quiet(t0);
    const cpuUp = usage(procs).cpuSeconds - cpu0;

    // At rest: nothing changes, so nothing should be requested.
    const tRest = Date.now();
    await sleep(AT_REST_SECONDS * 1000);
    const tRestEnd = Date.now();
    audit.poll();

    const wanted = rollouts.some(
      (r) =>
        r.n === n && (r.setting === undefined || (r.setting.qps === s.qps && r.setting.burst === s.burst)),
    );
    const rollout = wanted ? await rollingUpdate(client, machines, audit, n) : undefined;

    const t1 = Date.now();
    await client.scale(MachineDeploymentResource, 'bench', NAMESPACE, 0);
    const vms = (): number =>
      nodes.list().filter((x) => x.metadata.labels?.['virtual.mcm-ts.io/vm'] === 'true').length;
    await waitFor('0 machines and 0 VMs', () => machines.size() === 0 && vms() === 0, 3_600_000);
    const tDown = Date.now();
    const downDone = await audit.quiet(t1);
    const end = usage(procs);

    const up = audit.within(t0, upDone);
    return {
      upSeconds: (tUp - t0) / 1000,
      upRequestsPerMachine: up.length / n,
      upRequestRate: audit.within(t0, tUp).length / ((tUp - t0) / 1000),
      upCpuMsPerMachine: (cpuUp * 1000) / n,
      restRequestsPerSecond: audit.within(tRest, tRestEnd).length / ((tRestEnd - tRest) / 1000),
      downSeconds: (tDown - t1) / 1000,
      downRequestsPerMachine: audit.within(t1, downDone).length / n,
      peakRssMiB: end.peakRssMiB,
      cpuSeconds: end.cpuSeconds,
      rolloutSeconds: rollout?.seconds ?? NaN,
      rolloutBeyondLimit: rollout?.beyondLimit ?? NaN,
      rolloutRequestsPerMachine: rollout?.requestsPerMachine ?? NaN,
      upBreakdown: breakdown(up, n, (r) => `${r.verb} ${r.resource}`),
      upClients: breakdown(up, n, (r) => r.client),
    };
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await machines.stop();
    await nodes.stop();
    client.close();
    await cp.stop();
    rmSync(auditLog, { force: true });
  }
}

// ------------------------------------------------------------------------------------------------
// Table and results file
// ------------------------------------------------------------------------------------------------

const FIGURES: [keyof Omit<Figures, 'upBreakdown' | 'upClients'>, string][] = [
  ['upSeconds', '0→N, all Running (s)'],
  ['upRequestRate', 'API requests/s until Running'],
  ['upRequestsPerMachine', 'API requests/machine, 0→N'],
  ['upCpuMsPerMachine', 'CPU ms/machine, 0→N'],
  ['restRequestsPerSecond', `API requests/s at rest (${AT_REST_SECONDS} s)`],
  ['downSeconds', 'N→0, no VM left (s)'],
  ['downRequestsPerMachine', 'API requests/machine, N→0'],
  [
    'rolloutSeconds',
    `rolling update of all N (maxSurge ${ROLLOUT_MAX_SURGE_PERCENT} %, maxUnavailable 0) (s)`,
  ],
  ['rolloutBeyondLimit', 'machines beyond replicas + maxSurge during the rollout'],
  ['rolloutRequestsPerMachine', 'API requests/machine, rolling update'],
  ['peakRssMiB', 'peak RSS (MiB)'],
  ['cpuSeconds', 'CPU s, whole run'],
];

function fmt(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (Number.isInteger(n)) return String(n);
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

function ratio(ours: number, anchor: number): string {
  if (Number.isNaN(anchor)) return '–';
  if (anchor === 0) return ours === 0 ? '1.00' : '∞';
  return (ours / anchor).toFixed(2);
}

interface Result {
  n: number;
  setting: Setting;
  ours: Figures;
  anchor: Figures;
}

function rowsOf(results: Result[]): string[][] {
  const rows: string[][] = [];
  for (const r of results) {
    for (const [key, label] of FIGURES) {
      if (Number.isNaN(r.ours[key])) continue;
      rows.push([
        `${r.n} @ ${r.setting.qps}/${r.setting.burst}`,
        label,
        fmt(r.ours[key]),
        fmt(r.anchor[key]),
        ratio(r.ours[key], r.anchor[key]),
      ]);
    }
  }
  return rows;
}

const HEADER = ['machines @ qps/burst', 'figure', 'ours', `gardener MCM`, 'ours/anchor'];

function markdown(results: Result[], anchorVersion: string): string {
  const lines = [
    '# Scale: ours against gardener MCM',
    '',
    `Written by \`npm run bench scale\` on ${new Date().toISOString()}: node ${process.version}, ` +
      `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB. ` +
      `Anchor: gardener machine-controller-manager ${anchorVersion} and its provider machine-controller ` +
      'with our virtual-cloud driver (test/bench/anchor).',
    '',
    'Each run: a fresh etcd + kube-apiserver (no kwok, no kube-controller-manager: nodes stay as ' +
      "registered), gardener's sample MachineDeployment (maxSurge 1, maxUnavailable 1, " +
      'minReadySeconds 500) on a `provider: virtual` class with userData carrying the bootstrap-token ' +
      'placeholder, 0 s boot. Both sides get the same --kube-api-qps/--kube-api-burst and ' +
      `gardener's default workers (${CONCURRENT_SYNCS} per controller, ${MACHINE_CONCURRENT_SYNCS} machine workers), ` +
      'no leader election. API requests: counted by kube-apiserver (audit log, one record per ' +
      'request received) for everything the implementation sends, VM (Node) calls of the virtual ' +
      'cloud included; per machine: from the scale until the implementation has sent nothing for ' +
      `${QUIET_MS / 1000} s (work goes on after the machines are Running), and CPU ms/machine over the ` +
      'same span; at rest: the next ' +
      `${AT_REST_SECONDS} s. Peak RSS: VmHWM, summed over the processes (anchor: 2). CPU: utime+stime.`,
    '',
    `| ${HEADER.join(' | ')} |`,
    `| ${HEADER.map((_, i) => (i < 2 ? '---' : '---:')).join(' | ')} |`,
    ...rowsOf(results).map((r) => `| ${r.join(' | ')} |`),
    '',
  ];
  // The largest run at the lowest request limits: where the budget bites.
  const pick = [...results].sort((a, b) => a.setting.qps - b.setting.qps || b.n - a.n)[0];
  if (pick !== undefined) {
    const at = `${pick.n} machines @ ${pick.setting.qps}/${pick.setting.burst}`;
    lines.push(
      ...sideBySide(`Requests per machine during 0→N by client (${at})`, 'client', pick, 'upClients'),
    );
    lines.push(
      ...sideBySide(
        `Requests per machine during 0→N by verb and resource (${at})`,
        'request',
        pick,
        'upBreakdown',
      ),
    );
  }
  return lines.join('\n');
}

function sideBySide(title: string, what: string, r: Result, key: 'upClients' | 'upBreakdown'): string[] {
  const a = r.ours[key];
  const b = r.anchor[key];
  const lines = [
    `## ${title}`,
    '',
    `| ours: ${what} | per machine | gardener MCM: ${what} | per machine |`,
    '| --- | ---: | --- | ---: |',
  ];
  for (let i = 0; i < Math.max(a.length, b.length) && i < 15; i++) {
    const x = a[i];
    const y = b[i];
    lines.push(
      `| ${x?.[0] ?? ''} | ${x === undefined ? '' : fmt(x[1])} | ${y?.[0] ?? ''} | ${y === undefined ? '' : fmt(y[1])} |`,
    );
  }
  lines.push('');
  return lines;
}

/** A size that also gets the rolling update: at every setting, or only at one (`1000@200/400`). */
interface Rollout {
  n: number;
  setting?: Setting;
}

function parseRollout(s: string): Rollout {
  const [count, at] = s.split('@');
  const n = Number(count);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`MCM_BENCH_SCALE_ROLLOUT: "${s}" is not N or N@QPS/BURST`);
  return at === undefined ? { n } : { n, setting: parseSetting(at) };
}

/** Figures of a side that was not run: every number NaN (shown as –). */
function notRun(like: Figures): Figures {
  const out = { ...like, upBreakdown: [], upClients: [] } as Figures;
  for (const [key] of FIGURES) out[key] = NaN;
  return out;
}

function parseList<T>(env: string | undefined, fallback: string, parse: (s: string) => T): T[] {
  return (env ?? fallback)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map(parse);
}

function parseSetting(s: string): Setting {
  const [qps, burst] = s.split('/').map(Number);
  if (qps === undefined || burst === undefined || !(qps > 0) || !(burst > 0)) {
    throw new Error(`MCM_BENCH_SCALE_QPS: "${s}" is not QPS/BURST, e.g. 20/30`);
  }
  return { qps, burst };
}

/** Builds the anchor (a no-op when cached); its progress goes to the console. */
function ensureAnchor(): void {
  const r = spawnSync('bash', [path.join(repoRoot, 'hack', 'tools.sh'), 'mcm-anchor'], { stdio: 'inherit' });
  if (r.status !== 0) throw new Error('building the anchor failed: bash hack/tools.sh mcm-anchor');
}

export async function benchScale(): Promise<void> {
  const sizes = parseList(process.env.MCM_BENCH_SCALE_N, '100,1000', (s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1) throw new Error(`MCM_BENCH_SCALE_N: "${s}" is not a machine count`);
    return n;
  });
  const settings = parseList(process.env.MCM_BENCH_SCALE_QPS, '20/30,200/400', parseSetting);
  const rollouts = parseList(process.env.MCM_BENCH_SCALE_ROLLOUT, '1000@200/400', parseRollout);
  // MCM_BENCH_SCALE_ANCHOR=0: our side only (the anchor's columns show –).
  const withAnchor = process.env.MCM_BENCH_SCALE_ANCHOR !== '0';
  if (withAnchor) ensureAnchor();
  const anchorVersion = withAnchor ? readToolVersions().MCM_ANCHOR_VERSION : 'not run';
  const auditDir = mkdtempSync(path.join(os.tmpdir(), 'mcm-scale-'));
  const results: Result[] = [];
  try {
    for (const setting of settings) {
      for (const n of sizes) {
        const figures: Partial<Record<Impl, Figures>> = {};
        for (const impl of withAnchor ? (['ours', 'anchor'] as const) : (['ours'] as const)) {
          console.log(`scale: ${impl}, ${n} machines @ ${setting.qps}/${setting.burst} …`);
          figures[impl] = await run(impl, n, setting, auditDir, rollouts);
        }
        if (figures.ours === undefined) throw new Error('unreachable');
        results.push({ n, setting, ours: figures.ours, anchor: figures.anchor ?? notRun(figures.ours) });
      }
    }
  } finally {
    rmSync(auditDir, { recursive: true, force: true });
  }
  printTable(
    `Scale on the virtual provider, ours against gardener MCM ${anchorVersion} (real kube-apiserver, fresh per run, 0 s boot)`,
    HEADER,
    rowsOf(results),
  );
  const dir = path.join(repoRoot, 'test', 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = process.env.MCM_BENCH_SCALE_RESULTS ?? path.join(dir, 'scale.md');
  writeFileSync(file, markdown(results, anchorVersion));
  console.log(`\nWritten to ${path.relative(process.cwd(), file)}.`);
  console.log(
    'Set MCM_BENCH_SCALE_N (e.g. 100,1000,5000), MCM_BENCH_SCALE_QPS (e.g. 20/30,200/400) and ' +
      'MCM_BENCH_SCALE_ROLLOUT (the sizes that also get a rolling update, N or N@QPS/BURST; default ' +
      '1000@200/400) to change the runs.',
  );
}
