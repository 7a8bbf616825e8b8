// Latency of the externalgrpc server at cluster scale, and the real cluster-autoscaler's loop time
// against it. The machine objects and Nodes are written straight into a real kube-apiserver (no
// controllers run, so nothing changes under the measurement); the server reads them through the
// same shared informers the manager uses.
//
// Every loop considers a scale-up and prices it (`--expander=price`): pending pods that no Node
// can hold (they require the kubernetes.io/hostname label, which the benchmark's Nodes lack and
// the autoscaler's template nodes carry) fit every group's template, so the autoscaler computes an
// option per group, prices each (PricingNodePrice per option, PricingPodPrice per pod and option),
// and asks the cheapest group to grow. The API server refuses that write (a
// ValidatingAdmissionPolicy: no MachineDeployment may grow), our server answers UNAVAILABLE, the
// floors answer the same, and with a 1 s back-off the next loop does it all again: the state never
// changes. Every group carries gardener's option annotations, so NodeGroupGetOptions answers
// options merged over the autoscaler's defaults; prices come from the class's and, for every other
// group, the deployment's price annotation.

import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { Profiler } from 'node:inspector';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';

import protobuf from 'protobufjs';

import { Label } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
  type MachineSet,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { OptionAnnotation, hasOverrides, parseOptionAnnotations } from '../../lib/autoscaler/options.js';
import { PRICE_ANNOTATION } from '../../lib/autoscaler/pricing.js';
import { encodeResponse } from '../../lib/autoscaler/proto.js';
import { AutoscalerServer } from '../../lib/autoscaler/server.js';
import type { GrpcTransportFactory } from '../../lib/autoscaler/transport.js';
import { SharedInformers } from '../../lib/controllers/context.js';
import { KubeClient } from '../../lib/kube/client.js';
import { RealClock } from '../../lib/kube/clock.js';
import { ForbiddenError, isInvalid } from '../../lib/kube/errors.js';
import { CoreResources, type ResourceType } from '../../lib/kube/resources.js';
import type { KubeObject, Node, Pod } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { ManagedProcess, waitUntil } from '../harness/process.js';
import {
  autoscalerFloorBinary,
  autoscalerUnavailableReason,
  newestAutoscalerVersion,
  repoRoot,
} from '../harness/tools.js';
import { byComponent, byFunction, startCpuProfile } from './cpuprofile.js';
import type { FloorAnswers } from './grpcfloor-node.js';
import { markdownTable, printTable } from './table.js';
import { ConnectTransport } from './transports/connect.js';
import { GrpcJsTransport } from './transports/grpc-js.js';
import type { Registry } from 'prom-client';

const NS = 'default';
const GO_FLOOR = 'Go floor (grpc-go, prebuilt answers)';
const NODE_FLOOR = 'Node floor (node:http2, prebuilt answers)';

/** The class of every group: a nodeTemplate (so pods have a price) and a price annotation. */
const CLASS = 'bench';
const CLASS_PRICE = '0.3';
/** Every other group (the even ones) has a price of its own, pool-0 the lowest. */
const groupPrice = (g: number): string | undefined => (g % 2 === 0 ? (0.2 + g / 1000).toFixed(3) : undefined);
/** gardener's per-group options, on every group. */
const GROUP_OPTIONS: Record<string, string> = {
  [OptionAnnotation.ScaleDownUtilizationThreshold]: '0.6',
  [OptionAnnotation.ScaleDownUnneededTime]: '20m',
};
/** What each pending pod asks for: a quarter of a node. */
const POD_REQUESTS = { cpu: '1', memory: '1Gi' };
/** The policy that refuses every MachineDeployment write that raises replicas. */
const NO_SCALE_UP = 'bench-no-scale-up';

const ValidatingAdmissionPolicies: ResourceType = {
  group: 'admissionregistration.k8s.io',
  version: 'v1',
  plural: 'validatingadmissionpolicies',
  kind: 'ValidatingAdmissionPolicy',
  namespaced: false,
};
const ValidatingAdmissionPolicyBindings: ResourceType = {
  ...ValidatingAdmissionPolicies,
  plural: 'validatingadmissionpolicybindings',
  kind: 'ValidatingAdmissionPolicyBinding',
};

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

/** What the server under measurement has done so far: calls by method, CPU time of its process. */
interface ServerSample {
  calls: Map<string, number>;
  cpuMs: number;
}

/** The autoscaler's main loops over a window, and what the server did in the same window. */
interface LoopWindow {
  loops: number;
  meanLoopMs: number;
  calls: Map<string, number>;
  cpuMs: number;
  /** What the autoscaler logged over the window, by ScaleUpLog key. */
  scaleUps: Map<string, number>;
}

/**
 * Lines of the autoscaler's log (at --v=1) that tell whether a loop priced a scale-up: the best
 * option it chose, the refused IncreaseSize that follows, and what would mean the pricing failed.
 */
const ScaleUpLog: Record<string, RegExp> = {
  'best option chosen': /Best option to resize: /g,
  'scale-up refused': /Failed to scale up: /g,
  'pricing failed':
    /Failed to (calculate node price|calculate pod price|get price for stabilization pod)|Expander filtered out all options/g,
  'no expansion options': /No expansion options|No unschedulable pods/g,
  'cluster unhealthy': /Cluster is not ready for autoscaling/g,
};

