// Scale, side by side with gardener MCM (the "anchor", built by `bash hack/tools.sh mcm-anchor`):
// on a real kube-apiserver, a MachineDeployment of gardener's sample shape goes 0 → N → 0 on the
// virtual cloud (0 s boot; a VM is its Node), once driven by our manager and once by gardener's
// machine-controller-manager plus its provider machine-controller with our Go driver of the same
// cloud (test/bench/anchor). Each run gets a fresh control plane. API requests are counted by the
// API server itself (its audit log, one record per request received), so both sides are counted
// the same way whatever their client libraries report. Each change is measured from the request
// that makes it to its goal as seen in watch events (convergence.ts: all N Running, nothing left,
// the rollout complete): time, requests and CPU are taken at that moment, by the same code for
// both sides. What an implementation sends after that is reported apart (until it falls quiet).

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
import { CoreResources, type ResourceType } from '../../lib/kube/resources.js';
import type { KubeObject, Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { Fleet, allRunning, noneLeft, rolledOut, type Goal } from './convergence.js';
import { profileApiServer } from './cpprofile.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { ManagedProcess, freePort, waitUntil } from '../harness/process.js';
import { mcmAnchorDir, readToolVersions, repoRoot } from '../harness/tools.js';
import { managerNodeFlags } from './entrypoint.js';
import { processUsage } from './lifecycle.bench.js';
import { printTable } from './table.js';

const BENCH_USER_AGENT = 'mcm-scale-bench';
const NAMESPACE = 'default';
const AT_REST_SECONDS = 30;
/** After its goal, a change has settled once the implementation has sent nothing this long… */
const QUIET_MS = 5000;
/** …or, at the latest, this long after the goal (the anchor at 5,000 machines never falls quiet). */
const SETTLE_MAX_MS = 300_000;
/**
 * How long a change may take to reach its goal (MCM_BENCH_SCALE_PHASE_LIMIT_MIN, default 60): a
 * side that has not reached it then is reported with where it stood, and the run goes on.
 */
const PHASE_LIMIT_MS = phaseLimitMs(process.env.MCM_BENCH_SCALE_PHASE_LIMIT_MIN);
// MCM_BENCH_SCALE_CP_PROF=<dir>: kube-apiserver's CPU profiles over each change of each run,
// written there as `<side>-<n>-<qps>-<change>-<k>.pb.gz` (cpprofile.ts says how to join them).
const CP_PROF_DIR = process.env.MCM_BENCH_SCALE_CP_PROF;

function phaseLimitMs(env: string | undefined): number {
  const min = Number(env ?? '60');
  if (!(min > 0))
    throw new Error(`MCM_BENCH_SCALE_PHASE_LIMIT_MIN: "${env ?? ''}" is not a number of minutes`);
  return min * 60_000;
}
/** Workers: gardener's defaults on both sides (MCM 10 per controller, machine-controller 50). */
const CONCURRENT_SYNCS = 10;
const MACHINE_CONCURRENT_SYNCS = 50;

/**
 * The sides a run can have: our manager; gardener MCM (the anchor); our manager of another build
 * (`before`: MCM_BENCH_SCALE_BEFORE names its checkout, built); the null manager (`floor`).
 */
type Impl = 'ours' | 'anchor' | 'before' | 'floor';

const SIDE_TITLE: Record<Impl, string> = {
  ours: 'ours',
  anchor: 'gardener MCM',
  before: 'ours before',
  floor: 'floor (null manager)',
};

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Setting {
  qps: number;
  burst: number;
}

/**
 * Per change (up: 0 → N, down: N → 0, rollout: the rolling update of all N to a second class, NaN
 * when not run for this N): seconds, requests per machine and CPU ms per machine from the request
 * that makes the change until its goal is seen in a watch event; then, apart and never per
 * machine, how long the implementation went on sending after the goal until it fell quiet
 * (Infinity: not within SETTLE_MAX_MS) and how many requests that was.
 */
interface Figures {
  upSeconds: number;
  upRequestRate: number;
  upRequestsPerMachine: number;
  upCpuMsPerMachine: number;
  /** CPU of kube-apiserver and etcd over the same span, per machine. */
  upControlPlaneCpuMsPerMachine: number;
  upSettleSeconds: number;
  upSettleRequests: number;
  /** Over AT_REST_SECONDS, starting when 0 → N has settled. */
  restRequestsPerSecond: number;
  downSeconds: number;
  downRequestsPerMachine: number;
  downCpuMsPerMachine: number;
  downControlPlaneCpuMsPerMachine: number;
  downSettleSeconds: number;
  downSettleRequests: number;
  rolloutSeconds: number;
  /** Most machines not being deleted at any watch event of the rollout, minus replicas + maxSurge. */
  rolloutBeyondLimit: number;
  rolloutRequestsPerMachine: number;
  rolloutCpuMsPerMachine: number;
  rolloutControlPlaneCpuMsPerMachine: number;
  rolloutSettleSeconds: number;
  rolloutSettleRequests: number;
  /** Sum over the implementation's processes of each one's peak resident set. */
  peakRssMiB: number;
  /** CPU seconds of the whole run, start-up and scale-down included. */
  cpuSeconds: number;
  /** Where the fleet stood at PHASE_LIMIT_MS, for each change that did not reach its goal by then. */
  stood: Partial<Record<PhaseName, string>>;
  /** Requests per machine during 0 → N by verb and resource, largest first. */
  upBreakdown: [string, number][];
  /** The same by client (user agent without version). */
  upClients: [string, number][];
  /** Requests per machine during N → 0 by verb and resource, largest first. */
  downBreakdown: [string, number][];
}

type BreakdownKey = 'upBreakdown' | 'upClients' | 'downBreakdown';

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
  /** Receipt time of the latest request kept. */
  private lastAt = 0;
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
    const at = Date.parse(e.requestReceivedTimestamp ?? '');
    this.lastAt = Math.max(this.lastAt, at);
    this.records.push({
      at,
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
   * Waits until the implementation has sent nothing for QUIET_MS, at most SETTLE_MAX_MS after
   * `since`. Quiet: `at` is just after its last request, or `since` when it sent none since then.
   * Not quiet by the deadline: `at` is the deadline. (A file tail, so read at intervals.)
   */
  async quiet(since: number): Promise<{ quiet: boolean; at: number }> {
    const deadline = since + SETTLE_MAX_MS;
    for (;;) {
      this.poll();
      const last = Math.max(this.lastAt, since);
      const now = Date.now();
      if (now - last >= QUIET_MS) return { quiet: true, at: last === since ? since : last + 1 };
      if (now >= deadline) return { quiet: false, at: deadline };
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

async function startOurs(cp: ControlPlane, s: Setting, root = repoRoot): Promise<ManagedProcess[]> {
  const port = await freePort();
  const proc = new ManagedProcess({
    name: 'manager',
    command: process.execPath,
    args: [
      // MCM_BENCH_SCALE_CPU_PROF=<dir>: a V8 CPU profile of our manager per run, written there.
      ...(process.env.MCM_BENCH_SCALE_CPU_PROF === undefined
        ? []
        : ['--cpu-prof', `--cpu-prof-dir=${process.env.MCM_BENCH_SCALE_CPU_PROF}`]),
      // As that build's image starts it.
      ...managerNodeFlags(root),
      path.join(root, 'dist', 'cmd', 'manager.js'),
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

/**
 * The floor: the null manager (nullmanager.ts), the requests of our design per machine and
 * nothing else, under the same client limits.
 */
async function startFloor(cp: ControlPlane, s: Setting): Promise<ManagedProcess[]> {
  const port = await freePort();
  const proc = new ManagedProcess({
    name: 'null-manager',
    command: process.execPath,
    args: [
      path.join(repoRoot, 'dist', 'test', 'bench', 'nullmanager.js'),
      `--kubeconfig=${cp.kubeconfigPath}`,
      `--namespace=${NAMESPACE}`,
      '--deployment=bench',
      `--kube-api-qps=${s.qps}`,
      `--kube-api-burst=${s.burst}`,
      `--workers=${MACHINE_CONCURRENT_SYNCS}`,
      `--port=${port}`,
      `--node-writes=${String(FLOOR_NODE_WRITES)}`,
      `--bodies=${FLOOR_BODIES}`,
      `--watches=${String(FLOOR_WATCHES)}`,
    ],
    logFile: path.join(cp.workDir, 'null-manager.log'),
  });
  await startProcess(proc, `http://127.0.0.1:${port}/healthz`);
  return [proc];
}

/** Starts one side's processes. */
function startSide(impl: Impl, cp: ControlPlane, s: Setting): Promise<ManagedProcess[]> {
  switch (impl) {
    case 'ours':
      return startOurs(cp, s);
    case 'before':
      return startOurs(cp, s, beforeRoot());
    case 'anchor':
      return startAnchor(cp, s);
    case 'floor':
      return startFloor(cp, s);
  }
}

/**
 * Whether the floor sends the Node requests MCM's behaviour asks of a controller (the node
 * finalizer; when a machine goes, the Node's Terminating condition, cordon and finalizer removal):
 * the default; MCM_BENCH_SCALE_FLOOR_NODE_WRITES=0 leaves them out (the floor of the earlier
 * published results).
 */
const FLOOR_NODE_WRITES = process.env.MCM_BENCH_SCALE_FLOOR_NODE_WRITES !== '0';

/**
 * Whether the floor also watches (and caches) Machines and Nodes, as any watch-based controller
 * does (MCM_BENCH_SCALE_FLOOR_WATCHES=1); by default it watches only the deployment.
 */
const FLOOR_WATCHES = process.env.MCM_BENCH_SCALE_FLOOR_WATCHES === '1';

/**
 * What the floor's Machine requests carry: `mcm` (the default), the fields gardener MCM's API puts
 * in a Machine (owner reference, template-hash label, priority annotation; lastOperation,
 * timeoutActive and the Node's conditions in the status), so the API server handles objects of
 * the size any compatible implementation writes; `minimal` (MCM_BENCH_SCALE_FLOOR_BODIES=minimal),
 * the phase alone, as in the earlier published results.
 */
const FLOOR_BODIES = floorBodies(process.env.MCM_BENCH_SCALE_FLOOR_BODIES);

function floorBodies(env: string | undefined): 'mcm' | 'minimal' {
  const v = env === undefined || env === '' ? 'mcm' : env;
  if (v !== 'mcm' && v !== 'minimal')
    throw new Error(`MCM_BENCH_SCALE_FLOOR_BODIES: "${v}" is neither mcm nor minimal`);
  return v;
}

/** MCM_BENCH_SCALE_BEFORE: a checkout of another build of ours (built: dist/cmd/manager.js). */
function beforeRoot(): string {
  const dir = process.env.MCM_BENCH_SCALE_BEFORE ?? '';
  if (dir === '' || !existsSync(path.join(dir, 'dist', 'cmd', 'manager.js')))
    throw new Error(`MCM_BENCH_SCALE_BEFORE: no dist/cmd/manager.js under "${dir}" (build it first)`);
  return dir;
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
export async function installAnchorCRDs(cp: ControlPlane): Promise<void> {
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

/** CPU seconds so far of the control plane's processes (kube-apiserver and etcd). */
function controlPlaneCpu(cp: ControlPlane): number {
  return cp.pids().reduce((a, pid) => a + processUsage(pid).cpuSeconds, 0);
}

/** Resolves with the fleet's time of reaching `goal`; fails after `timeoutMs`. */
async function reach(fleet: Fleet, goal: Goal, what: string, timeoutMs: number): Promise<number> {
  const at = await reachWithin(fleet, goal, timeoutMs);
  if (at === undefined) throw new Error(`timed out waiting for ${what}`);
  return at;
}

/** The fleet's time of reaching `goal`, or undefined when it has not within `limitMs`. */
async function reachWithin(fleet: Fleet, goal: Goal, limitMs: number): Promise<number | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      resolve(undefined);
    }, limitMs);
  });
  try {
    return await Promise.race([fleet.until(goal), limit]);
  } finally {
    clearTimeout(timer);
  }
}

/** What the implementation under test is observed through: the same for both sides. */
interface Observed {
  procs: ManagedProcess[];
  cp: ControlPlane;
  audit: AuditTail;
  fleet: Fleet;
  /** The file name prefix of this run's kube-apiserver profiles, when CP_PROF_DIR is set. */
  profileName?: string;
}

type PhaseName = 'up' | 'down' | 'rollout';

/** One change, from the request that makes it to its goal, then until the implementation is quiet. */
interface Phase {
  /** Where the fleet stood when the goal was not reached within PHASE_LIMIT_MS (figures then NaN). */
  stood?: string;
  seconds: number;
  /** Requests received from the start until the goal. */
  requests: AuditRecord[];
  /** CPU of the implementation's processes from the start until the goal. */
  cpuSeconds: number;
  /** CPU of kube-apiserver and etcd over the same span: what the requests cost the server side. */
  controlPlaneCpuSeconds: number;
  /** From the goal until QUIET_MS without a request; Infinity when not within SETTLE_MAX_MS. */
  settleSeconds: number;
  /** Requests received from the goal until quiet (or SETTLE_MAX_MS). */
  settleRequests: number;
}

/**
 * Makes a change (`start`), takes time, requests and CPU at the moment its goal is seen in a watch
 * event, then waits for the implementation to fall quiet, so the next phase starts from rest.
 */
async function measure(
  o: Observed,
  name: PhaseName,
  start: () => Promise<unknown>,
  goal: Goal,
  where: (f: Fleet) => string,
): Promise<Phase> {
  const cpu0 = usage(o.procs).cpuSeconds;
  const cpCpu0 = controlPlaneCpu(o.cp);
  const t0 = Date.now();
  const profile =
    CP_PROF_DIR === undefined || o.profileName === undefined
      ? undefined
      : profileApiServer(o.cp, CP_PROF_DIR, `${o.profileName}-${name}`, `${BENCH_USER_AGENT}-pprof`);
  await start();
  const reached = await reachWithin(o.fleet, goal, PHASE_LIMIT_MS);
  // CPU is taken at the goal, before the profile's last window runs out.
  const cpuSeconds = usage(o.procs).cpuSeconds - cpu0;
  const controlPlaneCpuSeconds = controlPlaneCpu(o.cp) - cpCpu0;
  const profiles = await profile?.stop();
  if (profiles !== undefined && profiles.length > 0)
    console.log(`scale: ${profiles.length} kube-apiserver profiles of ${name}: ${profiles[0]} …`);
  if (reached === undefined) {
    // Not reached: say where it stood; no per-machine figure of a change that did not happen.
    const stood = where(o.fleet);
    console.log(`scale: goal not reached within ${PHASE_LIMIT_MS / 60_000} min: ${stood}`);
    return {
      stood,
      seconds: NaN,
      requests: [],
      cpuSeconds: NaN,
      controlPlaneCpuSeconds: NaN,
      settleSeconds: NaN,
      settleRequests: NaN,
    };
  }
  const settled = await o.audit.quiet(reached);
  return {
    seconds: (reached - t0) / 1000,
    requests: o.audit.within(t0, reached),
    cpuSeconds,
    controlPlaneCpuSeconds,
    settleSeconds: settled.quiet ? (settled.at - reached) / 1000 : Infinity,
    settleRequests: o.audit.within(reached, settled.at).length,
  };
}

/** The per-machine and settling figures of a phase over n machines. */
function perMachine(p: Phase | undefined, n: number) {
  return {
    seconds: p?.seconds ?? NaN,
    requestsPerMachine: p === undefined || p.stood !== undefined ? NaN : p.requests.length / n,
    cpuMsPerMachine: p === undefined ? NaN : (p.cpuSeconds * 1000) / n,
    controlPlaneCpuMsPerMachine: p === undefined ? NaN : (p.controlPlaneCpuSeconds * 1000) / n,
    settleSeconds: p?.settleSeconds ?? NaN,
    settleRequests: p?.settleRequests ?? NaN,
  };
}

/**
 * Rolls all n machines over to ROLLOUT_CLASS (maxSurge 10 %, maxUnavailable 0, minReadySeconds 0)
 * until the deployment is complete (rolledOut). The peak of machines not being deleted is taken at
 * every watch event of the machines from the patch until the implementation fell quiet.
 */
async function rollingUpdate(
  client: KubeClient,
  o: Observed,
  n: number,
): Promise<{ phase: Phase; beyondLimit: number }> {
  const maxSurge = Math.ceil((n * ROLLOUT_MAX_SURGE_PERCENT) / 100);
  o.fleet.resetPeak();
  const phase = await measure(
    o,
    'rollout',
    () =>
      client.patch(
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
      ),
    rolledOut(n, ROLLOUT_CLASS),
    (f) => `${f.runningOfClass(ROLLOUT_CLASS)} of ${n} Running on the new class, ${f.machineCount} machines`,
  );
  return { phase, beyondLimit: Math.max(0, o.fleet.peakLive - (n + maxSurge)) };
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
    installCRDs: impl !== 'anchor',
    apiServerFlags: [
      `--audit-policy-file=${policy}`,
      `--audit-log-path=${auditLog}`,
      '--audit-log-maxsize=100000',
      '--audit-log-mode=blocking',
      ...(CP_PROF_DIR === undefined ? [] : ['--profiling=true']),
    ],
  });
  const client = new KubeClient({
    kubeConfig: cp.kubeConfig,
    qps: 1000,
    burst: 1000,
    userAgent: BENCH_USER_AGENT,
  });
  const informer = <T extends KubeObject>(resource: ResourceType, namespace?: string): Informer<T> =>
    new Informer<T>({
      client,
      resource,
      ...(namespace === undefined ? {} : { namespace }),
      logger: nullLogger,
    });
  const machines = informer<Machine>(MachineResource, NAMESPACE);
  const nodes = informer<Node>(CoreResources.nodes);
  const deployments = informer<MachineDeployment>(MachineDeploymentResource, NAMESPACE);
  const informers = [machines, nodes, deployments];
  const fleet = new Fleet('bench');
  fleet.follow(machines, nodes, deployments);
  let procs: ManagedProcess[] = [];
  try {
    if (impl === 'anchor') await installAnchorCRDs(cp);
    for (const i of informers) i.start();
    await Promise.all(informers.map((i) => i.waitForSync()));
    await createObjects(client);
    procs = await startSide(impl, cp, s);
    // Running: the deployment controller has seen the (empty) deployment.
    await reach(fleet, (f) => f.deploymentObserved(), 'the deployment to be observed', 60_000);
    const audit = new AuditTail(auditLog);
    await audit.quiet(Date.now());
    const o: Observed = { procs, cp, audit, fleet, profileName: `${impl}-${n}-${s.qps}` };

    const scale = (replicas: number) => () =>
      client.scale(MachineDeploymentResource, 'bench', NAMESPACE, replicas);
    const up = await measure(o, 'up', scale(n), allRunning(n), (f) => `${f.running} of ${n} Running`);

    // At rest: nothing changes, so nothing should be requested.
    const tRest = Date.now();
    await sleep(AT_REST_SECONDS * 1000);
    const tRestEnd = Date.now();
    audit.poll();

    const wanted = rollouts.some(
      (r) =>
        r.n === n && (r.setting === undefined || (r.setting.qps === s.qps && r.setting.burst === s.burst)),
    );
    const rollout = wanted ? await rollingUpdate(client, o, n) : undefined;

    const down = await measure(
      o,
      'down',
      scale(0),
      noneLeft,
      (f) => `${f.machineCount} machines and ${f.vmCount} VMs left`,
    );
    const end = usage(procs);

    const u = perMachine(up, n);
    const r = perMachine(rollout?.phase, n);
    const d = perMachine(down, n);
    return {
      upSeconds: u.seconds,
      upRequestRate: up.stood === undefined ? up.requests.length / up.seconds : NaN,
      upRequestsPerMachine: u.requestsPerMachine,
      upCpuMsPerMachine: u.cpuMsPerMachine,
      upControlPlaneCpuMsPerMachine: u.controlPlaneCpuMsPerMachine,
      upSettleSeconds: u.settleSeconds,
      upSettleRequests: u.settleRequests,
      // Not at rest when 0→N was not done.
      restRequestsPerSecond:
        up.stood === undefined ? audit.within(tRest, tRestEnd).length / ((tRestEnd - tRest) / 1000) : NaN,
      downSeconds: d.seconds,
      downRequestsPerMachine: d.requestsPerMachine,
      downCpuMsPerMachine: d.cpuMsPerMachine,
      downControlPlaneCpuMsPerMachine: d.controlPlaneCpuMsPerMachine,
      downSettleSeconds: d.settleSeconds,
      downSettleRequests: d.settleRequests,
      rolloutSeconds: r.seconds,
      rolloutBeyondLimit: rollout?.beyondLimit ?? NaN,
      rolloutRequestsPerMachine: r.requestsPerMachine,
      rolloutCpuMsPerMachine: r.cpuMsPerMachine,
      rolloutControlPlaneCpuMsPerMachine: r.controlPlaneCpuMsPerMachine,
      rolloutSettleSeconds: r.settleSeconds,
      rolloutSettleRequests: r.settleRequests,
      peakRssMiB: end.peakRssMiB,
      cpuSeconds: end.cpuSeconds,
      stood: {
        ...(up.stood === undefined ? {} : { up: up.stood }),
        ...(down.stood === undefined ? {} : { down: down.stood }),
        ...(rollout?.phase.stood === undefined ? {} : { rollout: rollout.phase.stood }),
      },
      upBreakdown: breakdown(up.requests, n, (x) => `${x.verb} ${x.resource}`),
      upClients: breakdown(up.requests, n, (x) => x.client),
      downBreakdown: breakdown(down.requests, n, (x) => `${x.verb} ${x.resource}`),
    };
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await Promise.all(informers.map((i) => i.stop()));
    client.close();
    await cp.stop();
    rmSync(auditLog, { force: true });
  }
}

// ------------------------------------------------------------------------------------------------
// Table and results file
// ------------------------------------------------------------------------------------------------

const ROLLOUT = `rolling update of all N (maxSurge ${ROLLOUT_MAX_SURGE_PERCENT} %, maxUnavailable 0)`;

/** Each figure says what it counts and until when (see markdown() for the definitions). */
const FIGURES: [keyof Omit<Figures, BreakdownKey | 'stood'>, string][] = [
  ['upSeconds', '0→N: s until all N Running'],
  ['upRequestRate', '0→N: API requests/s until all N Running'],
  ['upRequestsPerMachine', '0→N: API requests/machine until all N Running'],
  ['upCpuMsPerMachine', '0→N: CPU ms/machine until all N Running'],
  ['upControlPlaneCpuMsPerMachine', '0→N: kube-apiserver + etcd CPU ms/machine until all N Running'],
  ['upSettleSeconds', '0→N, after all Running: s until quiet'],
  ['upSettleRequests', '0→N, after all Running: API requests until quiet (total)'],
  ['restRequestsPerSecond', `API requests/s at rest (${AT_REST_SECONDS} s after 0→N fell quiet)`],
  ['downSeconds', 'N→0: s until no machine and no VM left'],
  ['downRequestsPerMachine', 'N→0: API requests/machine until none left'],
  ['downCpuMsPerMachine', 'N→0: CPU ms/machine until none left'],
  ['downControlPlaneCpuMsPerMachine', 'N→0: kube-apiserver + etcd CPU ms/machine until none left'],
  ['downSettleSeconds', 'N→0, after none left: s until quiet'],
  ['downSettleRequests', 'N→0, after none left: API requests until quiet (total)'],
  ['rolloutSeconds', `${ROLLOUT}: s until complete`],
  ['rolloutBeyondLimit', 'rolling update: most machines beyond replicas + maxSurge'],
  ['rolloutRequestsPerMachine', 'rolling update: API requests/machine until complete'],
  ['rolloutCpuMsPerMachine', 'rolling update: CPU ms/machine until complete'],
  [
    'rolloutControlPlaneCpuMsPerMachine',
    'rolling update: kube-apiserver + etcd CPU ms/machine until complete',
  ],
  ['rolloutSettleSeconds', 'rolling update, after complete: s until quiet'],
  ['rolloutSettleRequests', 'rolling update, after complete: API requests until quiet (total)'],
  ['peakRssMiB', 'peak RSS (MiB)'],
  ['cpuSeconds', 'CPU s, whole run'],
];

function fmt(n: number): string {
  if (n === Infinity) return `> ${SETTLE_MAX_MS / 1000}`;
  if (!Number.isFinite(n)) return '–';
  if (Number.isInteger(n)) return String(n);
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

/** The time of a change that did not reach its goal: the limit and where it stood then. */
const STOOD_AT: Partial<Record<keyof Figures, PhaseName>> = {
  upSeconds: 'up',
  downSeconds: 'down',
  rolloutSeconds: 'rollout',
};

/** A figure's cell: its value, or for the time of a change not done within the limit, where it stood. */
function cell(f: Figures | undefined, key: keyof Omit<Figures, BreakdownKey | 'stood'>): string {
  const phase = STOOD_AT[key];
  const stood = phase === undefined ? undefined : f?.stood[phase];
  if (stood !== undefined) return `> ${PHASE_LIMIT_MS / 1000} (then ${stood})`;
  return fmt(f?.[key] ?? NaN);
}

function ratio(ours: number, anchor: number): string {
  if (!Number.isFinite(ours) || !Number.isFinite(anchor)) return '–';
  if (anchor === 0) return ours === 0 ? '1.00' : '∞';
  return (ours / anchor).toFixed(2);
}

interface Result {
  n: number;
  setting: Setting;
  ours: Figures;
  anchor: Figures;
  /** Further sides (before, floor), each with a value and a ratio column. */
  extra: Partial<Record<ExtraSide, Figures>>;
}

type ExtraSide = 'before' | 'floor';
const EXTRA_SIDES: readonly ExtraSide[] = ['before', 'floor'];

/** The extra sides any result has, in a fixed order: the same columns for every row. */
function extraSides(results: Result[]): ExtraSide[] {
  return EXTRA_SIDES.filter((s) => results.some((r) => r.extra[s] !== undefined));
}

function rowsOf(results: Result[]): string[][] {
  const rows: string[][] = [];
  const extras = extraSides(results);
  for (const r of results) {
    for (const [key, label] of FIGURES) {
      const sides = [r.ours, r.anchor, ...extras.map((s) => r.extra[s])];
      if (sides.every((f) => cell(f, key) === '–')) continue;
      rows.push([
        `${r.n} @ ${r.setting.qps}/${r.setting.burst}`,
        label,
        cell(r.ours, key),
        cell(r.anchor, key),
        ratio(r.ours[key], r.anchor[key]),
        ...extras.flatMap((s) => {
          const f = r.extra[s];
          return [cell(f, key), ratio(r.ours[key], f?.[key] ?? NaN)];
        }),
      ]);
    }
  }
  return rows;
}

function headerOf(results: Result[]): string[] {
  return [
    'machines @ qps/burst',
    'figure',
    'ours',
    `gardener MCM`,
    'ours/anchor',
    ...extraSides(results).flatMap((s) => [SIDE_TITLE[s], `ours/${s}`]),
  ];
}

const NOT_RUN = 'not run';

function markdown(results: Result[], anchorVersion: string): string {
  const lines = [
    '# Scale: ours against gardener MCM',
    '',
    `Written by \`npm run bench scale\` on ${new Date().toISOString()}: node ${process.version}, ` +
      `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB. ` +
      (anchorVersion === NOT_RUN
        ? 'Anchor: not run (MCM_BENCH_SCALE_ANCHOR=0).'
        : `Anchor: gardener machine-controller-manager ${anchorVersion} and its provider machine-controller ` +
          'with our virtual-cloud driver (test/bench/anchor).'),
    '',
    'Each run: a fresh etcd + kube-apiserver (no kwok, no kube-controller-manager: nodes stay as ' +
      "registered), gardener's sample MachineDeployment (maxSurge 1, maxUnavailable 1, " +
      'minReadySeconds 500) on a `provider: virtual` class with userData carrying the bootstrap-token ' +
      'placeholder, 0 s boot. Both sides get the same --kube-api-qps/--kube-api-burst and ' +
      `gardener's default workers (${CONCURRENT_SYNCS} per controller, ${MACHINE_CONCURRENT_SYNCS} machine workers), ` +
      'no leader election. API requests: counted by kube-apiserver (audit log, one record per ' +
      'request received) for everything the implementation sends, VM (Node) calls of the virtual ' +
      'cloud included.',
    '',
    'How the figures are counted, by the same code for both sides:',
    '',
    '- 0→N: from the scale to N until N machines exist, all Running, seen in a watch event.',
    '- N→0: from the scale to 0 until no machine and no VM (Node of the virtual cloud) is left, seen ' +
      'in a watch event.',
    '- rolling update: from the patch until N machines exist, all of the new class, Running and not ' +
      'being deleted, and the MachineDeployment reports N replicas, N updated and N available for its ' +
      'current generation, seen in a watch event.',
    '- s, API requests/s, API requests/machine and CPU ms/machine of a change: taken at that moment.',
    `- "after …: s until quiet": from that moment to the implementation's last request before ${QUIET_MS / 1000} s ` +
      `without one ("> ${SETTLE_MAX_MS / 1000}": not quiet within ${SETTLE_MAX_MS / 1000} s); "API requests until ` +
      'quiet": the requests in that span, a total, never per machine. The next change starts after it.',
    `- at rest: the ${AT_REST_SECONDS} s after 0→N fell quiet.`,
    `- a change that has not reached its goal ${PHASE_LIMIT_MS / 60_000} min after it was made ` +
      '(MCM_BENCH_SCALE_PHASE_LIMIT_MIN): "> s (then …)" says where the fleet stood at that moment; its ' +
      'other figures are –, and the run goes on with the next change.',
    '- peak RSS: VmHWM, summed over the processes (anchor: 2). CPU: utime+stime.',
    "- kube-apiserver + etcd CPU ms/machine: the control plane's CPU over the same span (fresh per " +
      "run; the benchmark's own watches of machines, nodes and the deployment are in it for every " +
      "side alike): what the implementation's requests and watches cost the server side. On a " +
      "machine the control plane saturates, this and the implementation's own CPU set the time.",
    '',
    ...(results.some((r) => r.extra.floor !== undefined)
      ? [
          '- floor: the null manager (test/bench/nullmanager.ts) in place of ours: per machine the ' +
            'requests our design needs and nothing else (token Secret create and delete, Machine ' +
            'create, VM create, Machine patch, 2 status patches' +
            (FLOOR_NODE_WRITES ? ", the Node's finalizer" : '') +
            '; going: Machine delete, status patch, ' +
            (FLOOR_NODE_WRITES
              ? "the Node's Terminating condition and cordon, VM delete, the Node's finalizer removal, "
              : 'VM delete, ') +
            'finalizer removal), requests with no order between them together, 50 machines at a time, same client limits: what this ' +
            "machine's kube-apiserver and etcd take for our request mix" +
            (FLOOR_NODE_WRITES
              ? ''
              : " (MCM_BENCH_SCALE_FLOOR_NODE_WRITES=0: without the Node requests MCM's behaviour asks for)") +
            (FLOOR_BODIES === 'mcm'
              ? "; its Machines carry what MCM's API puts in them (owner reference, template-hash label, " +
                "priority annotation; lastOperation, timeoutActive and the Node's conditions in the status)"
              : '; its Machines carry the phase alone (MCM_BENCH_SCALE_FLOOR_BODIES=minimal)') +
            '.',
        ]
      : []),
    ...(results.some((r) => r.extra.before !== undefined)
      ? [`- ours before: our manager built from ${process.env.MCM_BENCH_SCALE_BEFORE ?? ''}.`]
      : []),
    '',
    `| ${headerOf(results).join(' | ')} |`,
    `| ${headerOf(results)
      .map((_, i) => (i < 2 ? '---' : '---:'))
      .join(' | ')} |`,
    ...rowsOf(results).map((r) => `| ${r.join(' | ')} |`),
    '',
  ];
  // The largest run at the lowest request limits: where the budget bites.
  const pick = [...results].sort((a, b) => a.setting.qps - b.setting.qps || b.n - a.n)[0];
  if (pick !== undefined) {
    const at = `${pick.n} machines @ ${pick.setting.qps}/${pick.setting.burst}`;
    lines.push(
      ...sideBySide(
        `Requests per machine during 0→N, until all N Running, by client (${at})`,
        'client',
        pick,
        'upClients',
      ),
    );
    lines.push(
      ...sideBySide(
        `Requests per machine during 0→N, until all N Running, by verb and resource (${at})`,
        'request',
        pick,
        'upBreakdown',
      ),
    );
    lines.push(
      ...sideBySide(
        `Requests per machine during N→0, until none left, by verb and resource (${at})`,
        'request',
        pick,
        'downBreakdown',
      ),
    );
  }
  return lines.join('\n');
}

function sideBySide(title: string, what: string, r: Result, key: BreakdownKey): string[] {
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
  const out = { ...like, upBreakdown: [], upClients: [], downBreakdown: [], stood: {} } as Figures;
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
  // MCM_BENCH_SCALE_FLOOR=1: also the null manager; MCM_BENCH_SCALE_BEFORE=<checkout>: also that build.
  const sides: Impl[] = ['ours'];
  if (process.env.MCM_BENCH_SCALE_BEFORE !== undefined) sides.unshift('before');
  if (withAnchor) sides.push('anchor');
  if (process.env.MCM_BENCH_SCALE_FLOOR === '1') sides.push('floor');
  if (withAnchor) ensureAnchor();
  const anchorVersion = withAnchor ? readToolVersions().MCM_ANCHOR_VERSION : NOT_RUN;
  const auditDir = mkdtempSync(path.join(os.tmpdir(), 'mcm-scale-'));
  const results: Result[] = [];
  try {
    for (const setting of settings) {
      for (const n of sizes) {
        const figures: Partial<Record<Impl, Figures>> = {};
        for (const impl of sides) {
          console.log(`scale: ${impl}, ${n} machines @ ${setting.qps}/${setting.burst} …`);
          figures[impl] = await run(impl, n, setting, auditDir, rollouts);
        }
        if (figures.ours === undefined) throw new Error('unreachable');
        const extra: Result['extra'] = {};
        for (const s of EXTRA_SIDES) if (figures[s] !== undefined) extra[s] = figures[s];
        results.push({
          n,
          setting,
          ours: figures.ours,
          anchor: figures.anchor ?? notRun(figures.ours),
          extra,
        });
      }
    }
  } finally {
    rmSync(auditDir, { recursive: true, force: true });
  }
  printTable(
    `Scale on the virtual provider, ours against gardener MCM ${anchorVersion} (real kube-apiserver, fresh per run, 0 s boot)`,
    headerOf(results),
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
