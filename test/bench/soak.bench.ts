// Soak: one manager, run as users run it (`node dist/cmd/manager.js`, virtual provider, the
// externalgrpc server on with mTLS), under churn for MCM_BENCH_SOAK_MINUTES (default 30) on a real
// control plane with kube-scheduler, kube-controller-manager, kwok and the real cluster-autoscaler.
// Churn: a MachineDeployment scaled up and down (a fixed pseudo-random sequence), a rolling update
// (MachineClass change) every few minutes, and the cluster-autoscaler growing and shrinking a second,
// autoscaled MachineDeployment as the replicas of a workload whose pods each need a node of it
// change. The manager's RSS, V8 heap used and CPU are sampled every 15 s; the verdict on whether
// memory is flat comes from a least-squares slope of the post-GC heap baseline over the second half.

import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { MachineDeploymentResource, type Machine, type MachineDeployment } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { metricsText } from '../harness/http.js';
import { ManagedProcess, freePort, waitUntil } from '../harness/process.js';
import { autoscalerUnavailableReason, newestAutoscalerVersion, repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS, nodeTemplate } from '../integration/env/lifecycle.js';
import { managerNodeFlags } from './entrypoint.js';
import { printTable } from './table.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';

const SAMPLE_MS = 15_000;
/** The churned deployment's size range, and the autoscaled group's bounds (≤ 40 machines in all). */
const SCALE_MIN = 5;
const SCALE_MAX = 30;
const GROUP_MIN = 1;
const GROUP_MAX = 8;
/** Churn periods: a scale of `soak`, a class change of `soak`, a new pod count for the group. */
const SCALE_EVERY_MS = 45_000;
const ROLLOUT_EVERY_MS = 240_000;
const ROLLOUT_FIRST_MS = 60_000;
const PODS_EVERY_MS = 75_000;
/**
 * Memory is called flat when the heap baseline grows by less than this. Why 5 MiB/h: the heap
 * baseline of the manager here is ~20 MiB; a leak of one retained object graph of ~5 KiB (a
 * closure, a timer, a cached object) per VM created or deleted (~1,000 an hour under this churn)
 * shows as ≥ 5 MiB/h, and an unbounded cache of every machine ever seen as more. A growth below
 * 5 MiB/h would take 4 hours to double the heap and is also near what three 5-minute minima can
 * resolve in a 30-minute run: the baseline moves by about a MiB with the number of machines alive
 * at the moment of the minimum. So the verdict is "flat" below the threshold, "growing" when the
 * slope exceeds it by two standard errors, and "inconclusive" in between.
 */
const FLAT_MIB_PER_HOUR = 5;
const MiB = 1024 * 1024;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A small deterministic PRNG (mulberry32), so that every run issues the same sequence. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Sum of a metric's samples whose labels contain every given label; NaN when there is none. */
function metric(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
    found = true;
  }
  return found ? sum : NaN;
}

/** Resident set (VmRSS) and CPU seconds (user + system) of a process, from /proc. */
function procUsage(pid: number): { rssBytes: number; cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { rssBytes: rss, cpuSeconds: (Number(fields[11] ?? 0) + Number(fields[12] ?? 0)) / 100 };
}

interface Counters {
  vmsCreated: number;
  vmsDeleted: number;
  increaseSize: number;
  deleteNodes: number;
}

function counters(text: string): Counters {
  const driverCalls = (operation: string): number =>
    metric(text, 'mcm_cloud_api_driver_request_duration_seconds_count', { operation });
  const grpc = (method: string): number => metric(text, 'mcm_autoscaler_grpc_requests_total', { method });
  const z = (n: number): number => (Number.isNaN(n) ? 0 : n);
  return {
    vmsCreated: z(driverCalls('create_machine')),
    vmsDeleted: z(driverCalls('delete_machine')),
    increaseSize: z(grpc('NodeGroupIncreaseSize')),
    deleteNodes: z(grpc('NodeGroupDeleteNodes')),
  };
}

