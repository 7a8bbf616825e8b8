// The machines the autoscaler's deletion protocol marks (pure; the MachineDeployment controller
// writes the plan, the autoscaler server reads it). To remove specific machines the autoscaler (ours
// or gardener's fork) lowers spec.replicas and names the machines in the deployment annotation
// `node.machine.sapcloud.io/trigger-deletion-by-mcm` in the same write: a name asks that this
// machine be the one removed by that decrement. The controller gives named machines priority 1
// and the mark time, and the MachineSet deletes them first.
//
// A named machine goes, whatever happens to replicas afterwards. The autoscaler has already
// prepared its node for removal (drained it, tainted or cordoned it) and counts it as gone; when
// replicas rise again before the machine went (IncreaseSize for pending pods, `kubectl scale`),
// keeping it would leave an unschedulable node in place of the one the increase asked for
// (gardener MCM #1085). While the deployment has more machines than replicas, the MachineSet
// deletes the marked ones as its surplus. A mark with no surplus behind it (the decrement was
// undone) is carried out by the MachineDeployment controller itself: it deletes the machine and
// the set creates its replacement. A machine that carries a mark whose annotation entry is gone
// (someone edited the list) is unmarked and stays.

import {
  Annotation,
  DEFAULT_MACHINE_PRIORITY,
  DELETE_FIRST_MACHINE_PRIORITY,
  TRIGGER_DELETION_ENTRY_SEPARATOR,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import { isRFC3339, parseTriggerDeletion } from '../../api/triggerdeletion.js';
import type { MachineDeployment, MachineSet } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { rfc3339 } from '../conditions.js';
import { controllerRefOf, isFailed, isTerminating, type AnyMachine } from '../machines.js';

type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;
type AnySet = MachineSet | DeepReadonly<MachineSet>;

/** What the backing of marks needs from one MachineSet of the deployment. */
export interface SetView {
  uid: string;
  /** spec.replicas */
  replicas: number;
  /** Machines not being deleted. */
  active: number;
}

/** The deployment's sets as SetViews, by UID, given how many machines of each are not being deleted. */
export function setViews(sets: readonly AnySet[], activeOf: (s: AnySet) => number): Map<string, SetView> {
  const views = new Map<string, SetView>();
  for (const s of sets) {
    const uid = s.metadata.uid ?? '';
    if (uid === '') continue;
    views.set(uid, { uid, replicas: replicasOf(s), active: activeOf(s) });
  }
  return views;
}

export interface TriggerDeletionPlan {
  /** The annotation value to write; undefined when no entry is left (the annotation is removed). */
  value: string | undefined;
  /** Whether the deployment's annotations must be written. */
  changed: boolean;
  /** Scaler time to record on the deployment (legacy entries and none recorded yet). */
  setScalerTime?: string | undefined;
  /** Machines to mark for deletion, with their mark time: exactly the machines that are going. */
  marks: { name: string; time: string }[];
  /**
   * Marked machines that no surplus backs (replicas were raised after the mark): no MachineSet
   * would delete them, so the deployment controller deletes them and their sets replace them.
   */
  replace: string[];
  /** Machines of the deployment carrying a mark without an entry: their mark annotations are removed. */
  unmark: string[];
  /** Entries dropped and why (for the log). */
  dropped: { entry: string; why: string }[];
}

interface Candidate {
  name: string;
  time: string;
  entry: string;
  /** Position in the annotation: among marks of the same second, a later one is newer. */
  index: number;
  set: SetView;
}

/**
 * Plans the deletion protocol for one deployment:
 * - legacy bare names get the scaler time (now, when none is recorded);
 * - entries that are malformed, name a machine that does not exist, is not the deployment's, is
 *   Failed or already Terminating are dropped (the MachineSet removes failed and terminating
 *   machines anyway);
 * - every other entry stands and its machine is marked. As many as the deployment has surplus
 *   machines, newest first, are left to the MachineSets. The surplus counts each set's machines
 *   or its replicas, whichever is more (a machine being created counts before it is in the
 *   cache), minus the deployment's replicas. A mark whose set has more machines than its replicas
 *   is left to that set too: it is deleting right now. The rest have no surplus behind them and
 *   are to be replaced (`replace`);
 * - every other machine of the deployment that carries a mark (`markedMachines`) is unmarked: its
 *   annotation entry is gone.
 */
export function planTriggerDeletion(args: {
  mcd: AnyDeployment;
  now: number;
  machine: (name: string) => AnyMachine | undefined;
  /** The deployment's set controlling the machine, or undefined when it is not the deployment's. */
  setOf: (m: AnyMachine) => SetView | undefined;
  sets: readonly SetView[];
  /** The deployment's machines that carry a deletion mark (MarkedForDeletionTime). */
  markedMachines: readonly AnyMachine[];
}): TriggerDeletionPlan {
  const annotations = args.mcd.metadata.annotations ?? {};
  const original = annotations[Annotation.TriggerDeletionByMCM];
  const entries = parseTriggerDeletion(original);
  const recorded = annotations[Annotation.LastDeploymentReplicaChangeByScalerTime];
  const needsScalerTime =
    entries.some((e) => e.kind === 'legacy') && (recorded === undefined || recorded === '');
  const scalerTime = needsScalerTime ? rfc3339(args.now) : (recorded ?? '');

  const candidates: Candidate[] = [];
  const dropped: { entry: string; why: string }[] = [];
  const seen = new Set<string>();
  for (const e of entries) {
    if (e.kind === 'invalid') {
      dropped.push({ entry: e.raw, why: e.why });
      continue;
    }
    const time = e.kind === 'marked' ? e.time : scalerTime;
    const entry = `${e.name}${TRIGGER_DELETION_ENTRY_SEPARATOR}${time}`;
    if (e.kind === 'legacy' && !isRFC3339(time)) {
      dropped.push({ entry: e.name, why: `scaler time "${time}" is not an RFC 3339 time` });
      continue;
    }
    const m = args.machine(e.name);
    const set = m === undefined ? undefined : args.setOf(m);
    if (m === undefined) dropped.push({ entry, why: 'machine does not exist' });
    else if (set === undefined)
      dropped.push({ entry, why: 'machine does not belong to this machine deployment' });
    else if (isTerminating(m)) dropped.push({ entry, why: 'machine is already being deleted' });
    else if (isFailed(m)) dropped.push({ entry, why: 'machine has failed and is replaced anyway' });
    else if (!seen.has(e.name)) {
      seen.add(e.name);
      candidates.push({ name: e.name, time, entry, index: candidates.length, set });
    }
  }

  const backed = backedMarks(candidates, replicasOf(args.mcd), args.sets);
  const named = new Set(candidates.map((c) => c.name));
  const value = candidates.length === 0 ? undefined : candidates.map((c) => c.entry).join(',');
  const unmark = args.markedMachines
    .filter((m) => !isTerminating(m) && !isFailed(m) && !named.has(m.metadata.name ?? ''))
    .map((m) => m.metadata.name ?? '')
    .sort();
  return {
    value,
    changed: original !== undefined && (value !== original || needsScalerTime),
    setScalerTime: needsScalerTime ? scalerTime : undefined,
    marks: candidates.map((c) => ({ name: c.name, time: c.time })),
    replace: candidates
      .filter((c) => !backed.has(c.name))
      .map((c) => c.name)
      .sort(),
    unmark,
    dropped,
  };
}

/** The names a MachineSet deletes: the newest `surplus` ones, plus those whose set is deleting now. */
function backedMarks(
  candidates: readonly Candidate[],
  replicas: number,
  sets: readonly SetView[],
): Set<string> {
  const population = sets.reduce((n, s) => n + Math.max(s.active, s.replicas), 0);
  const surplus = Math.max(population - replicas, 0);
  const newestFirst = [...candidates].sort(
    (a, b) => Date.parse(b.time) - Date.parse(a.time) || b.index - a.index,
  );
  const backed = new Set(newestFirst.slice(0, surplus).map((c) => c.name));
  for (const c of candidates) if (c.set.active > c.set.replicas) backed.add(c.name);
  return backed;
}

/** Machines of the deployment that carry a deletion mark from this protocol. */
export function carriesMark(m: AnyMachine): boolean {
  return (m.metadata.annotations?.[Annotation.MarkedForDeletionTime] ?? '') !== '';
}

/** The annotations a marked machine needs, or undefined when it has them already. */
export function machineMarkPatch(m: AnyMachine, time: string): Record<string, string> | undefined {
  const annotations = m.metadata.annotations ?? {};
  const want: Record<string, string> = {
    [Annotation.MachinePriority]: String(DELETE_FIRST_MACHINE_PRIORITY),
    [Annotation.MarkedForDeletionTime]: time,
  };
  const differs = Object.entries(want).some(([k, v]) => annotations[k] !== v);
  return differs ? want : undefined;
}

/**
 * The annotations that take a mark off a machine: the mark time goes, and priority 1 (ours) goes
 * back to the default priority every machine gets at creation; any other priority (set by a
 * user since) stays.
 */
export function machineUnmarkPatch(m: AnyMachine): Record<string, string | null> {
  const patch: Record<string, string | null> = { [Annotation.MarkedForDeletionTime]: null };
  if (m.metadata.annotations?.[Annotation.MachinePriority] === String(DELETE_FIRST_MACHINE_PRIORITY))
    patch[Annotation.MachinePriority] = String(DEFAULT_MACHINE_PRIORITY);
  return patch;
}

/**
 * The machines of a deployment that are going by the protocol (every standing mark), from the same
 * plan the controller writes: the autoscaler server reports them Deleting and does not count them
 * again. `machines` are the machines of `sets`.
 */
export function machinesGoing(args: {
  mcd: AnyDeployment;
  sets: readonly AnySet[];
  machines: readonly AnyMachine[];
  now: number;
}): Set<string> {
  if (args.mcd.metadata.annotations?.[Annotation.TriggerDeletionByMCM] === undefined) return new Set();
  const bySet = new Map<string, AnyMachine[]>();
  const byName = new Map<string, AnyMachine>();
  for (const m of args.machines) {
    byName.set(m.metadata.name ?? '', m);
    const uid = controllerRefOf(m)?.uid ?? '';
    const list = bySet.get(uid);
    if (list === undefined) bySet.set(uid, [m]);
    else list.push(m);
  }
  const views = setViews(
    args.sets,
    (s) => (bySet.get(s.metadata.uid ?? '') ?? []).filter((m) => !isTerminating(m)).length,
  );
  const plan = planTriggerDeletion({
    mcd: args.mcd,
    now: args.now,
    machine: (name) => byName.get(name),
    setOf: (m) => views.get(controllerRefOf(m)?.uid ?? ''),
    sets: [...views.values()],
    markedMachines: [],
  });
  return new Set(plan.marks.map((m) => m.name));
}