function countScaleUpLog(log: string): Map<string, number> {
  return new Map(Object.entries(ScaleUpLog).map(([k, re]) => [k, log.match(re)?.length ?? 0]));
}

/** The autoscaler's own count and total duration of its main loop (cluster_autoscaler_function_duration_seconds). */
async function mainLoops(autoscaler: Autoscaler): Promise<{ count: number; sum: number }> {
  const text = await autoscaler.metrics();
  const pick = (suffix: string): number =>
    Number(
      new RegExp(
        `cluster_autoscaler_function_duration_seconds_${suffix}\\{function="main"\\} ([0-9.e+-]+)`,
      ).exec(text)?.[1] ?? 0,
    );
  return { count: pick('count'), sum: pick('sum') };
}

/**
 * Runs the newest pinned cluster-autoscaler against a server until its first loop is done (start-up
 * and cold caches), then measures `loops` more: their mean duration by the autoscaler's own metric,
 * and the server's calls and CPU time over the same window (sample() before and after).
 */
async function measureLoops(opts: {
  cp: ControlPlane;
  version: string;
  address: string;
  loops: number;
  sample: () => Promise<ServerSample>;
  profile?: string | undefined;
}): Promise<LoopWindow & { profile: Section[] }> {
  const autoscaler = await startAutoscaler({
    version: opts.version,
    controlPlane: opts.cp,
    address: opts.address,
    grpcTimeout: '30s',
    // At least 1: the scale-up lines counted below are logged at 1.
    verbosity: Math.max(1, Number(process.env.BENCH_CA_VERBOSITY ?? 1)),
    flags: {
      'scan-interval': '10s',
      'scale-down-enabled': false,
      expander: 'price',
      // The refused scale-up backs the cheapest group off for a second only: the next loop
      // considers all groups again.
      'initial-node-group-backoff-duration': '1s',
      'max-node-group-backoff-duration': '1s',
    },
    startTimeoutMs: 120_000,
  });
  try {
    const until = async (count: number, timeoutMs: number): Promise<{ count: number; sum: number }> => {
      const deadline = Date.now() + timeoutMs;
      let m = await mainLoops(autoscaler);
      while (m.count < count && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 500));
        m = await mainLoops(autoscaler);
      }
      return m;
    };
    const m0 = await until(1, 120_000);
    const s0 = await opts.sample();
    const log0 = countScaleUpLog(autoscaler.log());
    const profiling = opts.profile === undefined ? undefined : await startCpuProfile();
    const m1 = await until(m0.count + opts.loops, (opts.loops + 4) * 30_000);
    const s1 = await opts.sample();
    const log1 = countScaleUpLog(autoscaler.log());
    const profile =
      profiling !== undefined && opts.profile !== undefined
        ? profileSections(opts.profile, await profiling.stop(opts.profile))
        : [];
    const loops = m1.count - m0.count;
    const calls = new Map<string, number>();
    for (const [method, n] of s1.calls) {
      const d = n - (s0.calls.get(method) ?? 0);
      if (d > 0) calls.set(method, d);
    }
    return {
      loops,
      meanLoopMs: loops === 0 ? 0 : ((m1.sum - m0.sum) / loops) * 1000,
      calls,
      cpuMs: s1.cpuMs - s0.cpuMs,
      scaleUps: new Map([...log1].map(([k, n]) => [k, n - (log0.get(k) ?? 0)])),
      profile,
    };
  } finally {
    await autoscaler.stop();
  }
}

/** A table printed and written to the results file. */
interface Section {
  title: string;
  header: string[];
  rows: (string | number)[][];
}

function profileSections(file: string, profile: Profiler.Profile): Section[] {
  const components = byComponent(profile);
  const busy = components.filter((r) => r.name !== '(idle)').reduce((a, r) => a + r.ms, 0);
  const pct = (ms: number): string => `${((ms / busy) * 100).toFixed(1)} %`;
  const idle = components.find((r) => r.name === '(idle)')?.ms ?? 0;
  return [
    {
      title:
        `CPU profile of our process over the same loops (${path.basename(file)}): ${(busy / 1000).toFixed(1)} s busy, ` +
        `${(idle / 1000).toFixed(1)} s idle; self time by component, share of the busy time`,
      header: ['component', 'ms', 'share'],
      rows: components.filter((r) => r.name !== '(idle)').map((r) => [r.name, r.ms, pct(r.ms)]),
    },
    {
      title: 'top 25 functions by self time',
      header: ['function', 'ms', 'share'],
      rows: byFunction(profile)
        .filter((r) => !r.name.startsWith('(idle)'))
        .slice(0, 25)
        .map((r) => [r.name, r.ms, pct(r.ms)]),
    },
  ];
}

/** A floor server of the protocol: where it listens, its stats, how to stop it. */
interface FloorServer {
  name: string;
  address: string;
  sample: () => Promise<ServerSample>;
  stop: () => Promise<void>;
}

/**
 * A floor serving the same groups, the Go floor (test/bench/anchor/grpcfloor) or the Node floor
 * (test/bench/grpcfloor-node.ts): the same flags, the answers file, "listening on", and stats on
 * SIGUSR1.
 */