interface Sample extends Counters {
  /** ms since the churn started. */
  t: number;
  rss: number;
  heapUsed: number;
  cpuSeconds: number;
}

type OpKind = 'scale' | 'rollout' | 'pods';
interface Op {
  t: number;
  kind: OpKind;
  what: string;
  error?: string;
}

/** Least-squares line through (x, y): slope and its standard error (NaN with fewer than 3 points). */
export function fitLine(points: [number, number][]): { slope: number; stderr: number } {
  const n = points.length;
  if (n < 2) return { slope: NaN, stderr: NaN };
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (const [x, y] of points) {
    sxx += (x - mx) ** 2;
    sxy += (x - mx) * (y - my);
  }
  if (sxx === 0) return { slope: NaN, stderr: NaN };
  const slope = sxy / sxx;
  if (n < 3) return { slope, stderr: NaN };
  let sse = 0;
  for (const [x, y] of points) sse += (y - (my + slope * (x - mx))) ** 2;
  return { slope, stderr: Math.sqrt(sse / (n - 2) / sxx) };
}

/** Whether a MachineDeployment is complete, from the API server: its status and its machines. */
async function deploymentState(
  lc: LifecycleEnv,
  name: string,
): Promise<{ done: boolean; replicas: number; detail: string }> {
  const d = await lc.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);
  const replicas = d.spec?.replicas ?? 0;
  const cls = d.spec?.template.spec?.class?.name ?? '';
  const s = d.status ?? {};
  const ms = await lc.machines(name);
  const live = ms.filter((m) => m.metadata.deletionTimestamp === undefined);
  const running = live.filter((m) => m.status?.currentStatus?.phase === 'Running').length;
  const wrongClass = live.filter((m) => m.spec?.class?.name !== cls).length;
  const done =
    (s.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
    s.replicas === replicas &&
    s.updatedReplicas === replicas &&
    s.readyReplicas === replicas &&
    s.availableReplicas === replicas &&
    ms.length === replicas &&
    running === replicas &&
    wrongClass === 0;
  const detail =
    `${name}: ${replicas} replicas, status ${s.replicas ?? 0}/${s.updatedReplicas ?? 0}/${s.readyReplicas ?? 0}/` +
    `${s.availableReplicas ?? 0} (replicas/updated/ready/available), ${ms.length} machines ` +
    `(${ms.length - live.length} deleting, ${running} Running, ${wrongClass} not of class ${cls})`;
  return { done, replicas, detail };
}

/** VMs (Nodes labelled virtual.mcm-ts.io/vm=true) whose machine is gone or being deleted. */
async function orphanVMs(lc: LifecycleEnv): Promise<string[]> {
  const nodes = (
    await lc.client.list<Node>(CoreResources.nodes, { labelSelector: 'virtual.mcm-ts.io/vm=true' })
  ).items;
  const live = new Set(
    (await lc.machines())
      .filter((m: Machine) => m.metadata.deletionTimestamp === undefined)
      .map((m) => `${NS}/${m.metadata.name ?? ''}`),
  );
  return nodes
    .filter((n) => !live.has(n.metadata.annotations?.['virtual.mcm-ts.io/machine'] ?? ''))
    .map((n) => n.metadata.name ?? '');
}

interface Window {
  from: number;
  to: number;
  samples: Sample[];
  ops: Op[];
  /** Counter increases from the last sample before the window to its last sample. */
  delta: Counters;
  cpuPercent: number;
}

function windows(samples: Sample[], ops: Op[], windowMs: number, totalMs: number): Window[] {
  const out: Window[] = [];
  for (let from = 0; from < totalMs - 1000; from += windowMs) {
    const to = Math.min(totalMs, from + windowMs);
    const last = to >= totalMs;
    const inside = samples.filter((s) => s.t >= from && (s.t < to || (last && s.t < to + SAMPLE_MS)));
    const before = [...samples].reverse().find((s) => s.t < from) ?? samples[0];
    const end = inside[inside.length - 1];
    if (inside.length === 0 || before === undefined || end === undefined) continue;
    const d = (k: keyof Counters): number => end[k] - before[k];
    out.push({
      from,
      to,
      samples: inside,
      ops: ops.filter((o) => o.t >= from && o.t < to),
      delta: {
        vmsCreated: d('vmsCreated'),
        vmsDeleted: d('vmsDeleted'),
        increaseSize: d('increaseSize'),
        deleteNodes: d('deleteNodes'),
      },
      cpuPercent:
        end.t > before.t ? (100 * (end.cpuSeconds - before.cpuSeconds)) / ((end.t - before.t) / 1000) : NaN,
    });
  }
  return out;
}

