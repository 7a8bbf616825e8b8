import {
  Annotation,
  DELETE_FIRST_MACHINE_PRIORITY,
  Label,
  LabelValue,
  MachinePhase,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineSet } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { MachineCounts } from '../accounting.js';
import {
  isAvailable,
  interruptionDeadlineOf,
  isFailed,
  isInterrupted,
  isReplacing,
  isTerminating,
  markedForDeletionTime,
  phaseOf,
  priorityOf,
  shouldKeepFailedMachine,
  sortForDeletion,
  type AnyMachine,
} from '../machines.js';

export type DeletionReason = 'scale-down' | 'marked-by-autoscaler' | 'failed' | 'replaced' | 'interrupted';

export interface ReplicaPlan<M extends AnyMachine> {
  /** Machines to create. */
  create: number;
  /** Machines to delete, each once, at most burst of them. */
  delete: { machine: M; reason: DeletionReason }[];
  /** Why a needed scale-up is not done. */
  scaleUpBlocked?: 'frozen' | 'scale-up-disabled';
  /** Replaced machines kept because a pod on their node vetoes voluntary disruption, with the veto. */
  held?: { machine: M; veto: string }[];
  /** When an interrupted machine kept for now must go (its deadline minus the drain lead). */
  recheckAt?: number;
}

/** Phases of a machine on its way up (created, not failing, not joined yet). */
const ON_THE_WAY_UP: ReadonlySet<string> = new Set<string>([MachinePhase.Creating, MachinePhase.Pending]);

export interface ReplicaOptions<M extends AnyMachine> {
  /**
   * How long before its interruption deadline an interrupted machine is deleted (its node's drain
   * starts) when its replacement is not available by then (--interruption-drain-lead).
   */
  interruptionDrainLeadMs?: number;
  /**
   * The pod vetoing voluntary disruption of the machine's node, if any (karpenter.sh/do-not-disrupt,
   * cluster-autoscaler.kubernetes.io/safe-to-evict=false), as `namespace/name (annotation)`. A
   * machine replaced for a voluntary reason (expiry, rebalance) is not deleted while one runs there.
   */
  vetoOf?: (m: M) => string | undefined;
}

/**
 * Decides how a MachineSet reaches its replicas (pure; the controller executes the plan):
 * - machines being deleted do not count;
 * - too few: create the difference (at most burst), unless the set is frozen by the safety
 *   controller or marked scale-up-disabled (an old set during an in-place update);
 * - too many: delete the surplus in MCM's deletion order, ignoring machines just transferred by an
 *   in-place update (label update-result=successful);
 * - delete machines the autoscaler marked (priority 1 with a mark not newer than the MachineSet's
 *   last-replica-change-by-scaler time) beyond that, but only while more machines than replicas
 *   remain: both times have one-second precision, so a mark written in the same second as the
 *   set's last scale looks covered by it before the set's replicas were lowered for it (three
 *   DeleteNodes within one second); deleting it then would need a replacement. Once the replicas
 *   come down, the scale-down order (priority 1 first) picks it. (MCM deletes such machines
 *   regardless of the replica count.)
 * - always delete Failed machines that are not preserved (they are replaced);
 * - machines being replaced (isReplacing) do not count toward the replicas, so the set creates one
 *   in the place of each (surge first); each is deleted once the set holds its replicas without
 *   it and deleting it keeps at least replicas machines available (one that is not available
 *   costs nothing). They go first in the scale-down order too.
 * - interrupted machines (isInterrupted: their VM is about to go) get their replacement at once, one
 *   for one, as any machine being replaced (they do not count); each is deleted once its
 *   replacement is available (the set holds its replicas available without it), or, when that
 *   takes too long, at its interruption deadline minus the drain lead, whichever comes first: its
 *   pods move once, onto a node that is ready for them, and its drain still ends by the deadline.
 *   One whose replacement is not on its way (creation blocked: frozen, scale-up disabled; or
 *   failing: no capacity) goes at once, so that its pods look for room elsewhere (the autoscaler
 *   sees them Pending) while the VM still runs; so does one that is not available itself.
 * - a machine replaced for a voluntary reason (expiry, rebalance) is not deleted while a pod on its
 *   node vetoes disruption (vetoOf): its node takes no new pods (the machine controller taints it),
 *   so the veto is the last one's; it is held above the replicas until that pod goes.
 */