async function startFloor(
  cp: ControlPlane,
  floor: { name: string; file: string; command: string; args: string[] },
  groups: number,
  perGroup: number,
  answersFile: string,
): Promise<FloorServer> {
  const logFile = path.join(cp.logDir, `${floor.file}.log`);
  const proc = new ManagedProcess({
    name: floor.file,
    command: floor.command,
    args: [
      ...floor.args,
      '--address=127.0.0.1:0',
      `--namespace=${NS}`,
      `--groups=${groups}`,
      `--per-group=${perGroup}`,
      '--provider-prefix=virtual://bench/',
      `--answers=${answersFile}`,
    ],
    logFile,
  });
  proc.start();
  const log = (): string => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  let address = '';
  await waitUntil(
    `${floor.file} listening`,
    () => {
      address = /^listening on (\S+)$/m.exec(log())?.[1] ?? '';
      return Promise.resolve(address !== '');
    },
    { timeoutMs: 30_000, process: proc },
  );
  const sample = async (): Promise<ServerSample> => {
    const before = log().match(/^stats .*$/gm)?.length ?? 0;
    if (proc.pid !== undefined) process.kill(proc.pid, 'SIGUSR1');
    let line = '';
    await waitUntil(
      `${floor.file} stats`,
      () => {
        const lines = log().match(/^stats .*$/gm) ?? [];
        line = lines.length > before ? (lines[lines.length - 1] ?? '') : '';
        return Promise.resolve(line !== '');
      },
      { timeoutMs: 10_000, intervalMs: 50, process: proc },
    );
    const calls = new Map<string, number>();
    let cpuMs = 0;
    for (const [, k, v] of line.matchAll(/(\S+)=(\d+)/g)) {
      if (k === 'cpu_us') cpuMs = Number(v) / 1000;
      else if (k !== undefined) calls.set(k, Number(v));
    }
    return { calls, cpuMs };
  };
  return { name: floor.name, address, sample, stop: () => proc.stop() };
}

/** Where a results file's hand-kept summary of earlier runs starts; a run keeps it below its tables. */
const EARLIER_RUNS = '## Earlier runs';

function earlierRuns(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return '';
  }
  const at = text.indexOf(`\n${EARLIER_RUNS}\n`);
  return at < 0 ? '' : text.slice(at);
}

/** Several windows as one: loops and calls added up, the mean loop weighted by loops. */
function merged(windows: LoopWindow[]): LoopWindow {
  const loops = windows.reduce((a, w) => a + w.loops, 0);
  const calls = new Map<string, number>();
  for (const w of windows) for (const [m, n] of w.calls) calls.set(m, (calls.get(m) ?? 0) + n);
  const scaleUps = new Map<string, number>();
  for (const w of windows) for (const [k, n] of w.scaleUps) scaleUps.set(k, (scaleUps.get(k) ?? 0) + n);
  return {
    loops,
    meanLoopMs: loops === 0 ? 0 : windows.reduce((a, w) => a + w.meanLoopMs * w.loops, 0) / loops,
    calls,
    cpuMs: windows.reduce((a, w) => a + w.cpuMs, 0),
    scaleUps,
  };
}

function sum(m: Map<string, number>): number {
  return [...m.values()].reduce((a, b) => a + b, 0);
}

/** A request every server must answer alike (value, or status code). */
interface Probe {
  method: string;
  req: Record<string, unknown>;
}

/** now → now + 1 h, the window the price expander asks for. */
function hourWindow(): Record<string, unknown> {
  const start = Math.floor(Date.now() / 1000);
  return { startTimestamp: { seconds: start, nanos: 0 }, endTimestamp: { seconds: start + 3600, nanos: 0 } };
}

let podType: protobuf.Type | undefined;

/** A pod as the autoscaler sends it (Go's v1.Pod.Marshal; the fields pricing reads). */
function podBytes(name: string, requests: { cpu: string; memory: string }): Buffer {
  podType ??= protobuf
    .loadSync(path.join(repoRoot, 'protos', 'k8s-pod.proto'))
    .lookupType('k8s.io.api.core.v1.Pod');
  const pod = podType.fromObject({
    metadata: { name, namespace: NS },
    spec: {
      containers: [
        {
          name: 'c',
          resources: {
            requests: { cpu: { string: requests.cpu }, memory: { string: requests.memory } },
          },
        },
      ],
    },
  });
  return Buffer.from(podType.encode(pod).finish());
}

/** A template node of group g as the autoscaler prices it: a sanitized copy of one of its nodes. */
function templateNode(g: number): Record<string, unknown> {
  return {
    providerID: `virtual://bench/pool-${g}-m0`,
    name: `template-node-for-${NS}/pool-${g}-4312`,
    labels: { pool: `pool-${g}`, 'kubernetes.io/hostname': `template-node-for-${NS}/pool-${g}-4312` },
  };
}

/**
 * Our server's answers for what the floors cannot derive (prices, each group's options and
 * template, the refused scale-up), for the floors to serve from memory; and the requests by which
 * the floors are checked to answer as our server does.
 */
