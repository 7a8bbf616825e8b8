// The fault suite's environment: a real control plane (test/harness), our manager as real child
// processes (`node dist/cmd/manager.js`, two replicas with leader election, supervised like a
// kubelet would), and the etcd recorder from the first write on.

import http from 'node:http';
import path from 'node:path';

import { expect } from 'chai';

import {
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import type { ControlPlaneOptions } from '../harness/controlplane.js';
import { ManagedProcess, freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { analyze, isDeleting, type Analysis } from './analysis.js';
import { Recorder, type RecordedEvent } from './recorder.js';
import { recordRow } from './results.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

/** MCM_CHAOS_REDUCED=1: smaller sizes, so that the suite fits a CI budget. */
export const REDUCED = process.env.MCM_CHAOS_REDUCED === '1';

/**
 * describe() for a scenario of the full run only. The reduced run (CI's, on every submission) must
 * fit its time budget; these scenarios' failures are covered there by others (leader loss: 2;
 * kube-apiserver restart: 3a; the autoscaler during a rollout: the e2e suite) and by the
 * integration suite (provider errors and latency). The reduced run does not register them at all,
 * so nothing is reported skipped; README's testing page names them.
 */
export function fullRunOnly(title: string, fn: (this: Mocha.Suite) => void): void {
  if (!REDUCED) describe(title, fn);
}

/** A size for the full run, or the reduced one. */
export function size(full: number, reduced: number): number {
  return REDUCED ? reduced : full;
}

function httpGet(port: number, p: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = http.get(`http://127.0.0.1:${port}${p}`, { timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => {
      resolve({ status: 0, body: '' });
    });
  });
}

const LEADING = 'leader_election_master_status{name="machine-controller-manager"} 1';

/**
 * One replica of the manager, run as users run it. When it exits without the test having killed
 * it (it exits on purpose when it loses its Lease), it is started again after 1, 2, 4 … 10 s, as
 * the kubelet restarts a container; those restarts are counted and reported.
 */
export class ManagerReplica {
  readonly proc: ManagedProcess;
  /** Exits the test did not cause. */
  readonly exits: { at: number; code: number | null }[] = [];
  private killed = false;
  private stopping = false;
  private restartTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly name: string,
    readonly port: number,
    args: string[],
    logFile: string,
  ) {
    this.proc = new ManagedProcess({
      name,
      command: process.execPath,
      args: [managerScript, ...args, `--port=${port}`],
      logFile,
    });
  }

  start(): void {
    this.proc.start();
    void this.proc.waitExit().then((code) => {
      this.onExit(code);
    });
  }

  private onExit(code: number | null): void {
    if (this.killed || this.stopping) return;
    this.exits.push({ at: Date.now(), code });
    const delay = Math.min(10_000, 1000 * 2 ** (this.exits.length - 1));
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (!this.killed && !this.stopping) this.start();
    }, delay);
  }

  get alive(): boolean {
    return this.proc.running;
  }

  /** kill -9, and it stays dead (no restart). */
  async kill9(): Promise<void> {
    this.killed = true;
    if (this.restartTimer !== undefined) clearTimeout(this.restartTimer);
    await this.proc.kill();
  }

  async leading(): Promise<boolean> {
    if (!this.proc.running) return false;
    return (await httpGet(this.port, '/metrics')).body.includes(LEADING);
  }

  /** The replica's /metrics text ('' when it does not answer). */
  async metrics(): Promise<string> {
    if (!this.proc.running) return '';
    return (await httpGet(this.port, '/metrics')).body;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer !== undefined) clearTimeout(this.restartTimer);
    await this.proc.stop(5000);
  }

  tail(lines = 40): string {
    return this.proc.tail(lines);
  }
}

export interface ChaosEnvOptions {
  controlPlane?: ControlPlaneOptions;
  /** --kube-api-qps and --kube-api-burst of the managers (default: the manager's own, 20 and 30). */
  qps?: number;
  burst?: number;
  /** More manager flags (e.g. the gRPC server's). */
  managerFlags?: string[];
  /** Extra flags per replica (index 0 and 1), e.g. different gRPC ports. */
  replicaFlags?: (index: number) => Promise<string[]>;
  /** Manager replicas (default 2). */
  replicas?: number;
}

export interface MeasureSpec {
  /** Row id and title in the results table. */
  id: string;
  title: string;
  deployment: string;
  /** The write that starts the operation (scale, template change, …). */
  start: () => Promise<void>;
  /** Faults injected during the operation; returns notes for the table. */
  during?: () => Promise<string | undefined>;
  /** A note computed at the end (also when the operation failed), e.g. from metrics. */
  report?: () => Promise<string | undefined>;
  /** More to wait for after the deployment converged (e.g. pods running). */
  alsoWaitFor?: () => Promise<string | undefined>;
  timeoutMs: number;
}