export function planReplicas<M extends AnyMachine>(
  ms: MachineSet | DeepReadonly<MachineSet>,
  machines: readonly M[],
  now: number,
  burst: number,
  opts: ReplicaOptions<M> = {},
): ReplicaPlan<M> {
  const lead = opts.interruptionDrainLeadMs ?? 0;
  const replicas = replicasOf(ms);
  const active = machines.filter((m) => !isTerminating(m));
  const removable = active.filter(
    (m) => m.metadata.labels?.[Label.UpdateResult] !== LabelValue.UpdateSuccessful,
  );
  const plan: ReplicaPlan<M> = { create: 0, delete: [] };
  const chosen = new Set<M>();
  const take = (m: M, reason: DeletionReason): void => {
    if (chosen.has(m) || plan.delete.length >= burst) return;
    chosen.add(m);
    plan.delete.push({ machine: m, reason });
  };

  const replacing = active.filter(isReplacing);
  const diff = active.length - replacing.length - replicas;
  const creations = diff < 0 ? planCreations(ms, -diff, burst) : undefined;
  // Machines on their way up that can stand in for an interrupted one: being created or Pending
  // (not failing: CrashLoopBackOff is refused for capacity, say; not Unknown, Failed or being
  // updated in place), or created now.
  let progressing =
    active.filter((m) => !isReplacing(m) && ON_THE_WAY_UP.has(phaseOf(m))).length + (creations?.create ?? 0);
  // Interrupted machines: at once when not available or the deadline is near, or when no
  // replacement is on its way for it (creation blocked or failing: its pods had better look for
  // room elsewhere now); else once the set holds its replicas available without them. The ones
  // with the latest deadlines wait first.
  let available = active.filter(isAvailable).length;
  const interrupted = replacing
    .filter(isInterrupted)
    .sort((a, b) => (interruptionDeadlineOf(b) ?? now) - (interruptionDeadlineOf(a) ?? now));
  for (const m of interrupted) {
    const dueAt = (interruptionDeadlineOf(m) ?? now) - lead;
    if (!isAvailable(m) || now >= dueAt || progressing <= 0) take(m, 'interrupted');
    else if (available - 1 >= replicas) take(m, 'interrupted');
    if (!chosen.has(m)) {
      progressing--;
      plan.recheckAt = Math.min(plan.recheckAt ?? Infinity, dueAt);
      continue;
    }
    if (isAvailable(m)) available--;
  }
  if (creations !== undefined) {
    return {
      ...creations,
      delete: plan.delete,
      ...(plan.recheckAt === undefined ? {} : { recheckAt: plan.recheckAt }),
    };
  }

  // Replaced machines whose replacement is there: not available ones at once, then while the
  // available machines stay at least the replicas; not while a pod on their node vetoes it.
  const held: { machine: M; veto: string }[] = [];
  const byAvailability = [...replacing].sort((a, b) => Number(isAvailable(a)) - Number(isAvailable(b)));
  for (const m of byAvailability) {
    if (chosen.has(m) || isInterrupted(m)) continue;
    const veto = opts.vetoOf?.(m);
    if (veto !== undefined) {
      held.push({ machine: m, veto });
      continue;
    }
    if (!isAvailable(m)) take(m, 'replaced');
    else if (available - 1 >= replicas) {
      take(m, 'replaced');
      if (chosen.has(m)) available--;
    }
  }
  if (held.length > 0) plan.held = held;
  // A held machine is not taken by a scale-down either: the veto holds whatever the reason.
  const isHeld = new Set<M>(held.map((h) => h.machine));
  // The replaced machines that stay for now keep their place above the replicas.
  const floor = replicas + replacing.filter((m) => !chosen.has(m)).length;

  // The scale-down order, computed at most once per plan.
  let order: M[] | undefined;
  const ordered = (): M[] => (order ??= sortForDeletion(removable, now));

  const surplus = removable.length - chosen.size - floor;
  if (surplus > 0) {
    let left = surplus;
    for (const m of ordered()) {
      if (left === 0) break;
      if (chosen.has(m) || isHeld.has(m)) continue;
      take(m, 'scale-down');
      left--;
    }
  }

  const scalerTime = Date.parse(
    ms.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime] ?? '',
  );
  if (!Number.isNaN(scalerTime)) {
    for (const m of ordered()) {
      if (active.length - chosen.size <= floor) break;
      if (isHeld.has(m)) continue;
      const mark = markedForDeletionTime(m);
      if (priorityOf(m) === DELETE_FIRST_MACHINE_PRIORITY && mark !== undefined && mark <= scalerTime) {
        take(m, 'marked-by-autoscaler');
      }
    }
  }

  for (const m of removable) {
    if (isFailed(m) && !shouldKeepFailedMachine(m, now)) take(m, 'failed');
  }
  return plan;
}

