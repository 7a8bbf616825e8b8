// Bounded replacement of unhealthy machines ("meltdown protection"): an Unknown machine past its
// health timeout, or one whose VM its provider reported failed (a zone's hosts impaired at once),
// is marked Failed (and so replaced by its MachineSet) only while fewer than the deployment's
// budget of its machines are already being replaced. Decisions for one deployment are serialised,
// and marks not yet visible in the cache still count, so concurrent workers cannot overrun the
// budget. The machines that wait are counted per deployment (mcm_machine_replacements_waiting).

import { ExtensionAnnotation, MachinePhase } from '../../api/constants.js';
import {
  MachineDeploymentResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../api/types.js';
import { Gauge, type Registry } from 'prom-client';

import { CONTROLLER_UID_INDEX, type DeepReadonly, type Lister } from '../../kube/informer.js';
import { isPreserved, phaseOf } from '../machines.js';
import { cachedController } from '../ownership.js';
import { resolveBudget } from './settings.js';

type CachedMachine = DeepReadonly<Machine>;

/** A mark the cache does not show after this long never will (the write was undone): forgotten. */
const MARK_VISIBLE_MS = 60_000;

export interface BudgetGroup {
  /** The deployment (or set) whose machines share the budget. */
  key: string;
  /** The deployment's (or set's) namespace and name, for the metric. */
  namespace: string;
  name: string;
  machines: CachedMachine[];
  budget: number;
}

/** Machines counted as "being replaced": anything but Running, Unknown and Available, unless preserved. */
export function inReplacement(m: CachedMachine, now: number): boolean {
  const p = phaseOf(m);
  if (p === MachinePhase.Running || p === MachinePhase.Unknown || p === MachinePhase.Available) return false;
  return !isPreserved(m, now);
}

export class ReplacementBudget {
  private readonly locks = new Map<string, Promise<unknown>>();
  /** Machines marked Failed whose new phase the cache may not show yet (uid → when), per group. */
  private readonly marked = new Map<string, Map<string, number>>();
  /** Machines refused by their group's budget and not marked since, by uid. */
  private readonly waiting = new Map<
    string,
    { group: string; machine: string; labels: { namespace: string; machine_deployment: string } }
  >();

  constructor(
    private readonly machines: Lister<Machine>,
    private readonly machineSets: Lister<MachineSet>,
    private readonly deployments: Lister<MachineDeployment>,
    private readonly defaultBudget: string,
    registry?: Registry,
  ) {
    if (registry === undefined) return;
    const waiting = this.waiting;
    new Gauge({
      name: 'mcm_machine_replacements_waiting',
      help: 'Machines to be marked Failed (unhealthy past the health timeout, or their VM reported failed by the provider) that wait for their deployment’s replacement budget.',
      labelNames: ['namespace', 'machine_deployment'],
      registers: [registry],
      collect() {
        this.reset();
        const counts = new Map<
          string,
          { labels: { namespace: string; machine_deployment: string }; n: number }
        >();
        for (const { labels } of waiting.values()) {
          const k = `${labels.namespace}/${labels.machine_deployment}`;
          const e = counts.get(k) ?? { labels, n: 0 };
          e.n++;
          counts.set(k, e);
        }
        for (const e of counts.values()) this.set(e.labels, e.n);
      },
    });
  }

  /** The machine (by uid) no longer waits for the budget: marked, healthy again, or gone. */
  forget(uid: string | undefined): void {
    if (uid !== undefined) this.waiting.delete(uid);
  }

  /** How many machines wait for their group's budget now. */
  waitingCount(): number {
    return this.waiting.size;
  }

  /**
   * The machines (keys `namespace/name`) that wait for the budget of `m`'s group: when `m` leaves
   * replacement (Running again, or gone) one of them may go on, and is looked at at once.
   */
  waitersBeside(m: CachedMachine): string[] {
    if (this.waiting.size === 0) return [];
    const group = this.groupOf(m)?.key;
    if (group === undefined) return [];
    const out: string[] = [];
    for (const w of this.waiting.values()) if (w.group === group) out.push(w.machine);
    return out;
  }

  /** The group of a machine: its deployment, else its set; undefined for a standalone machine. */
  groupOf(m: CachedMachine): BudgetGroup | undefined {
    const ms = cachedController(this.machineSets, m, MachineSetResource.kind);
    if (ms === undefined) return undefined;
    const mcd = cachedController(this.deployments, ms, MachineDeploymentResource.kind);
    const owner = mcd ?? ms;
    const sets =
      mcd === undefined ? [ms] : this.machineSets.byIndex(CONTROLLER_UID_INDEX, mcd.metadata.uid ?? '');
    const machines = sets.flatMap((s) => this.machines.byIndex(CONTROLLER_UID_INDEX, s.metadata.uid ?? ''));
    const value =
      owner.metadata.annotations?.[ExtensionAnnotation.MaxUnhealthyReplacements] ?? this.defaultBudget;
    const replicas = owner.spec?.replicas ?? 0;
    const budget = resolveBudget(value, replicas) ?? resolveBudget(this.defaultBudget, replicas) ?? 1;
    return {
      key: `${mcd === undefined ? 'MachineSet' : 'MachineDeployment'}:${owner.metadata.uid ?? ''}`,
      namespace: owner.metadata.namespace ?? '',
      name: owner.metadata.name ?? '',
      machines,
      budget,
    };
  }

  /**
   * Runs mark() (which marks m Failed) if the group has budget left; resolves to whether it ran.
   * Machines without a group are always allowed.
   */
  async tryMark(
    m: CachedMachine,
    now: number,
    mark: () => Promise<void>,
  ): Promise<{ allowed: boolean; inReplacement: number; budget: number }> {
    const group = this.groupOf(m);
    if (group === undefined) {
      await mark();
      return { allowed: true, inReplacement: 0, budget: Infinity };
    }
    return this.withLock(group.key, async () => {
      const fresh = this.groupOf(m) ?? group;
      // The machine itself is not counted: an InPlaceUpdateFailed machine is "in replacement" by
      // phase, and would otherwise use up a budget of 1 on its own and never be marked Failed.
      const others = fresh.machines.filter((x) => x.metadata.uid !== m.metadata.uid);
      const pending = this.pendingMarks(fresh.key, others, now);
      const busy = others.filter((x) => inReplacement(x, now)).length + pending;
      if (busy >= fresh.budget) {
        this.waiting.set(m.metadata.uid ?? '', {
          group: fresh.key,
          machine: `${m.metadata.namespace ?? ''}/${m.metadata.name ?? ''}`,
          labels: { namespace: fresh.namespace, machine_deployment: fresh.name },
        });
        return { allowed: false, inReplacement: busy, budget: fresh.budget };
      }
      await mark();
      this.waiting.delete(m.metadata.uid ?? '');
      const marks = this.marked.get(fresh.key) ?? new Map<string, number>();
      marks.set(m.metadata.uid ?? '', now);
      this.marked.set(fresh.key, marks);
      return { allowed: true, inReplacement: busy + 1, budget: fresh.budget };
    });
  }

  /**
   * Marks the cache does not reflect yet: the machine is there in its old phase (Unknown past its
   * health timeout, or Running with its VM reported failed). Forgets the rest: machines the cache
   * shows Failed (counted by their phase from then on) or gone, and marks older than any cache
   * lag (MARK_VISIBLE_MS).
   */
  private pendingMarks(key: string, machines: readonly CachedMachine[], now: number): number {
    const marks = this.marked.get(key);
    if (marks === undefined) return 0;
    const byUid = new Map(machines.map((x) => [x.metadata.uid ?? '', x]));
    for (const [uid, at] of [...marks]) {
      const cached = byUid.get(uid);
      if (
        cached === undefined ||
        phaseOf(cached) === MachinePhase.Failed ||
        inReplacement(cached, now) ||
        now - at > MARK_VISIBLE_MS
      )
        marks.delete(uid);
    }
    if (marks.size === 0) this.marked.delete(key);
    return marks.size;
  }

  private async withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(key) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const settled = run.catch(() => undefined);
    this.locks.set(key, settled);
    try {
      return await run;
    } finally {
      if (this.locks.get(key) === settled) this.locks.delete(key);
    }
  }
}