async function recordAnswers(
  ca: CloudProviderClient,
  deployments: MachineDeployment[],
): Promise<{ answers: FloorAnswers; probes: Probe[] }> {
  const answers: FloorAnswers = { groups: {}, podPrices: {} };
  for (const [g, mcd] of deployments.entries()) {
    const id = `${NS}/${mcd.metadata.name ?? ''}`;
    const price = await ca.call('PricingNodePrice', { node: templateNode(g), ...hourWindow() });
    const template = await ca.call('NodeGroupTemplateNodeInfo', { id });
    const { overrides } = parseOptionAnnotations(mcd.metadata.annotations);
    answers.groups[id] = {
      nodePrice: Number(price.price),
      template: encodeResponse('NodeGroupTemplateNodeInfo', template).toString('base64'),
      ...(hasOverrides(overrides) ? { options: overrides } : {}),
    };
  }
  // The price expander's stabilization pod (0.5 CPU, 500 MiB, as Go's resource.Quantity writes it).
  const stabilize = podBytes('stabilize', { cpu: '500m', memory: '524288k' });
  const pending = podBytes('pending-0', POD_REQUESTS);
  for (const [name, pod] of [
    ['stabilize', stabilize],
    ['*', pending],
  ] as const) {
    const p = await ca.call('PricingPodPrice', { pod_bytes: pod, ...hourWindow() });
    answers.podPrices[name] = Number(p.price);
  }
  try {
    await ca.call('NodeGroupIncreaseSize', { id: `${NS}/pool-0`, delta: 1 });
    throw new Error('our server raised pool-0: the API server does not refuse scale-ups');
  } catch (err) {
    if (grpcCode(err) !== 14) throw err;
    answers.refuseIncrease = (err as { details?: string }).details ?? 'refused';
  }
  const last = deployments.length - 1;
  const probes: Probe[] = [
    ...[0, 1, last].flatMap((g) => [
      { method: 'PricingNodePrice', req: { node: templateNode(g), ...hourWindow() } },
      { method: 'NodeGroupTemplateNodeInfo', req: { id: `${NS}/pool-${g}` } },
      {
        method: 'NodeGroupGetOptions',
        req: {
          id: `${NS}/pool-${g}`,
          // cluster-autoscaler's defaults under the harness's flags.
          defaults: {
            scaleDownUtilizationThreshold: 0.5,
            scaleDownGpuUtilizationThreshold: 0.5,
            scaleDownUnneededDuration: { seconds: 5 },
            scaleDownUnreadyDuration: { seconds: 30 },
            MaxNodeProvisionDuration: { seconds: 60 },
          },
        },
      },
    ]),
    {
      method: 'PricingNodePrice',
      req: { node: { providerID: 'virtual://bench/pool-1-m3', name: 'pool-1-m3' }, ...hourWindow() },
    },
    { method: 'PricingPodPrice', req: { pod_bytes: stabilize, ...hourWindow() } },
    { method: 'PricingPodPrice', req: { pod_bytes: pending, ...hourWindow() } },
    { method: 'NodeGroupIncreaseSize', req: { id: `${NS}/pool-0`, delta: 1 } },
  ];
  return { answers, probes };
}

/** Fails the benchmark unless the floor answers the probes as our server does. */
async function expectSameAnswers(
  floor: Pick<FloorServer, 'name' | 'address'>,
  ours: string,
  probes: Probe[],
): Promise<void> {
  const outcome = (c: CloudProviderClient, p: Probe): Promise<string> =>
    c.call(p.method, p.req).then(
      (r) => JSON.stringify(r),
      (err: unknown) => `status ${grpcCode(err)}`,
    );
  const a = cloudProviderClient(ours);
  const b = cloudProviderClient(floor.address);
  try {
    for (const p of probes) {
      const [x, y] = [await outcome(a, p), await outcome(b, p)];
      if (x !== y) {
        throw new Error(
          `${floor.name} answers ${p.method} otherwise than our server: ${y.slice(0, 300)} against ${x.slice(0, 300)}`,
        );
      }
    }
  } finally {
    a.close();
    b.close();
  }
}

/**
 * Makes the API server refuse every MachineDeployment write that raises replicas (a
 * ValidatingAdmissionPolicy), and waits until it does.
 */
async function refuseScaleUps(client: KubeClient): Promise<void> {
  const apiVersion = 'admissionregistration.k8s.io/v1';
  await client.create(ValidatingAdmissionPolicies, {
    apiVersion,
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name: NO_SCALE_UP },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [
          {
            apiGroups: ['machine.sapcloud.io'],
            apiVersions: ['*'],
            operations: ['UPDATE'],
            resources: ['machinedeployments'],
          },
        ],
      },
      validations: [
        {
          expression:
            '!has(object.spec.replicas) || !has(oldObject.spec.replicas) || object.spec.replicas <= oldObject.spec.replicas',
          message:
            'this cluster refuses scale-ups (npm run bench autoscaler measures the loop on a state that does not change)',
        },
      ],
    },
  } as KubeObject);
  await client.create(ValidatingAdmissionPolicyBindings, {
    apiVersion,
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name: NO_SCALE_UP },
    spec: { policyName: NO_SCALE_UP, validationActions: ['Deny'] },
  } as KubeObject);
  // The policy takes effect within seconds: raise a deployment that is no node group until refused.
  const probe = 'policy-probe';
  await client.create<MachineDeployment>(MachineDeploymentResource, {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name: probe, namespace: NS },
    spec: {
      replicas: 0,
      selector: { matchLabels: { pool: probe } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels: { pool: probe } },
        spec: { class: { kind: 'MachineClass', name: CLASS } },
      },
    },
  });
  const deadline = Date.now() + 60_000;
  for (let replicas = 1; ; replicas++) {
    try {
      await client.patch(
        MachineDeploymentResource,
        probe,
        { spec: { replicas } },
        { type: 'merge', namespace: NS },
      );
    } catch (err) {
      if (isInvalid(err) || err instanceof ForbiddenError) break;
      throw err;
    }
    if (Date.now() > deadline) throw new Error(`${NO_SCALE_UP} did not take effect within 60 s`);
    await new Promise((r) => setTimeout(r, 250));
  }
  await client.delete(MachineDeploymentResource, probe, { namespace: NS });
}