export interface Measured {
  analysis: Analysis;
  orphans: string[];
  /**
   * After convergence: each live machine of the deployment with the number of VMs that name it
   * (exactly one is right; empty when the operation did not converge).
   */
  vmsPerMachine: [string, number][];
  convergeMs: number;
}

export class ChaosEnv {
  readonly replicas: ManagerReplica[] = [];
  private constructor(
    readonly lc: LifecycleEnv,
    readonly recorder: Recorder,
  ) {}

  static async start(opts: ChaosEnvOptions = {}): Promise<ChaosEnv> {
    const lc = await LifecycleEnv.start(opts.controlPlane ?? {});
    const recorder = new Recorder(lc.cp.etcdEndpoint);
    const env = new ChaosEnv(lc, recorder);
    try {
      await recorder.start();
      const kubeconfig = lc.cp.kubeconfigPath;
      const common = [
        `--control-kubeconfig=${kubeconfig}`,
        `--target-kubeconfig=${kubeconfig}`,
        `--namespace=${NS}`,
        '--leader-elect=true',
        '--address=127.0.0.1',
        '--v=2',
        '--log-format=json',
        ...(opts.qps === undefined ? [] : [`--kube-api-qps=${opts.qps}`]),
        ...(opts.burst === undefined ? [] : [`--kube-api-burst=${opts.burst}`]),
        ...(opts.managerFlags ?? []),
      ];
      const n = opts.replicas ?? 2;
      for (let i = 0; i < n; i++) {
        const name = `manager-${String.fromCharCode(97 + i)}`;
        const extra = (await opts.replicaFlags?.(i)) ?? [];
        const r = new ManagerReplica(
          name,
          await freePort(),
          [...common, ...extra],
          path.join(lc.cp.workDir, `${name}.log`),
        );
        env.replicas.push(r);
        r.start();
      }
      await env.leader(90_000);
    } catch (err) {
      await env.stop();
      throw err;
    }
    return env;
  }

  get client(): LifecycleEnv['client'] {
    return this.lc.client;
  }

  /** The one replica that leads, once exactly one does. */
  async leader(timeoutMs = 60_000): Promise<ManagerReplica> {
    return until(
      'exactly one leading manager replica',
      async () => {
        const leading: ManagerReplica[] = [];
        for (const r of this.replicas) if (await r.leading()) leading.push(r);
        return leading.length === 1 ? leading[0] : undefined;
      },
      timeoutMs,
    );
  }

  /**
   * Sum over the live replicas of a metric's samples whose labels contain every given label
   * (counters restart with a replica: use this for scenarios without kills).
   */
  async metricSum(name: string, labels: Record<string, string> = {}): Promise<number> {
    let sum = 0;
    for (const r of this.replicas) {
      for (const line of (await r.metrics()).split('\n')) {
        if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
        if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
        sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
      }
    }
    return sum;
  }