/** The plan when `missing` machines are missing: create them, unless scale-up is blocked. */
function planCreations(
  ms: MachineSet | DeepReadonly<MachineSet>,
  missing: number,
  burst: number,
): ReplicaPlan<never> {
  if (ms.metadata.labels?.[Label.Freeze] === LabelValue.True && ms.metadata.deletionTimestamp === undefined)
    return { create: 0, delete: [], scaleUpBlocked: 'frozen' };
  if (ms.metadata.labels?.[Label.ScaleUpDisabled] !== undefined)
    return { create: 0, delete: [], scaleUpBlocked: 'scale-up-disabled' };
  return { create: Math.min(missing, burst), delete: [] };
}

/**
 * planReplicas from the set's machine counts alone, when they prove that it would pick no
 * machine to delete: too few machines, or no surplus, no autoscaler mark and no Failed machine,
 * and none is being replaced.
 * Undefined otherwise: then the machines must be looked at (planReplicas).
 */
export function planReplicasFromCounts(
  ms: MachineSet | DeepReadonly<MachineSet>,
  counts: Pick<
    MachineCounts,
    | 'selected'
    | 'selectedTerminating'
    | 'selectedUpdateSuccessful'
    | 'selectedMarkedFirst'
    | 'selectedFailed'
    | 'selectedReplacing'
  >,
  burst: number,
): ReplicaPlan<never> | undefined {
  if (counts.selectedReplacing > 0) return undefined;
  const replicas = replicasOf(ms);
  const active = counts.selected - counts.selectedTerminating;
  if (active < replicas) return planCreations(ms, replicas - active, burst);
  if (active - counts.selectedUpdateSuccessful > replicas) return undefined;
  const scalerTime = ms.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime];
  if (scalerTime !== undefined && active > replicas && counts.selectedMarkedFirst > 0) return undefined;
  if (counts.selectedFailed > 0) return undefined;
  return { create: 0, delete: [] };
}

/**
 * Runs count calls of fn in batches of 1, 2, 4, …, stopping after the first batch with a failure,
 * so that a systematic error (quota, invalid template) costs one request instead of count.
 * Returns how many calls succeeded and the first error.
 */
export async function slowStartBatch(
  count: number,
  fn: (index: number) => Promise<void>,
): Promise<{ succeeded: number; attempted: number; error: unknown }> {
  let succeeded = 0;
  let attempted = 0;
  for (let size = Math.min(1, count); size > 0; size = Math.min(size * 2, count - attempted)) {
    const start = attempted;
    const results = await Promise.allSettled(Array.from({ length: size }, (_, i) => fn(start + i)));
    attempted += size;
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    succeeded += results.filter((r) => r.status === 'fulfilled').length;
    if (failed !== undefined) return { succeeded, attempted, error: failed.reason };
  }
  return { succeeded, attempted, error: undefined };
}
