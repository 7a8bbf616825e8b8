// The fault suite's figures, computed from the recorded etcd timeline (pure: events in, figures out).
//
// The timeline is replayed write by write in etcd revision order, so each figure is evaluated
// after every committed change of any Machine, MachineSet, MachineDeployment or Node: that is
// what "at any moment" means here.
//
// Machines beyond replicas + maxSurge
//   Counted: machines the deployment selects (its selector's matchLabels) that are not being
//   deleted (no deletionTimestamp, phase not Terminating), Failed ones included. The bound is
//   `allowed + maxSurge`, where `allowed` follows spec.replicas with one rule around a change:
//   after an increase the new value binds at once (max(old, new) = new); after a decrease the old
//   value still binds (max(old, new) = old) until the count has come down to new + maxSurge,
//   because machines cannot disappear in the instant the field changes; from then on the new
//   value binds. maxSurge is the deployment's own (a percentage is rounded up against `allowed`).
//   A machine whose VM the cloud reclaims (machine.mcm-ts.io/replacing: interrupted) is not
//   counted either: its replacement is the surge the interruption allows. The mark alone is not
//   trusted: only a machine whose instance the scenario had the cloud warn of an interruption
//   (AnalysisOptions.interruptedInstances) is left out; one marked without a warning counts like
//   any other machine, so its replacement is surge beyond the bound.
//   The figure is the largest excess seen (0 when the bound always held).
//
// Machines deleted that were not chosen
//   A deletion is the write that gives a machine its deletionTimestamp (or deletes it outright).
//   It is judged against the state just before that write. It was chosen if any of these holds:
//   1. the machine was Failed (replacing failed machines is the controller's job);
//   2. its class differs from the deployment's current template class: an old-set machine in a
//      rollout (a rollout may only delete those);
//   2b. it was marked replacing: interrupted (the cloud reclaims its VM: a Spot interruption) and
//       its instance is one the scenario had warned (interruptedInstances); marked so without a
//       warning, its deletion was not chosen;
//   3. it carried machinepriority.machine.sapcloud.io=1: marked for deletion (what the
//      cluster-autoscaler's DeleteNodes does, or a user);
//   4. it was a scale-down: the machines of the current template that were not being deleted
//      outnumbered spec.replicas at that moment, AND no machine that survived the operation ranked
//      before it in MCM's deletion order at that moment: lower machinepriority first, then
//      machines marked for deletion, then by phase (Terminating/creating, Failed,
//      CrashLoopBackOff, Unknown, Pending, Available, Running). Ties (same rank) are all valid
//      choices: the order among equals (age, name) is an implementation detail.
//   Anything else (a current-template, healthy, unmarked machine deleted when there were not too
//   many, or while a worse-ranked machine was kept) counts as not chosen.
//
// Orphan VMs are counted from the live Node list after convergence (see chaos env), not here.

import type { RecordedEvent } from './recorder.js';

export interface AnalysisOptions {
  namespace: string;
  deployment: string;
  /** Figures count only for writes with a revision in (fromRev, toRev]; earlier writes set the state. */
  fromRev: number;
  toRev: number;
  /**
   * The instances the scenario had the cloud warn of an interruption (EC2's Spot interruption
   * warning), by instance id or by providerID (its last path segment is the instance id).
   * Omitted: none was, and every machine marked interrupted is a violation.
   */
  interruptedInstances?: Iterable<string>;
}

export interface DeletionVerdict {
  rev: number;
  at: number;
  machine: string;
  phase: string;
  class: string;
  chosen: boolean;
  why: string;
}

export interface Analysis {
  /** Largest number of machines seen beyond allowed replicas + maxSurge (0: the bound always held). */
  beyondLimit: number;
  /** When the bound was first broken, for the failure message. */
  firstBeyond: string | undefined;
  /** Most machines not being deleted at once. */
  peakActive: number;
  /**
   * Most machines Failed or being deleted at once (the machines in replacement that a failure
   * started: what a replacement budget bounds).
   */
  peakFailedOrGoing: number;
  /** Machines created in the window. */
  machinesCreated: number;
  deletions: DeletionVerdict[];
  wronglyDeleted: DeletionVerdict[];
  /** Node objects (VMs) created and deleted in the window. */
  vmsCreated: number;
  vmsDeleted: number;
  /** Writes replayed in the window. */
  writes: number;
}