const mib = (b: number): string => (b / MiB).toFixed(1);
const minutes = (ms: number): string => String(Math.round((ms / 60_000) * 10) / 10);
const slopeText = (f: { slope: number; stderr: number }): string =>
  Number.isNaN(f.slope)
    ? 'n/a (too few points)'
    : `${f.slope >= 0 ? '+' : ''}${f.slope.toFixed(1)} MiB/h${Number.isNaN(f.stderr) ? '' : ` (± ${f.stderr.toFixed(1)})`}`;

export async function benchSoak(): Promise<void> {
  const totalMinutes = Number(process.env.MCM_BENCH_SOAK_MINUTES ?? '30');
  if (!(totalMinutes > 0))
    throw new Error(`MCM_BENCH_SOAK_MINUTES: "${process.env.MCM_BENCH_SOAK_MINUTES ?? ''}"`);
  const totalMs = totalMinutes * 60_000;
  // 5-minute windows; a short (development) run gets six windows so that there is something to fit.
  const windowMs = Math.min(
    300_000,
    Math.max(SAMPLE_MS * 2, Math.round(totalMs / 6 / SAMPLE_MS) * SAMPLE_MS),
  );
  const version = newestAutoscalerVersion();
  const unavailable = autoscalerUnavailableReason(version);
  if (unavailable !== undefined) throw new Error(`soak needs cluster-autoscaler ${version}: ${unavailable}`);

  console.log(
    `\nsoak: ${totalMinutes} min of churn on one manager (cluster-autoscaler ${version}); sampling every ${SAMPLE_MS / 1000} s`,
  );
  const lc = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
  let manager: ManagedProcess | undefined;
  let ca: Autoscaler | undefined;
  try {
    const tls = writeMtlsBundle(mkdtempSync(path.join(os.tmpdir(), 'mcm-soak-tls-')), createMtlsBundle());
    const grpcPort = await freePort();
    const port = await freePort();
    const kubeconfig = lc.cp.kubeconfigPath;
    manager = new ManagedProcess({
      name: 'manager',
      command: process.execPath,
      args: [
        ...managerNodeFlags(repoRoot),
        path.join(repoRoot, 'dist', 'cmd', 'manager.js'),
        `--control-kubeconfig=${kubeconfig}`,
        `--target-kubeconfig=${kubeconfig}`,
        `--namespace=${NS}`,
        '--leader-elect=true',
        '--address=127.0.0.1',
        `--port=${port}`,
        '--v=2',
        '--log-format=json',
        `--grpc-address=127.0.0.1:${grpcPort}`,
        `--grpc-tls-cert-file=${tls.serverCertFile}`,
        `--grpc-tls-key-file=${tls.serverKeyFile}`,
        `--grpc-client-ca-file=${tls.caFile}`,
        '--machine-drain-timeout=30s',
      ],
      logFile: path.join(lc.cp.workDir, 'manager.log'),
    });
    manager.start();
    const proc = manager;
    await waitUntil(
      'the manager leads',
      async () =>
        (await metricsText(port)).includes(
          'leader_election_master_status{name="machine-controller-manager"} 1',
        ),
      { timeoutMs: 90_000, process: proc },
    );
    const pid = proc.pid ?? 0;

    for (const [name, spec] of [
      ['v1', {}],
      ['v2', { apiLatency: '100ms' }],
    ] as const) {
      await lc.createClass(name, spec, {
        nodeTemplate: nodeTemplate({ capacity: { cpu: '2', memory: '4Gi', pods: '20' }, zone: 'soak-a' }),
      });
    }
    await lc.createDeployment('soak', SCALE_MIN, 'v1');
    await lc.createDeployment(
      'group',
      GROUP_MIN,
      'v1',
      {},
      { nodeTemplate: { metadata: { labels: { pool: 'group' } } } },
    );
    await lc.client.patch(
      MachineDeploymentResource,
      'group',
      {
        metadata: {
          annotations: {
            [GroupAnnotation.MinSize]: String(GROUP_MIN),
            [GroupAnnotation.MaxSize]: String(GROUP_MAX),
          },
        },
      },
      { type: 'merge', namespace: NS },
    );
    await lc.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: 'group-pods', namespace: NS, pool: 'group', replicas: GROUP_MIN }),
    );
    const runningPods = async (): Promise<number> =>
      (
        await lc.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: 'app=group-pods' })
      ).items.filter(
        (p) =>
          p.metadata.deletionTimestamp === undefined &&
          p.spec?.nodeName !== undefined &&
          p.status?.phase === 'Running',
      ).length;
    await waitUntil(
      'both deployments complete and the pod running',
      async () =>
        (await deploymentState(lc, 'soak')).done &&
        (await deploymentState(lc, 'group')).done &&
        (await runningPods()) === GROUP_MIN,
      { timeoutMs: 180_000, intervalMs: 1000, process: proc },
    );
    ca = await startAutoscaler({
      version,
      controlPlane: lc.cp,
      address: `127.0.0.1:${grpcPort}`,
      tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
      grpcTimeout: '10s',
      verbosity: 2,
    });

    // ---- churn and sampling ----
    const samples: Sample[] = [];
    const ops: Op[] = [];
    const t0 = Date.now();
    const sample = async (): Promise<void> => {
      const text = await metricsText(port);
      const u = procUsage(pid);
      samples.push({
        t: Date.now() - t0,
        rss: u.rssBytes,
        heapUsed: metric(text, 'nodejs_heap_size_used_bytes'),
        cpuSeconds: u.cpuSeconds,
        ...counters(text),
      });
    };
    const rand = prng(12);
    const between = (lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1));
    const op = async (kind: OpKind, what: string, write: () => Promise<unknown>): Promise<void> => {
      const o: Op = { t: Date.now() - t0, kind, what };
      try {
        await write();
      } catch (err) {
        o.error = err instanceof Error ? err.message : String(err);
      }
      ops.push(o);
    };
    let nextSample = 0;
    let nextScale = 0;
    let nextRollout = ROLLOUT_FIRST_MS;
    let nextPods = 0;
    let cls = 'v1';
    let pods = GROUP_MIN;
    for (;;) {
      if (!proc.running) throw new Error(`the manager exited during the soak:\n${proc.tail(40)}`);
      const now = Date.now() - t0;
      if (now >= nextSample) {
        await sample();
        nextSample += SAMPLE_MS;
        const s = samples[samples.length - 1];
        if (s !== undefined && samples.length % 4 === 1) {
          console.log(
            `  ${minutes(s.t)} min: RSS ${mib(s.rss)} MiB, heap used ${mib(s.heapUsed)} MiB, ${ops.length} operations`,
          );
        }
      }
      if (now >= totalMs) break;
      if (now >= nextScale) {
        const n = between(SCALE_MIN, SCALE_MAX);
        await op('scale', `soak → ${n}`, () => lc.scale('soak', n));
        nextScale += SCALE_EVERY_MS;
      }
      if (now >= nextRollout) {
        cls = cls === 'v1' ? 'v2' : 'v1';
        const to = cls;
        await op('rollout', `soak class → ${to}`, () =>
          lc.client.patch(
            MachineDeploymentResource,
            'soak',
            { spec: { template: { spec: { class: { kind: 'MachineClass', name: to } } } } },
            { type: 'merge', namespace: NS },
          ),
        );
        nextRollout += ROLLOUT_EVERY_MS;
      }
      if (now >= nextPods) {
        pods = between(GROUP_MIN, GROUP_MAX);
        const n = pods;
        await op('pods', `group-pods → ${n}`, () =>
          lc.client.patch(
            AppsDeployments,
            'group-pods',
            { spec: { replicas: n } },
            { type: 'merge', namespace: NS },
          ),
        );
        nextPods += PODS_EVERY_MS;
      }
      await sleep(
        Math.max(50, Math.min(nextSample, nextScale, nextRollout, nextPods, totalMs) - (Date.now() - t0)),
      );
    }

    // ---- convergence ----
    const c0 = Date.now();
    let converged = false;
    let states: string[] = [];
    try {
      await waitUntil(
        'convergence after the churn',
        async () => {
          const soak = await deploymentState(lc, 'soak');
          const group = await deploymentState(lc, 'group');
          const r = await runningPods();
          states = [soak.detail, group.detail, `group-pods: ${r} of ${pods} Running`];
          return soak.done && group.done && r === pods;
        },
        { timeoutMs: 600_000, intervalMs: 2000, process: proc },
      );
      converged = true;
    } catch {
      // reported below
    }
    const convergeSeconds = (Date.now() - c0) / 1000;
    const orphans = await orphanVMs(lc);
    const finalUsage = procUsage(pid);

    // ---- report ----
    const ws = windows(samples, ops, windowMs, totalMs);
    const half = totalMs / 2;
    const hours = (ms: number): number => ms / 3_600_000;
    const secondHalf = ws.filter((w) => w.from >= half);
    const heapPoints = secondHalf.map((w): [number, number] => {
      const min = w.samples.reduce((m, s) => (s.heapUsed < m.heapUsed ? s : m));
      return [hours(min.t), min.heapUsed / MiB];
    });
    const heapFit = fitLine(heapPoints);
    const heapFitAll = fitLine(
      ws.slice(1).map((w): [number, number] => {
        const min = w.samples.reduce((m, s) => (s.heapUsed < m.heapUsed ? s : m));
        return [hours(min.t), min.heapUsed / MiB];
      }),
    );
    const rssFit = fitLine(
      samples.filter((s) => s.t >= half).map((s): [number, number] => [hours(s.t), s.rss / MiB]),
    );
    const failedOps = ops.filter((o) => o.error !== undefined);
    const memory = Number.isNaN(heapFit.slope)
      ? 'not judged'
      : heapFit.slope < FLAT_MIB_PER_HOUR
        ? 'flat'
        : heapFit.slope - 2 * (Number.isNaN(heapFit.stderr) ? 0 : heapFit.stderr) >= FLAT_MIB_PER_HOUR
          ? 'growing'
          : 'inconclusive (not shown flat)';

    const header = [
      'window (min)',
      'RSS min–max (MiB)',
      'heap used min–max (MiB)',
      'CPU %',
      'scales',
      'rollouts',
      'pod changes',
      'CreateMachine calls',
      'DeleteMachine calls',
      'CA IncreaseSize',
      'CA DeleteNodes',
    ];
    const rows = ws.map((w) => {
      const rss = w.samples.map((s) => s.rss);
      const heap = w.samples.map((s) => s.heapUsed);
      const count = (k: OpKind): string => String(w.ops.filter((o) => o.kind === k).length);
      return [
        `${minutes(w.from)}–${minutes(w.to)}`,
        `${mib(Math.min(...rss))}–${mib(Math.max(...rss))}`,
        `${mib(Math.min(...heap))}–${mib(Math.max(...heap))}`,
        Number.isNaN(w.cpuPercent) ? '-' : w.cpuPercent.toFixed(1),
        count('scale'),
        count('rollout'),
        count('pods'),
        String(w.delta.vmsCreated),
        String(w.delta.vmsDeleted),
        String(w.delta.increaseSize),
        String(w.delta.deleteNodes),
      ];
    });
    const verdict = [
      `- Heap baseline (minimum heap used per window) over the second half: ${slopeText(heapFit)} ` +
        `from ${heapPoints.length} windows; over every window after the first: ${slopeText(heapFitAll)}.`,
      `- RSS over the second half (${samples.filter((s) => s.t >= half).length} samples): ${slopeText(rssFit)}.`,
      `- Verdict: memory is **${memory}** (flat: a heap-baseline slope below ${FLAT_MIB_PER_HOUR} MiB/h over the ` +
        `second half; growing: above it by two standard errors${Number.isNaN(heapFit.slope) ? '; the run was too short to fit one' : ''}).`,
      `- Converged after the churn: **${converged ? 'yes' : 'no'}** in ${convergeSeconds.toFixed(0)} s ` +
        `(${states.join('; ')}); orphan VMs: **${orphans.length}**${orphans.length > 0 ? ` (${orphans.join(', ')})` : ''}.`,
      `- ${ops.length} operations issued (${failedOps.length} failed${
        failedOps.length > 0
          ? `: ${failedOps
              .slice(0, 3)
              .map((o) => `${o.what}: ${o.error ?? ''}`)
              .join('; ')}`
          : ''
      }); manager CPU ${finalUsage.cpuSeconds.toFixed(0)} s in all, ` +
        `RSS ${mib(finalUsage.rssBytes)} MiB at the end.`,
    ];
    const md = [
      '# Soak',
      '',
      `Written by \`npm run bench soak\` (test/bench/soak.bench.ts) on ${new Date().toISOString()}, node ${process.version}, ` +
        `${os.cpus().length} CPUs, cluster-autoscaler ${version}.`,
      '',
      `One manager (\`node dist/cmd/manager.js\`, virtual provider, externalgrpc server with mTLS, QPS 20 / burst 30) ` +
        `for ${totalMinutes} min on a real kube-apiserver with kube-scheduler, kube-controller-manager and kwok. Churn: ` +
        `MachineDeployment \`soak\` scaled every ${SCALE_EVERY_MS / 1000} s to a pseudo-random size in ${SCALE_MIN}–${SCALE_MAX} ` +
        `(fixed seed), its MachineClass changed (rolling update, maxSurge 1) every ${ROLLOUT_EVERY_MS / 60_000} min from ` +
        `minute ${ROLLOUT_FIRST_MS / 60_000}, and the workload \`group-pods\` (one pod per node) set every ` +
        `${PODS_EVERY_MS / 1000} s to ${GROUP_MIN}–${GROUP_MAX} pods, which the cluster-autoscaler serves by growing and ` +
        `shrinking the autoscaled MachineDeployment \`group\` (min ${GROUP_MIN}, max ${GROUP_MAX}) through the gRPC server. ` +
        `RSS (VmRSS), V8 heap used (\`nodejs_heap_size_used_bytes\` of /metrics) and CPU are sampled every ${SAMPLE_MS / 1000} s; ` +
        `driver and autoscaler calls are the manager's own counters (\`mcm_cloud_api_driver_request_duration_seconds_count\`, \`mcm_autoscaler_grpc_requests_total\`).`,
      '',
      `| ${header.join(' | ')} |`,
      `|${header.map(() => '---').join('|')}|`,
      ...rows.map((r) => `| ${r.join(' | ')} |`),
      '',
      ...verdict,
      '',
    ].join('\n');
    printTable(
      `Soak: ${totalMinutes} min, one manager, per ${minutes(windowMs)}-minute window`,
      header,
      rows,
    );
    console.log(`\n${verdict.join('\n').replaceAll('**', '')}`);
    const file =
      process.env.MCM_BENCH_SOAK_RESULTS ?? path.join(repoRoot, 'test', 'bench', 'results', 'soak.md');
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, md);
    console.log(
      `\n(results written to ${path.relative(process.cwd(), file)}; MCM_BENCH_SOAK_MINUTES sets the length, default 30, ` +
        'MCM_BENCH_SOAK_RESULTS the file)',
    );
  } finally {
    await ca?.stop();
    await manager?.stop(10_000);
    await lc.stop();
  }
}
