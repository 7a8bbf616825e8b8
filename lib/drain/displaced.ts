// How long the pods of an interrupted node waited for a new home. When the drain of a machine whose
// VM the cloud reclaims starts, the controllers (ReplicaSets, StatefulSets, …) of the pods it
// displaces are noted; each pod those controllers create from then on is timed from its creation
// (or the drain's start, when later) until it is bound to a node. Each time goes to the histogram
// mcm_interruption_pod_pending_seconds, and once as many successors as displaced pods are bound
// (or after PATIENCE_MS) an event on the machine says how many waited how long. Pods without a
// controller have no successor and are not counted. Read from the pod cache: no API request.

import { Histogram, type Registry } from 'prom-client';

import type { Clock, TimerHandle } from '../kube/clock.js';
import type { DeepReadonly, Informer } from '../kube/informer.js';
import type { Pod } from '../kube/types.js';

/** How long successors are waited for before the interruption is reported with what was seen. */
export const PATIENCE_MS = 10 * 60_000;
/** A machine's drain outlasts its report by this much at most (a deletion ends well before). */
const REPORTED_MEMORY_MS = 2 * PATIENCE_MS;

type AnyPod = Pod | DeepReadonly<Pod>;

/** The uid of the pod's controller (its ownerReference with controller: true), if any. */
export function controllerUidOf(p: AnyPod): string | undefined {
  return p.metadata.ownerReferences?.find((r) => r.controller === true)?.uid;
}

/** What one interruption's displaced pods came to. */
export interface DisplacedReport {
  /** Pods displaced (with a controller). */
  displaced: number;
  /** Their successors' waits for a node, ms, in the order they were bound. */
  pendingMs: number[];
}

interface Tracking {
  startedAt: number;
  /** Successors still expected, by controller uid. */
  expected: Map<string, number>;
  displaced: number;
  pendingMs: number[];
  /** Successors already timed (by pod uid). */
  seen: Set<string>;
  report: (r: DisplacedReport) => void;
  /** The end of the patience (cancelled when every successor is bound first). */
  patience: TimerHandle | undefined;
}

export class DisplacedPods {
  private readonly byMachine = new Map<string, Tracking>();
  /**
   * Machines whose interruption was reported, and when: later drain rounds of the same machine
   * (its evicted pods still terminating) start nothing new. Forgotten after REPORTED_MEMORY_MS.
   */
  private readonly reported = new Map<string, number>();
  private readonly histogram: Histogram;

  constructor(
    pods: Informer<Pod>,
    private readonly clock: Clock,
    registry: Registry,
  ) {
    this.histogram = new Histogram({
      name: 'mcm_interruption_pod_pending_seconds',
      help: 'How long each successor of a pod displaced by the drain of an interrupted machine (its VM reclaimed by the cloud) waited to be bound to a node, from its creation (or the drain, when later).',
      buckets: [1, 2, 5, 10, 30, 60, 120, 300, 600],
      registers: [registry],
    });
    pods.addHandler({
      onAdd: (p) => {
        this.observe(p);
      },
      onUpdate: (_old, p) => {
        this.observe(p);
      },
    });
  }

  /** Whether the displaced pods of machine `key` are being followed already, or were reported. */
  tracking(key: string): boolean {
    return this.byMachine.has(key) || this.reported.has(key);
  }

  /**
   * The drain of machine `key` starts now and displaces `pods`: their successors are timed, and
   * `report` is called once with what they came to.
   */
  start(key: string, pods: readonly AnyPod[], report: (r: DisplacedReport) => void): void {
    const now = this.clock.now();
    for (const [k, at] of this.reported) if (now - at > REPORTED_MEMORY_MS) this.reported.delete(k);
    if (this.tracking(key)) return;
    const expected = new Map<string, number>();
    let displaced = 0;
    for (const p of pods) {
      const uid = controllerUidOf(p);
      if (uid === undefined) continue;
      expected.set(uid, (expected.get(uid) ?? 0) + 1);
      displaced++;
    }
    if (displaced === 0) return;
    const t: Tracking = {
      startedAt: this.clock.now(),
      expected,
      displaced,
      pendingMs: [],
      seen: new Set(),
      report,
      patience: undefined,
    };
    this.byMachine.set(key, t);
    t.patience = this.clock.setTimeout(() => {
      this.finish(key);
    }, PATIENCE_MS);
  }

  /** Stops following every interruption, reporting nothing (the controllers stop). */
  stop(): void {
    for (const t of this.byMachine.values()) t.patience?.cancel();
    this.byMachine.clear();
    this.reported.clear();
  }

  private observe(p: DeepReadonly<Pod>): void {
    if (this.byMachine.size === 0 || (p.spec?.nodeName ?? '') === '') return;
    const owner = controllerUidOf(p);
    if (owner === undefined) return;
    const created = Date.parse(p.metadata.creationTimestamp ?? '');
    if (Number.isNaN(created)) return;
    for (const [key, t] of this.byMachine) {
      const left = t.expected.get(owner) ?? 0;
      // creationTimestamp has whole seconds: a successor may read up to a second before the drain.
      if (left === 0 || created < t.startedAt - 1_000 || t.seen.has(p.metadata.uid ?? '')) continue;
      t.seen.add(p.metadata.uid ?? '');
      t.expected.set(owner, left - 1);
      const waited = Math.max(0, this.clock.now() - Math.max(created, t.startedAt));
      t.pendingMs.push(waited);
      this.histogram.observe(waited / 1000);
      if (t.pendingMs.length === t.displaced) this.finish(key);
      return;
    }
  }

  private finish(key: string): void {
    const t = this.byMachine.get(key);
    if (t === undefined) return;
    this.byMachine.delete(key);
    this.reported.set(key, this.clock.now());
    t.patience?.cancel();
    t.report({ displaced: t.displaced, pendingMs: t.pendingMs });
  }
}