  /** Machines of a deployment (by its app label) as the recorder sees them now. */
  machines(app: string): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const e of this.recorder.live.machines.values()) {
      const labels = (e.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
      if (labels?.app === app && e.object !== undefined) out.push(e.object);
    }
    return out;
  }

  /** Machines of a deployment that are not being deleted, and how many of them are Running. */
  counts(app: string, cls?: string): { active: number; running: number } {
    let active = 0;
    let running = 0;
    for (const m of this.machines(app)) {
      if (isDeleting(m)) continue;
      if (cls !== undefined && (m.spec as { class?: { name?: string } }).class?.name !== cls) continue;
      active++;
      if (
        (m.status as { currentStatus?: { phase?: string } } | undefined)?.currentStatus?.phase === 'Running'
      )
        running++;
    }
    return { active, running };
  }

  /**
   * Whether the deployment is complete, from the recorded state: status replicas, updated,
   * ready and available equal spec.replicas for the current generation, and exactly that many
   * machines exist, none being deleted, all Running and of the current template class.
   */
  convergence(name: string): { done: boolean; detail: string } {
    const d = this.recorder.live.machinedeployments.get(`${NS}/${name}`)?.object as
      | {
          metadata: { generation?: number };
          spec?: { replicas?: number; template?: { spec?: { class?: { name?: string } } } };
          status?: {
            observedGeneration?: number;
            replicas?: number;
            updatedReplicas?: number;
            readyReplicas?: number;
            availableReplicas?: number;
          };
        }
      | undefined;
    if (d === undefined) return { done: false, detail: `no MachineDeployment ${name}` };
    const replicas = d.spec?.replicas ?? 0;
    const cls = d.spec?.template?.spec?.class?.name ?? '';
    const s = d.status ?? {};
    const phases = new Map<string, number>();
    let deleting = 0;
    let wrongClass = 0;
    const ms = this.machines(name);
    for (const m of ms) {
      if (isDeleting(m)) deleting++;
      if ((m.spec as { class?: { name?: string } }).class?.name !== cls) wrongClass++;
      const p =
        (m.status as { currentStatus?: { phase?: string } } | undefined)?.currentStatus?.phase ?? 'creating';
      phases.set(p, (phases.get(p) ?? 0) + 1);
    }
    const detail =
      `${name}: replicas ${replicas}, generation ${d.metadata.generation ?? 0}/${s.observedGeneration ?? 0} observed, ` +
      `status replicas ${s.replicas ?? 0} updated ${s.updatedReplicas ?? 0} ready ${s.readyReplicas ?? 0} available ${s.availableReplicas ?? 0}; ` +
      `${ms.length} machines (${deleting} deleting, ${wrongClass} not of class ${cls}): ` +
      [...phases].map(([p, n]) => `${n} ${p}`).join(', ');
    const done =
      (s.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
      (s.replicas ?? 0) === replicas &&
      (s.updatedReplicas ?? 0) === replicas &&
      (s.readyReplicas ?? 0) === replicas &&
      (s.availableReplicas ?? 0) === replicas &&
      ms.length === replicas &&
      deleting === 0 &&
      wrongClass === 0 &&
      (phases.get('Running') ?? 0) === replicas;
    return { done, detail };
  }

  async waitConverged(name: string, timeoutMs: number): Promise<void> {
    try {
      await until(`${name} converged`, () => this.convergence(name).done, timeoutMs);
      this.recorder.check();
    } catch (err) {
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n${this.convergence(name).detail}\n${this.diagnostics()}`,
        { cause: err },
      );
    }
  }

  /** Manager replicas' state and log tails, for failure messages. */
  diagnostics(): string {
    return this.replicas
      .map(
        (r) =>
          `--- ${r.name} (${r.alive ? 'alive' : 'dead'}, ${r.exits.length} unexpected exits) log tail:\n${r
            .tail(25)
            .split('\n')
            .map((l) => l.slice(0, 400))
            .join('\n')}`,
      )
      .join('\n');
  }

  /**
   * VMs (Nodes labelled virtual.mcm-ts.io/vm=true) whose machine (annotation
   * virtual.mcm-ts.io/machine) does not exist or is being deleted, read from the API server.
   */
  async orphanVMs(): Promise<string[]> {
    const nodes = (
      await this.client.list<Node>(CoreResources.nodes, { labelSelector: 'virtual.mcm-ts.io/vm=true' })
    ).items;
    const machines = (await this.client.list<Machine>(MachineResource, { namespace: NS })).items;
    const live = new Set(
      machines.filter((m) => !isDeleting(m as never)).map((m) => `${NS}/${m.metadata.name ?? ''}`),
    );
    return nodes
      .filter((n) => !live.has(n.metadata.annotations?.['virtual.mcm-ts.io/machine'] ?? ''))
      .map((n) => n.metadata.name ?? '');
  }

  /** Each live machine of a deployment (by name prefix) with the number of VMs that name it. */
  async vmsPerMachine(deployment: string): Promise<[string, number][]> {
    const nodes = (
      await this.client.list<Node>(CoreResources.nodes, { labelSelector: 'virtual.mcm-ts.io/vm=true' })
    ).items;
    const machines = (await this.client.list<Machine>(MachineResource, { namespace: NS })).items.filter(
      (m) => !isDeleting(m as never) && (m.metadata.name ?? '').startsWith(`${deployment}-`),
    );
    const count = new Map(machines.map((m) => [`${NS}/${m.metadata.name ?? ''}`, 0]));
    for (const n of nodes) {
      const key = n.metadata.annotations?.['virtual.mcm-ts.io/machine'] ?? '';
      const c = count.get(key);
      if (c !== undefined) count.set(key, c + 1);
    }
    return [...count].sort(([a], [b]) => a.localeCompare(b));
  }

  async scale(name: string, replicas: number): Promise<void> {
    await this.client.scale(MachineDeploymentResource, name, NS, replicas);
  }

  /** Starts a rollout by changing the template's class. */
  async changeClass(name: string, cls: string): Promise<void> {
    await this.client.patch(
      MachineDeploymentResource,
      name,
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: cls } } } } },
      { type: 'merge', namespace: NS },
    );
  }

  /**
   * Runs one operation as a row of the results table: starts it, injects the faults, waits until
   * the deployment converged, and computes the figures from the recorded timeline of the
   * operation (from the write that started it to convergence). The row is recorded whether the
   * figures pass or not; the test asserts them afterwards.
   */
  async measure(spec: MeasureSpec): Promise<Measured> {
    const fromRev = this.recorder.lastEventRev();
    const restartsBefore = this.replicas.reduce((n, r) => n + r.exits.length, 0);
    const t0 = Date.now();
    const notes: string[] = [];
    let converged = false;
    let convergeMs = 0;
    let measured: Measured;
    try {
      await spec.start();
      // Convergence is judged on the recorded state, which must include the write just made.
      const started = await this.client.get<MachineDeployment>(
        MachineDeploymentResource,
        spec.deployment,
        NS,
      );
      const rv = Number(started.metadata.resourceVersion ?? 0);
      await until(
        'the recorder has the write that started the operation',
        () => (this.recorder.live.machinedeployments.get(`${NS}/${spec.deployment}`)?.rev ?? 0) >= rv,
        30_000,
      );
      const n = await spec.during?.();
      if (n !== undefined) notes.push(n);
      await this.waitConverged(spec.deployment, Math.max(1000, spec.timeoutMs - (Date.now() - t0)));
      const also = await spec.alsoWaitFor?.();
      if (also !== undefined) notes.push(also);
      convergeMs = Date.now() - t0;
      converged = true;
    } finally {
      const toRev = this.recorder.lastEventRev();
      const analysis = analyze(this.recorder.timeline(), {
        namespace: NS,
        deployment: spec.deployment,
        fromRev,
        toRev,
      });
      const orphans = converged ? await this.orphanVMs() : [];
      const vmsPerMachine = converged ? await this.vmsPerMachine(spec.deployment) : [];
      const report = await spec.report?.().catch((err: unknown) => `report failed: ${String(err)}`);
      if (report !== undefined) notes.push(report);
      const restarts = this.replicas.reduce((n, r) => n + r.exits.length, 0) - restartsBefore;
      if (restarts > 0) notes.push(`${restarts} manager exit(s) and restart(s)`);
      notes.push(
        `peak ${analysis.peakActive} machines, ${analysis.machinesCreated} created, ${analysis.deletions.length} deleted; VMs ${analysis.vmsCreated} created, ${analysis.vmsDeleted} deleted`,
      );
      recordRow({
        id: spec.id,
        title: spec.title,
        convergeMs: converged ? convergeMs : undefined,
        timeoutMs: spec.timeoutMs,
        beyondLimit: analysis.beyondLimit,
        orphans: converged ? orphans.length : undefined,
        wronglyDeleted: analysis.wronglyDeleted.length,
        notes: notes.join('; '),
      });
      measured = { analysis, orphans, vmsPerMachine, convergeMs };
    }
    return measured;
  }

  /** Writes recorded for the deployment's machines, for debugging a failing figure. */
  eventsOf(name: string): RecordedEvent[] {
    return this.recorder.timeline().filter((e) => e.resource === 'machines' && e.name.startsWith(name));
  }

  async stop(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.stop()));
    this.recorder.stop();
    await this.lc.stop();
  }
}

/** The three figures that must be zero. */
export function expectClean(m: Measured): void {
  expect(
    m.analysis.beyondLimit,
    `machines beyond replicas + maxSurge: ${m.analysis.firstBeyond ?? ''}`,
  ).to.equal(0);
  expect(m.orphans, 'orphan VMs after convergence').to.deep.equal([]);
  expect(
    m.analysis.wronglyDeleted.map(
      (d) => `${d.machine} (${d.phase || 'creating'}, class ${d.class}): ${d.why}`,
    ),
    'machines deleted that were not chosen',
  ).to.deep.equal([]);
}

/**
 * What a plain scale promises beyond expectClean (which allows replicas + maxSurge machines and
 * counts a surplus machine's deletion as chosen): exactly `created` machines and VMs created and
 * `deleted` machines deleted while it ran (nothing beyond the target, nothing removed again), and
 * exactly one VM for every live machine of the deployment afterwards (no second VM for a machine).
 */
export function expectExactly(m: Measured, want: { created: number; deleted: number }): void {
  expectClean(m);
  expect(m.analysis.machinesCreated, 'machines created').to.equal(want.created);
  expect(
    m.analysis.deletions.map((d) => `${d.machine} (${d.why})`),
    'machines deleted',
  ).to.have.length(want.deleted);
  expect(m.analysis.vmsCreated, 'VMs created').to.equal(want.created);
  expect(m.vmsPerMachine.length, 'live machines after convergence').to.be.greaterThan(0);
  expect(
    m.vmsPerMachine.filter(([, n]) => n !== 1),
    'live machines without exactly one VM',
  ).to.deep.equal([]);
}

export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}