/**
 * Pods the scheduler found no place for (written as it would mark them) that fit every group's
 * template but no Node: they require the kubernetes.io/hostname label, which the benchmark's Nodes
 * lack and the autoscaler's template nodes (sanitized copies of them) carry.
 */
async function createPendingPods(client: KubeClient, count: number): Promise<void> {
  const owner = {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    name: 'pending',
    uid: randomUUID(),
    controller: true,
  };
  await pool(
    Array.from({ length: count }, (_, i) => `pending-${i}`),
    16,
    async (name) => {
      await client.create<Pod>(CoreResources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: NS, labels: { app: 'pending' }, ownerReferences: [owner] },
        spec: {
          containers: [
            { name: 'c', image: 'registry.k8s.io/pause:3.10', resources: { requests: POD_REQUESTS } },
          ],
          affinity: {
            nodeAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: {
                nodeSelectorTerms: [
                  { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'Exists' }] },
                ],
              },
            },
          },
        },
      });
      await client.patch(
        CoreResources.pods,
        name,
        {
          status: {
            phase: 'Pending',
            conditions: [
              {
                type: 'PodScheduled',
                status: 'False',
                reason: 'Unschedulable',
                message: 'no node has the kubernetes.io/hostname label',
                // Not recent: a recent one starts the autoscaler's loops at once instead of every 10 s.
                lastTransitionTime: new Date(Date.now() - 3_600_000).toISOString(),
              },
            ],
          },
        },
        { type: 'merge', namespace: NS, subresource: 'status' },
      );
    },
  );
}

/** A transport our server can run on (BENCH_CA_TRANSPORTS), its table label and its factory. */
const TRANSPORTS: Record<
  string,
  { label: string; short: string; factory: GrpcTransportFactory | undefined }
> = {
  ours: { label: 'ours (node:http2, informers)', short: 'ours', factory: undefined },
  'grpc-js': {
    label: 'ours on grpc-js (Server, tuned)',
    short: 'on grpc-js',
    factory: (limits, authorize) => new GrpcJsTransport(limits, authorize),
  },
  connect: {
    label: 'ours on connect-node (gRPC over node:http2)',
    short: 'on connect',
    factory: (limits, authorize) => new ConnectTransport(limits, authorize),
  },
};

/** The transports asked for (BENCH_CA_TRANSPORTS, a comma list; default ours). */
function transportsAsked(): string[] {
  const names = (process.env.BENCH_CA_TRANSPORTS ?? 'ours')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  for (const n of names) {
    if (TRANSPORTS[n] === undefined) {
      throw new Error(
        `BENCH_CA_TRANSPORTS: unknown transport ${n} (known: ${Object.keys(TRANSPORTS).join(', ')})`,
      );
    }
  }
  return names.length === 0 ? ['ours'] : [...new Set(names)];
}

/** Our server on one transport: where it listens and the registry its calls are counted in. */
interface OurServer {
  transport: string;
  port: number;
  registry: Registry;
}

/**
 * The autoscaler's loop against our server (on each transport asked for) and against the floors,
 * one after the other on the same control plane and the same nodes, and the ratios.
 */
