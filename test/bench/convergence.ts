// When has a change converged? The scale bench stops its clocks and counters at the moment the
// cluster reaches the change's goal (all N Running, nothing left, the rollout complete), seen in
// watch events of Machines, Nodes (the virtual cloud's VMs) and the MachineDeployment. The same
// code decides it for our manager and for the anchor: it reads only API objects.

import type { Machine, MachineDeployment } from '../../lib/api/types.js';
import type { DeepReadonly, Informer, InformerHandlers } from '../../lib/kube/informer.js';
import type { Node } from '../../lib/kube/types.js';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** The label the virtual cloud puts on the Node that is its VM. */
export const VM_LABEL = 'virtual.mcm-ts.io/vm';

interface MachineFacts {
  running: boolean;
  className: string | undefined;
  deleting: boolean;
}

function machineFacts(m: DeepReadonly<Machine>): MachineFacts {
  return {
    running: m.status?.currentStatus?.phase === 'Running',
    className: m.spec?.class?.name,
    deleting: m.metadata.deletionTimestamp !== undefined,
  };
}

/** An informer's callbacks as watch events. */
function handlers<T>(apply: (type: WatchEventType, obj: DeepReadonly<T>) => void): InformerHandlers<T> {
  return {
    onAdd: (o) => {
      apply('ADDED', o);
    },
    onUpdate: (_, o) => {
      apply('MODIFIED', o);
    },
    onDelete: (o) => {
      apply('DELETED', o);
    },
  };
}

/** A condition on the fleet; checked after every event, so it must be cheap (no scan). */
export type Goal = (f: Fleet) => boolean;

/**
 * The watched state, folded from watch events into counts kept up to date per event, so a goal
 * costs O(1) per event: the bench shares the cores with the implementation it measures, and a scan
 * of N machines at each of ~10 N events would take from it.
 */
export class Fleet {
  private readonly machines = new Map<string, MachineFacts>();
  private readonly vms = new Set<string>();
  /** Machines not being deleted; Running ones of those, also by class. */
  private live = 0;
  private runningLive = 0;
  private readonly runningLiveByClass = new Map<string, number>();
  private peak = 0;
  private deployment: DeepReadonly<MachineDeployment> | undefined;
  private waiters: { goal: Goal; resolve: (at: number) => void }[] = [];

  /** `now` stamps the event that reaches a goal. */
  constructor(
    private readonly deploymentName: string,
    private readonly now: () => number = Date.now,
  ) {}

  /** Feeds the fleet from the bench's informers (their initial lists included). */
  follow(machines: Informer<Machine>, nodes: Informer<Node>, deployments: Informer<MachineDeployment>): void {
    machines.addHandler(
      handlers((t, m) => {
        this.onMachine(t, m);
      }),
    );
    nodes.addHandler(
      handlers((t, n) => {
        this.onNode(t, n);
      }),
    );
    deployments.addHandler(
      handlers((t, md) => {
        this.onDeployment(t, md);
      }),
    );
  }

  onMachine(type: WatchEventType, m: DeepReadonly<Machine>): void {
    const key = m.metadata.name ?? '';
    const old = this.machines.get(key);
    if (old !== undefined) this.count(old, -1);
    if (type === 'DELETED') this.machines.delete(key);
    else {
      const facts = machineFacts(m);
      this.machines.set(key, facts);
      this.count(facts, 1);
    }
    this.peak = Math.max(this.peak, this.live);
    this.check();
  }

  onNode(type: WatchEventType, n: DeepReadonly<Node>): void {
    const key = n.metadata.name ?? '';
    if (type !== 'DELETED' && n.metadata.labels?.[VM_LABEL] === 'true') this.vms.add(key);
    else this.vms.delete(key);
    this.check();
  }

  onDeployment(type: WatchEventType, md: DeepReadonly<MachineDeployment>): void {
    if (md.metadata.name !== this.deploymentName) return;
    this.deployment = type === 'DELETED' ? undefined : md;
    this.check();
  }

  /** Resolves with the time of the event after which `goal` holds (now, if it holds already). */
  until(goal: Goal): Promise<number> {
    if (goal(this)) return Promise.resolve(this.now());
    return new Promise((resolve) => this.waiters.push({ goal, resolve }));
  }

  get machineCount(): number {
    return this.machines.size;
  }

  get vmCount(): number {
    return this.vms.size;
  }

  /** Running machines not being deleted. */
  get running(): number {
    return this.runningLive;
  }

  runningOfClass(className: string): number {
    return this.runningLiveByClass.get(className) ?? 0;
  }

  /** The most machines not being deleted at any event since the last resetPeak. */
  get peakLive(): number {
    return this.peak;
  }

  resetPeak(): void {
    this.peak = this.live;
  }

  /**
   * The deployment controller has seen the current spec (observedGeneration) and reports
   * `replicas` machines, all updated and available.
   */
  deploymentComplete(replicas: number): boolean {
    const md = this.deployment;
    if (md === undefined) return false;
    const st = md.status;
    return (
      (st?.observedGeneration ?? 0) >= (md.metadata.generation ?? 1) &&
      st?.replicas === replicas &&
      st.updatedReplicas === replicas &&
      st.availableReplicas === replicas
    );
  }

  /** The deployment controller has seen the current spec. */
  deploymentObserved(): boolean {
    const md = this.deployment;
    return md !== undefined && (md.status?.observedGeneration ?? 0) >= (md.metadata.generation ?? 1);
  }

  private count(f: MachineFacts, d: 1 | -1): void {
    if (f.deleting) return;
    this.live += d;
    if (!f.running) return;
    this.runningLive += d;
    if (f.className !== undefined)
      this.runningLiveByClass.set(f.className, (this.runningLiveByClass.get(f.className) ?? 0) + d);
  }

  private check(): void {
    if (this.waiters.length === 0) return;
    const at = this.now();
    this.waiters = this.waiters.filter((w) => {
      if (!w.goal(this)) return true;
      w.resolve(at);
      return false;
    });
  }
}

/** 0 → N: exactly n machines, all Running. */
export const allRunning =
  (n: number): Goal =>
  (f) =>
    f.machineCount === n && f.running === n;

/** N → 0: no machine and no VM left. */
export const noneLeft: Goal = (f) => f.machineCount === 0 && f.vmCount === 0;

/**
 * A rolling update to `className`: exactly n machines, all of the new class, Running and not
 * being deleted, and the deployment's status saying so for its current generation.
 */
export const rolledOut =
  (n: number, className: string): Goal =>
  (f) =>
    f.machineCount === n && f.runningOfClass(className) === n && f.deploymentComplete(n);