type Obj = Record<string, unknown>;

/** The annotation of a machine being replaced surge first (expiry). */
const REPLACING = 'machine.mcm-ts.io/replacing';

interface Meta {
  name?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  deletionTimestamp?: string;
}

const meta = (o: Obj | undefined): Meta => o?.metadata ?? {};

function phase(m: Obj | undefined): string {
  const status = m?.status as { currentStatus?: { phase?: string } } | undefined;
  return status?.currentStatus?.phase ?? '';
}

function machineClass(m: Obj | undefined): string {
  return (m?.spec as { class?: { name?: string } } | undefined)?.class?.name ?? '';
}

function deploymentClass(d: Obj | undefined): string {
  const spec = d?.spec as { template?: { spec?: { class?: { name?: string } } } } | undefined;
  return spec?.template?.spec?.class?.name ?? '';
}

function replicasOf(d: Obj | undefined): number {
  return (d?.spec as { replicas?: number } | undefined)?.replicas ?? 0;
}

function selectorOf(d: Obj | undefined): Record<string, string> {
  const spec = d?.spec as { selector?: { matchLabels?: Record<string, string> } } | undefined;
  return spec?.selector?.matchLabels ?? {};
}

/** maxSurge of the deployment's RollingUpdate strategy, resolved against `replicas` (default 1). */
export function resolveSurge(d: Obj | undefined, replicas: number): number {
  const spec = d?.spec as
    { strategy?: { type?: string; rollingUpdate?: { maxSurge?: number | string } } } | undefined;
  if (spec?.strategy?.type === 'Recreate') return 0;
  const v = spec?.strategy?.rollingUpdate?.maxSurge ?? 1;
  if (typeof v === 'number') return v;
  const pct = /^(\d+)%$/.exec(v);
  if (pct !== null) return Math.ceil((Number(pct[1]) * replicas) / 100);
  return Number(v);
}

/** Whether the machine is marked as one whose VM its cloud reclaims (a Spot interruption). */
function markedInterrupted(m: Obj): boolean {
  return meta(m).annotations?.[REPLACING] === 'interrupted';
}

/** The instance id of a providerID (`aws:///eu-west-1a/i-0abc` → `i-0abc`), or the id itself. */
const instanceIdOf = (providerID: string): string => providerID.slice(providerID.lastIndexOf('/') + 1);

function instanceOf(m: Obj): string {
  return instanceIdOf((m.spec as { providerID?: string } | undefined)?.providerID ?? '');
}

export function isDeleting(m: Obj | undefined): boolean {
  return meta(m).deletionTimestamp !== undefined || phase(m) === 'Terminating';
}

function selects(selector: Record<string, string>, m: Obj): boolean {
  const labels = meta(m).labels ?? {};
  const entries = Object.entries(selector);
  return entries.length > 0 && entries.every(([k, v]) => labels[k] === v);
}

/** MCM's scale-down ranks (lower goes first), without the tie-breaking among equals. */
const PHASE_RANK: Record<string, number> = {
  Terminating: 0,
  Failed: 1,
  CrashLoopBackOff: 2,
  Unknown: 3,
  Pending: 4,
  Available: 5,
  Running: 6,
};

export function deletionRank(m: Obj): [number, number, number] {
  const a = meta(m).annotations ?? {};
  const rawPriority = a['machinepriority.machine.sapcloud.io'];
  const priority = rawPriority !== undefined && /^-?\d+$/.test(rawPriority.trim()) ? Number(rawPriority) : 3;
  const marked = a['machine.sapcloud.io/marked-for-deletion-time'] !== undefined ? 0 : 1;
  return [priority, marked, PHASE_RANK[phase(m)] ?? 0];
}