async function compareLoops(opts: {
  cp: ControlPlane;
  servers: OurServer[];
  version: string;
  groups: number;
  perGroup: number;
  pendingPods: number;
  answers: FloorAnswers;
  probes: Probe[];
}): Promise<void> {
  const { cp, servers, version, groups, perGroup } = opts;
  const first = servers[0];
  if (first === undefined) throw new Error('no server to measure');
  const answersFile = path.join(cp.logDir, 'autoscaler-floor-answers.json');
  writeFileSync(answersFile, JSON.stringify(opts.answers));
  const total = groups * perGroup;
  const loops = Number(process.env.BENCH_CA_LOOPS ?? 3);
  const profileDir = process.env.MCM_BENCH_CPU_PROFILE;
  // Rounds alternate the servers, so that a change of the machine's load (other work runs
  // beside the benchmark) falls on all rather than on one.
  const rounds = Number(process.env.BENCH_CA_ROUNDS ?? 2);
  const floorBin = autoscalerFloorBinary();
  if ('missing' in floorBin) console.log(`\nthe Go floor is left out: ${floorBin.missing}`);
  const floors: FloorServer[] = [];
  const oursRounds = new Map<string, (LoopWindow & { profile: Section[] })[]>();
  const floorRounds = new Map<string, LoopWindow[]>();
  try {
    if (!('missing' in floorBin)) {
      floors.push(
        await startFloor(
          cp,
          { name: GO_FLOOR, file: 'autoscaler-floor', command: floorBin.path, args: [] },
          groups,
          perGroup,
          answersFile,
        ),
      );
    }
    floors.push(
      await startFloor(
        cp,
        {
          name: NODE_FLOOR,
          file: 'autoscaler-floor-node',
          command: process.execPath,
          args: [path.join(repoRoot, 'dist', 'test', 'bench', 'grpcfloor-node.js')],
        },
        groups,
        perGroup,
        answersFile,
      ),
    );
    const firstAddress = `127.0.0.1:${first.port}`;
    for (const f of floors) await expectSameAnswers(f, firstAddress, opts.probes);
    for (const s of servers.slice(1)) {
      await expectSameAnswers(
        { name: `our server on ${s.transport}`, address: `127.0.0.1:${s.port}` },
        firstAddress,
        opts.probes,
      );
    }
    for (let r = 0; r < rounds; r++) {
      for (const s of servers) {
        const w = await measureLoops({
          cp,
          version,
          address: `127.0.0.1:${s.port}`,
          loops,
          profile:
            profileDir === undefined || r > 0 || s !== first
              ? undefined
              : path.join(profileDir, 'autoscaler-ours.cpuprofile'),
          sample: async () => {
            const served = await servedCalls(s.registry);
            return {
              calls: new Map([...served].map(([method, e]) => [method, e.count])),
              cpuMs: cpuMs(process.cpuUsage()),
            };
          },
        });
        oursRounds.set(s.transport, [...(oursRounds.get(s.transport) ?? []), w]);
      }
      for (const f of floors) {
        const w = await measureLoops({ cp, version, address: f.address, loops, sample: f.sample });
        floorRounds.set(f.name, [...(floorRounds.get(f.name) ?? []), w]);
      }
    }
  } finally {
    await Promise.all(floors.map((f) => f.stop()));
  }
  const transports = servers.map((s) => s.transport);
  const label = (t: string): string => TRANSPORTS[t]?.label ?? t;
  const short = (t: string): string => TRANSPORTS[t]?.short ?? t;
  const oursOf = (t: string): LoopWindow & { profile: Section[] } => {
    const ws = oursRounds.get(t) ?? [];
    return { ...merged(ws), profile: ws.flatMap((w) => w.profile) };
  };
  const ours = oursOf(first.transport);
  const floorOf = (name: string): LoopWindow | undefined => {
    const ws = floorRounds.get(name);
    return ws === undefined ? undefined : merged(ws);
  };
  const goFloor = floorOf(GO_FLOOR);
  const nodeFloor = floorOf(NODE_FLOOR);
  const row = (name: string, w: LoopWindow): (string | number)[] => {
    const calls = sum(w.calls);
    return [
      name,
      w.loops,
      w.meanLoopMs / 1000,
      w.loops === 0 ? 0 : calls / w.loops,
      w.loops === 0 ? 0 : w.cpuMs / w.loops / 1000,
      calls === 0 ? 0 : w.cpuMs / calls,
    ];
  };
  const loopRatio = (a: LoopWindow, b: LoopWindow | undefined): string =>
    b === undefined || b.meanLoopMs === 0 ? '–' : (a.meanLoopMs / b.meanLoopMs).toFixed(2);
  const rows = transports.map((t) => row(label(t), oursOf(t)));
  if (goFloor !== undefined) rows.push(row(GO_FLOOR, goFloor));
  if (nodeFloor !== undefined) rows.push(row(NODE_FLOOR, nodeFloor));
  const ratioName = (t: string): string => (t === 'ours' ? 'ours' : `ours ${short(t)}`);
  for (const t of transports) {
    if (goFloor !== undefined)
      rows.push([`${ratioName(t)} / Go floor`, '', loopRatio(oursOf(t), goFloor), '', '', '']);
    if (nodeFloor !== undefined)
      rows.push([`${ratioName(t)} / Node floor`, '', loopRatio(oursOf(t), nodeFloor), '', '', '']);
  }
  if (goFloor !== undefined && nodeFloor !== undefined)
    rows.push(['Node floor / Go floor', '', loopRatio(nodeFloor, goFloor), '', '', '']);
  const [load1, load5, load15] = loadavg().map((l) => l.toFixed(2));
  const methods = [
    ...new Set([...ours.calls.keys(), ...floors.flatMap((f) => [...(floorOf(f.name)?.calls.keys() ?? [])])]),
  ].sort((a, b) => (ours.calls.get(b) ?? 0) - (ours.calls.get(a) ?? 0));
  const perLoop = (w: LoopWindow | undefined, m: string): number | string =>
    w === undefined || w.loops === 0 ? '–' : (w.calls.get(m) ?? 0) / w.loops;
  const shortName = (name: string): string => (name === GO_FLOOR ? 'Go floor' : 'Node floor');
  const libraries = transports.filter((t) => t !== 'ours');
  const comparesTransports = transports.length > 1;
  const byRound: Section = {
    title: comparesTransports
      ? `by round (our server on each transport, then each floor, ${loops} loops each): main loop (s), ratios per round`
      : `by round (our server, then each floor, ${loops} loops each): main loop (s)`,
    header: [
      'round',
      ...transports.map(ratioName),
      ...floors.map((f) => shortName(f.name)),
      ...transports.flatMap((t) => floors.map((f) => `${ratioName(t)} / ${shortName(f.name)}`)),
      ...(transports.includes('ours') ? libraries.map((t) => `${ratioName(t)} / ours`) : []),
    ],
    rows: Array.from({ length: rounds }, (_, i) => {
      const os = transports.map((t) => oursRounds.get(t)?.[i]);
      const fl = floors.map((f) => floorRounds.get(f.name)?.[i]);
      const oursW = oursRounds.get('ours')?.[i];
      const ratio = (a: LoopWindow | undefined, b: LoopWindow | undefined): string =>
        a === undefined ? '–' : loopRatio(a, b);
      return [
        i + 1,
        ...os.map((w) => (w === undefined ? '–' : w.meanLoopMs / 1000)),
        ...fl.map((w) => (w === undefined ? '–' : w.meanLoopMs / 1000)),
        ...os.flatMap((o) => fl.map((w) => ratio(o, w))),
        ...(transports.includes('ours') ? libraries.map((t) => ratio(oursRounds.get(t)?.[i], oursW)) : []),
      ];
    }),
  };
  const servedBy: { name: string; w: LoopWindow | undefined }[] = transports.map((t) => ({
    name: ratioName(t),
    w: oursOf(t),
  }));
  const sections: Section[] = [
    {
      title:
        `cluster-autoscaler ${version} main loop, ${total} nodes in ${groups} groups, scan interval 10 s ` +
        `(mean of ${rounds} rounds of ${loops} loops after the first, from its cluster_autoscaler_function_duration_seconds{function="main"}; ` +
        `${cpus().length} CPUs, load average ${load1} / ${load5} / ${load15} at the end)`,
      header: ['server', 'loops', 'main loop (s)', 'calls/loop', 'server CPU s/loop', 'server CPU ms/call'],
      rows,
    },
    byRound,
    {
      title: 'calls per loop by method (the autoscaler asks the same of each)',
      header: ['method', ...servedBy.map((s) => s.name), ...floors.map((f) => shortName(f.name))],
      rows: methods.map((m) => [
        m,
        ...servedBy.map((s) => perLoop(s.w, m)),
        ...floors.map((f) => perLoop(floorOf(f.name), m)),
      ]),
    },
    {
      title:
        `scale-ups considered per loop, from the autoscaler's log (${opts.pendingPods} pending pods; ` +
        'every loop should choose a best option and have its scale-up refused, with no pricing failures)',
      header: ['log line', ...servedBy.map((s) => s.name), ...floors.map((f) => shortName(f.name))],
      rows: Object.keys(ScaleUpLog).map((k) => {
        const per = (w: LoopWindow | undefined): number | string =>
          w === undefined || w.loops === 0 ? '–' : (w.scaleUps.get(k) ?? 0) / w.loops;
        return [k, ...servedBy.map((s) => per(s.w)), ...floors.map((f) => per(floorOf(f.name)))];
      }),
    },
    ...ours.profile,
  ];
  for (const t of sections) printTable(t.title, t.header, t.rows);
  const file = path.join(
    repoRoot,
    'test',
    'bench',
    'results',
    profileDir !== undefined
      ? 'autoscaler-profile.md'
      : comparesTransports || first.transport !== 'ours'
        ? 'autoscaler-transports.md'
        : 'autoscaler.md',
  );
  const transportNote = comparesTransports
    ? ` Our server runs once per transport (BENCH_CA_TRANSPORTS=${transports.join(',')}), the same handlers, caches and answers on each: ` +
      transports.map(label).join('; ') +
      ' (test/bench/transports/: the library adapters, tuned as docs/performance.md "Transport choice" says); ' +
      'every round runs each of them, then each floor. All our servers live in the benchmark process: server CPU of ours is that ' +
      'whole process while the one measured serves (the idle ones cost nothing measurable).'
    : '';
  const md = [
    profileDir !== undefined
      ? '# CPU profile of our externalgrpc server under the cluster-autoscaler'
      : comparesTransports
        ? '# cluster-autoscaler loop: our server on each gRPC transport against the Go and Node floors'
        : '# cluster-autoscaler loop: our server against the Go and Node floors',
    '',
    `Written by \`${profileDir === undefined ? '' : 'MCM_BENCH_CPU_PROFILE=DIR '}${comparesTransports ? `BENCH_CA_TRANSPORTS=${transports.join(',')} ` : ''}npm run bench autoscaler\` (test/bench/autoscaler.bench.ts) on ${new Date().toISOString()}, ` +
      `node ${process.version}, ${cpus().length} CPUs, load average ${load1} / ${load5} / ${load15} (1 / 5 / 15 min) at the end.`,
    '',
    `${total} Machines and Nodes in ${groups} MachineDeployments written into a real kube-apiserver; cluster-autoscaler ${version} ` +
      '(`--scan-interval=10s`, `--expander=price`, scale-down off) runs against our server (its gRPC transport on node:http2, lib/autoscaler/grpc.ts; reading the shared informers), against ' +
      'the Go floor (test/bench/anchor/grpcfloor: grpc-go, every answer encoded at start-up) and against the Node floor ' +
      '(test/bench/grpcfloor-node.ts: node:http2, every answer encoded at start-up: what Node itself costs ' +
      `per call), on the same control plane, in ${rounds} rounds that alternate them (a fresh autoscaler each time). ` +
      `Every loop prices a scale-up: ${opts.pendingPods} pending pods fit every group's template and no Node, so each group is an ` +
      'option the price expander prices (PricingNodePrice per option, PricingPodPrice per pod and option); the cheapest ' +
      "group's IncreaseSize is refused (the API server's ValidatingAdmissionPolicy refuses our write; the floors refuse too) and " +
      "backs off for 1 s, so nothing changes between loops. Every group carries gardener's option annotations " +
      '(NodeGroupGetOptions answers options merged over the defaults); prices come from the class annotation and, for every ' +
      "other group, the deployment's. The floors serve our server's answers, recorded before the loops and checked to match. " +
      'Main loop: the autoscaler\'s own `cluster_autoscaler_function_duration_seconds{function="main"}`, mean over the loops after ' +
      "each start's first. Server CPU: our whole process (process.cpuUsage) and each floor's (getrusage; process.cpuUsage), over the same loops; per call: " +
      'divided by the calls the server counted.' +
      transportNote +
      (profileDir === undefined
        ? ''
        : ' This run had the V8 CPU profiler on in our process, which slows it: read the loop times of `autoscaler.md`.'),
    '',
    ...sections.flatMap((t) => [`## ${t.title}`, '', markdownTable(t.header, t.rows), '']),
  ].join('\n');
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, md + earlierRuns(file));
  console.log(`\n(results written to ${path.relative(process.cwd(), file)})`);
}