function rankBefore(a: [number, number, number], b: [number, number, number]): boolean {
  for (let i = 0; i < 3; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}

/** Replays the timeline (etcd order) and computes the figures of one deployment in one window. */
export function analyze(timeline: readonly RecordedEvent[], opts: AnalysisOptions): Analysis {
  const events = [...timeline].sort((a, b) => a.rev - b.rev);
  const warned = new Set([...(opts.interruptedInstances ?? [])].map(instanceIdOf).filter((id) => id !== ''));
  /** Marked interrupted, and its instance was warned: the cloud really reclaims its VM. */
  const interrupted = (m: Obj): boolean => markedInterrupted(m) && warned.has(instanceOf(m));
  const machines = new Map<string, Obj>();
  const depKey = `${opts.namespace}/${opts.deployment}`;
  let dep: Obj | undefined;
  let replicas = 0;
  let allowed = 0;

  // Machines that are never deleted up to toRev: the survivors a scale-down must rank against.
  const deletedBy = new Map<string, number>();
  for (const e of events) {
    if (e.resource !== 'machines' || e.rev > opts.toRev) continue;
    const key = `${e.namespace}/${e.name}`;
    if (deletedBy.has(key)) continue;
    if (e.type === 'delete' || isDeleting(e.object)) deletedBy.set(key, e.rev);
  }

  const result: Analysis = {
    beyondLimit: 0,
    firstBeyond: undefined,
    peakActive: 0,
    peakFailedOrGoing: 0,
    machinesCreated: 0,
    deletions: [],
    wronglyDeleted: [],
    vmsCreated: 0,
    vmsDeleted: 0,
    writes: 0,
  };

  const ours = (m: Obj): boolean => dep !== undefined && selects(selectorOf(dep), m);

  for (const e of events) {
    if (e.rev > opts.toRev) break;
    const inWindow = e.rev > opts.fromRev;
    if (inWindow) result.writes++;
    const key = `${e.namespace}/${e.name}`;

    if (e.resource === 'nodes') {
      if (inWindow && e.created) result.vmsCreated++;
      if (inWindow && e.type === 'delete') result.vmsDeleted++;
      continue;
    }
    if (e.resource === 'machinedeployments' && key === depKey) {
      if (e.type === 'delete') {
        dep = undefined;
        continue;
      }
      const next = replicasOf(e.object);
      if (dep === undefined) allowed = next;
      else if (next !== replicas) allowed = Math.max(allowed, next);
      replicas = next;
      dep = e.object;
    }
    if (e.resource === 'machines') {
      const prev = machines.get(key);
      const nowDeleting = e.type === 'delete' || isDeleting(e.object);
      const target = e.object ?? prev;
      if (inWindow && e.created && e.object !== undefined && ours(e.object)) result.machinesCreated++;
      if (prev !== undefined && !isDeleting(prev) && nowDeleting && target !== undefined && ours(target)) {
        const verdict = judgeDeletion(key, prev, machines, dep, replicas, deletedBy, ours, interrupted);
        if (inWindow) {
          const v: DeletionVerdict = {
            rev: e.rev,
            at: e.at,
            machine: e.name,
            phase: phase(prev),
            class: machineClass(prev),
            ...verdict,
          };
          result.deletions.push(v);
          if (!v.chosen) result.wronglyDeleted.push(v);
        }
      }
      if (e.type === 'delete') machines.delete(key);
      else if (e.object !== undefined) machines.set(key, e.object);
    }

    if (dep === undefined) continue;
    let active = 0;
    let failedOrGoing = 0;
    for (const m of machines.values()) {
      if (!ours(m)) continue;
      if (!isDeleting(m) && !interrupted(m)) active++;
      if (isDeleting(m) || phase(m) === 'Failed') failedOrGoing++;
    }
    const surge = resolveSurge(dep, Math.max(allowed, replicas));
    if (active <= replicas + surge) allowed = replicas;
    if (!inWindow) continue;
    result.peakActive = Math.max(result.peakActive, active);
    result.peakFailedOrGoing = Math.max(result.peakFailedOrGoing, failedOrGoing);
    const excess = active - (allowed + surge);
    if (excess > result.beyondLimit) {
      result.beyondLimit = excess;
      // The machines counted, for the failure message: what each was at that write.
      result.firstBeyond ??= `revision ${e.rev} (${new Date(e.at).toISOString()}): ${active} machines, replicas ${replicas} (allowed ${allowed}) + maxSurge ${surge}: ${[
        ...machines.values(),
      ]
        .filter((m) => ours(m) && !isDeleting(m) && !interrupted(m))
        .map((m) => {
          const replacing = meta(m).annotations?.[REPLACING];
          return `${meta(m).name ?? ''} ${phase(m) || '(no phase)'}${replacing === undefined ? '' : ` replacing=${replacing}`}`;
        })
        .join(', ')}`;
    }
  }
  return result;
}

function judgeDeletion(
  key: string,
  prev: Obj,
  machines: Map<string, Obj>,
  dep: Obj | undefined,
  replicas: number,
  deletedBy: Map<string, number>,
  ours: (m: Obj) => boolean,
  interrupted: (m: Obj) => boolean,
): { chosen: boolean; why: string } {
  if (phase(prev) === 'Failed') return { chosen: true, why: 'Failed machine replaced' };
  const current = deploymentClass(dep);
  if (machineClass(prev) !== current) return { chosen: true, why: `old set (class ${machineClass(prev)})` };
  if (interrupted(prev)) return { chosen: true, why: 'interrupted (the cloud reclaims its VM)' };
  if (markedInterrupted(prev)) {
    return {
      chosen: false,
      why: `marked interrupted, but its instance ${instanceOf(prev) || '(none)'} got no interruption warning`,
    };
  }
  if (meta(prev).annotations?.[REPLACING] !== undefined) {
    // Replaced (expiry, rebalance): the machine may go once the other machines cover the replicas,
    // Running ones for a machine that was Running itself: availability never drops below the
    // replicas. Other replaced machines still there count (they still serve), as they do for the
    // MachineSet; each of them goes only by the same rule, so none is counted twice.
    const wasRunning = phase(prev) === 'Running';
    let staying = 0;
    for (const [k, m] of machines) {
      if (k === key || !ours(m) || isDeleting(m)) continue;
      if (!wasRunning || phase(m) === 'Running') staying++;
    }
    return staying >= replicas
      ? {
          chosen: true,
          why: `replaced (${staying} ${wasRunning ? 'Running ' : ''}machines stay for ${replicas} replicas)`,
        }
      : {
          chosen: false,
          why: `replaced before its replacement was there: ${staying} ${wasRunning ? 'Running ' : ''}machines stay for ${replicas} replicas`,
        };
  }
  if (meta(prev).annotations?.['machinepriority.machine.sapcloud.io']?.trim() === '1') {
    return { chosen: true, why: 'marked for deletion (machinepriority 1)' };
  }
  let currentActive = 0;
  for (const m of machines.values()) {
    if (ours(m) && !isDeleting(m) && machineClass(m) === current) currentActive++;
  }
  if (currentActive <= replicas) {
    return {
      chosen: false,
      why: `not a scale-down: ${currentActive} machines of the current template for ${replicas} replicas`,
    };
  }
  const rank = deletionRank(prev);
  for (const [k, m] of machines) {
    if (k === key || !ours(m) || isDeleting(m) || deletedBy.has(k)) continue;
    if (rankBefore(deletionRank(m), rank)) {
      return {
        chosen: false,
        why: `${meta(m).name ?? k} (${phase(m) || 'creating'}) ranked before it and was kept`,
      };
    }
  }
  return { chosen: true, why: `scale-down (${currentActive} for ${replicas} replicas)` };
}

/**
 * The most launch rounds a machine class can make in `windowMs` when every launch fails, with
 * the launch back-off (lib/controllers/machine/launches.ts) at base `baseMs` and maximum `maxMs`:
 * after each round at least one more failure is in a row, and the next round waits at least
 * min(max, base·2^(failures−1)) from the failure, itself no earlier than the launch. So round k+1
 * starts no earlier than base·(1 + 2 + … + 2^(k−1)) (each term capped at max) after the first,
 * and this counts the rounds starting within the window, the first at its start. A machine slot
 * (one machine the group wants) launches at most once a round: each launch of a machine that the
 * failure of another did not stop is one more failure. Infinity with no back-off (base 0).
 */
export function launchRoundsWithin(baseMs: number, maxMs: number, windowMs: number): number {
  if (baseMs <= 0) return Infinity;
  let rounds = 1;
  for (let start = 0, k = 0; ; k++) {
    start += Math.min(maxMs, baseMs * 2 ** Math.min(k, 30));
    if (start > windowMs) return rounds;
    rounds++;
  }
}