export async function benchAutoscaler(): Promise<void> {
  const nodes = Number(process.env.BENCH_NODES ?? 5000);
  const groups = Number(process.env.BENCH_GROUPS ?? 100);
  const pendingPods = Number(process.env.BENCH_PENDING_PODS ?? 10);
  const perGroup = Math.ceil(nodes / groups);
  const cp = await startControlPlane({ installCRDs: true });
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 2000, burst: 2000, userAgent: 'bench' });
  const servers: { transport: string; server: AutoscalerServer; registry: Registry }[] = [];
  let informers: SharedInformers | undefined;
  try {
    const t0 = Date.now();
    const work: (() => Promise<unknown>)[] = [];
    await client.create<MachineClass>(MachineClassResource, {
      apiVersion: API_VERSION,
      kind: 'MachineClass',
      metadata: { name: CLASS, namespace: NS, annotations: { [PRICE_ANNOTATION]: CLASS_PRICE } },
      provider: 'virtual',
      providerSpec: {},
      nodeTemplate: {
        capacity: { cpu: '4', memory: '8Gi', pods: '110' },
        instanceType: 'bench.4x8',
        region: 'bench',
        zone: 'bench-a',
      },
    });
    const deployments: MachineDeployment[] = [];
    for (let g = 0; g < groups; g++) {
      const name = `pool-${g}`;
      const price = groupPrice(g);
      const mcd = await client.create<MachineDeployment>(MachineDeploymentResource, {
        apiVersion: API_VERSION,
        kind: 'MachineDeployment',
        metadata: {
          name,
          namespace: NS,
          annotations: {
            [GroupAnnotation.MinSize]: '0',
            [GroupAnnotation.MaxSize]: String(perGroup * 2),
            ...GROUP_OPTIONS,
            ...(price === undefined ? {} : { [PRICE_ANNOTATION]: price }),
          },
        },
        spec: {
          replicas: perGroup,
          selector: { matchLabels: { pool: name } },
          strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
          template: {
            metadata: { labels: { pool: name } },
            spec: { class: { kind: 'MachineClass', name: CLASS } },
          },
        },
      });
      deployments.push(mcd);
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
            spec: { class: { kind: 'MachineClass', name: CLASS } },
          },
        },
      });
      for (let i = 0; i < perGroup; i++) {
        const m = `${name}-m${i}`;
        const providerID = `virtual://bench/${m}`;
        work.push(async () => {
          await client.create<Machine>(MachineResource, {
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
            spec: { class: { kind: 'MachineClass', name: CLASS }, providerID },
          });
          // Joined: the autoscaler counts a node as its group's only once its machine is past Pending.
          await client.patch(
            MachineResource,
            m,
            { status: { currentStatus: { phase: 'Running', lastUpdateTime: new Date().toISOString() } } },
            { type: 'merge', namespace: NS, subresource: 'status' },
          );
        });
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
          // The API server gives a new Node the not-ready taint; the node lifecycle controller
          // (not running here) removes it once the node is Ready. With it, the autoscaler counts
          // the node as not started, and as unready as soon as a group answers options
          // (kubernetes/autoscaler#10245).
          await client.patch(CoreResources.nodes, m, { spec: { taints: null } }, { type: 'merge' });
        });
      }
    }
    await pool(work, 64, (w) => w());
    const setupS = (Date.now() - t0) / 1000;

    const registry = newRegistry();
    informers = new SharedInformers({ client, target: client, namespace: NS, logger: nullLogger, registry });
    // Our server once per transport asked for (BENCH_CA_TRANSPORTS), on the same informers; each
    // counts its calls in a registry of its own (the first in the informers' one).
    for (const [i, transport] of transportsAsked().entries()) {
      const own = i === 0 ? registry : newRegistry();
      servers.push({
        transport,
        registry: own,
        server: new AutoscalerServer({
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
          registry: own,
          unhealthy: () => undefined,
          transport: TRANSPORTS[transport]?.factory,
        }),
      });
    }
    informers.start();
    await informers.waitForSync();
    for (const s of servers) await s.server.start();
    const server = servers[0]?.server;
    if (server === undefined) throw new Error('no server');
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

    const version = newestAutoscalerVersion();
    const why = autoscalerUnavailableReason(version);
    if (why !== undefined) {
      ca.close();
      console.log(`cluster-autoscaler loop time not measured: ${why}`);
      return;
    }
    await refuseScaleUps(client);
    await createPendingPods(client, pendingPods);
    const { answers, probes } = await recordAnswers(ca, deployments);
    ca.close();
    await compareLoops({
      cp,
      servers: servers.map((s) => ({ transport: s.transport, port: s.server.port, registry: s.registry })),
      version,
      groups,
      perGroup,
      pendingPods,
      answers,
      probes,
    });
  } finally {
    for (const s of servers) await s.server.stop();
    await informers?.stop();
    client.close();
    await cp.stop();
  }
}
