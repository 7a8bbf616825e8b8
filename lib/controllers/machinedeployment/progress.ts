// MachineDeployment status: replica counts summed over the MachineSets, the Available,
// Progressing and ReplicaFailure conditions, and when to look again for a progress deadline.

import {
  ConditionReason,
  MachineDeploymentConditionType,
  MachineSetConditionType,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import type {
  MachineDeployment,
  MachineDeploymentCondition,
  MachineDeploymentStatus,
  MachineSet,
  MachineSummary,
} from '../../api/types.js';
import { clone, type DeepReadonly } from '../../kube/informer.js';
import { selectorToString } from '../../kube/labels.js';
import { findCondition, removeCondition, rfc3339, setCondition } from '../conditions.js';
import { splitSets, writeStatus, type DeploymentState, type PassContext, type StepResult } from './pass.js';
import { rolloutBounds } from './sets.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

const { Available, Progressing, ReplicaFailure } = MachineDeploymentConditionType;

/** Progressing reasons of this implementation that are not in gardener MCM. */
export const ExtraProgressingReason = {
  InPlaceUpdateNotSupported: ConditionReason.InPlaceUpdateNotSupported,
} as const;

/** ReplicaFailure reason for a spec the controller cannot act on. */
export const INVALID_SPEC_REASON = ConditionReason.InvalidSpec;

const sum = (sets: readonly AnySet[], pick: (s: AnySet) => number | undefined): number =>
  sets.reduce((total, s) => total + (pick(s) ?? 0), 0);

/** A MachineSet condition as the deployment reports it (MCM's MachineSetToMachineDeploymentCondition). */
function fromSetCondition(set: AnySet): MachineDeploymentCondition | undefined {
  const c = set.status?.machineSetCondition?.find((x) => x.type === MachineSetConditionType.ReplicaFailure);
  if (c === undefined) return undefined;
  const cond: MachineDeploymentCondition = { type: ReplicaFailure, status: c.status };
  if (c.lastTransitionTime !== undefined) {
    cond.lastTransitionTime = c.lastTransitionTime;
    cond.lastUpdateTime = c.lastTransitionTime;
  }
  if (c.reason !== undefined) cond.reason = c.reason;
  if (c.message !== undefined) cond.message = c.message;
  return cond;
}

/**
 * The deployment status the sets amount to (pure): counts from MachineSet status (what users see
 * on the sets), failed machines gathered from them, conditions carried over from `conditions`
 * with Available recomputed and ReplicaFailure mirrored from the new set (else any set).
 */
export function calculateStatus(args: {
  mcd: AnyDeployment;
  sets: readonly AnySet[];
  newSet: AnySet | undefined;
  conditions: readonly MachineDeploymentCondition[] | undefined;
  collisionCount: number | undefined;
  now: number;
}): MachineDeploymentStatus {
  const { mcd, sets, newSet, now } = args;
  const available = sum(sets, (s) => s.status?.availableReplicas);
  const preservedFailed = sum(sets, (s) => s.status?.preservedFailedReplicas);
  const status: MachineDeploymentStatus = {
    observedGeneration: mcd.metadata.generation ?? 0,
    replicas: sum(sets, (s) => s.status?.replicas),
    updatedReplicas: newSet?.status?.replicas ?? 0,
    readyReplicas: sum(sets, (s) => s.status?.readyReplicas),
    availableReplicas: available,
    preservedFailedReplicas: preservedFailed,
    unavailableReplicas: Math.max(sum(sets, (s) => s.spec?.replicas) - available, 0),
  };
  if (args.collisionCount !== undefined) status.collisionCount = args.collisionCount;
  const failed: MachineSummary[] = sets.flatMap((s) =>
    (s.status?.failedMachines ?? []).map((f) => clone<MachineSummary>(f)),
  );
  if (failed.length > 0) status.failedMachines = failed;
  if (mcd.spec?.selector !== undefined) status.labelSelector = selectorToString(mcd.spec.selector);

  const replicas = replicasOf(mcd);
  const minRequired = Math.max(replicas - rolloutBounds(mcd).maxUnavailable - preservedFailed, 0);
  let conditions = setCondition(
    args.conditions,
    available >= minRequired
      ? {
          type: Available,
          status: 'True',
          reason: ConditionReason.MinimumReplicasAvailable,
          message: 'Deployment has minimum availability.',
        }
      : {
          type: Available,
          status: 'False',
          reason: ConditionReason.MinimumReplicasUnavailable,
          message: 'Deployment does not have minimum availability.',
        },
    now,
    { withUpdateTime: true },
  );
  const failure =
    (newSet === undefined ? undefined : fromSetCondition(newSet)) ?? firstDefined(sets.map(fromSetCondition));
  if (failure === undefined) {
    conditions = removeCondition(conditions, ReplicaFailure);
  } else {
    const existing = findCondition(conditions, ReplicaFailure);
    if (
      existing?.status !== failure.status ||
      existing.reason !== failure.reason ||
      existing.message !== failure.message
    ) {
      conditions = [...removeCondition(conditions, ReplicaFailure), failure];
    }
  }
  if (conditions.length > 0) status.conditions = conditions;
  return status;
}

function firstDefined<T>(items: readonly (T | undefined)[]): T | undefined {
  return items.find((i) => i !== undefined);
}

/** Every machine runs the current template and is available, and the status is current. */
export function isComplete(mcd: AnyDeployment, status: MachineDeploymentStatus): boolean {
  const replicas = replicasOf(mcd);
  return (
    status.updatedReplicas === replicas &&
    status.replicas === replicas &&
    status.availableReplicas === replicas &&
    (status.observedGeneration ?? 0) >= (mcd.metadata.generation ?? 0)
  );
}

/** More updated, ready or available machines, or fewer old ones, than the previous status. */
export function isProgressing(previous: MachineDeploymentStatus, next: MachineDeploymentStatus): boolean {
  const oldBefore = (previous.replicas ?? 0) - (previous.updatedReplicas ?? 0);
  const oldNow = (next.replicas ?? 0) - (next.updatedReplicas ?? 0);
  return (
    (next.updatedReplicas ?? 0) > (previous.updatedReplicas ?? 0) ||
    oldNow < oldBefore ||
    (next.readyReplicas ?? 0) > (previous.readyReplicas ?? 0) ||
    (next.availableReplicas ?? 0) > (previous.availableReplicas ?? 0)
  );
}

/** When the Progressing condition runs out of time, or undefined when no deadline applies. */
function deadlineOf(mcd: AnyDeployment, status: MachineDeploymentStatus): number | undefined {
  const seconds = mcd.spec?.progressDeadlineSeconds;
  if (seconds === undefined) return undefined;
  const cond = findCondition(status.conditions, Progressing);
  if (cond === undefined) return undefined;
  const from = Date.parse(cond.lastUpdateTime ?? '');
  return Number.isNaN(from) ? undefined : from + seconds * 1000;
}

/**
 * No progress reported for progressDeadlineSeconds. The deadline itself counts as passed, so a
 * pass requeued exactly at the deadline reports it.
 */
export function hasTimedOut(mcd: AnyDeployment, status: MachineDeploymentStatus, now: number): boolean {
  const cond = findCondition(status.conditions, Progressing);
  if (cond === undefined || cond.reason === ConditionReason.NewMachineSetAvailable) return false;
  if (cond.reason === ConditionReason.ProgressDeadlineExceeded) return true;
  const deadline = deadlineOf(mcd, status);
  return deadline !== undefined && now >= deadline;
}

/** Milliseconds until the progress deadline must be checked, if a check is due at all. */
export function nextProgressCheck(
  mcd: AnyDeployment,
  status: MachineDeploymentStatus,
  now: number,
): number | undefined {
  const cond = findCondition(status.conditions, Progressing);
  if (cond === undefined || isComplete(mcd, status)) return undefined;
  if (
    cond.reason === ConditionReason.ProgressDeadlineExceeded ||
    cond.reason === ConditionReason.NewMachineSetAvailable
  ) {
    return undefined;
  }
  const deadline = deadlineOf(mcd, status);
  return deadline === undefined ? undefined : Math.max(1, deadline - now);
}

/**
 * The Progressing condition after a rollout step (MCM's syncRolloutStatus): complete, still
 * progressing (which restarts the deadline clock), or out of time. A completed rollout stays
 * reported as complete while no old machines are left.
 */
export function withRolloutProgress(args: {
  mcd: AnyDeployment;
  previous: MachineDeploymentStatus;
  next: MachineDeploymentStatus;
  newSetName: string | undefined;
  now: number;
}): MachineDeploymentStatus {
  const { mcd, previous, next, now } = args;
  const current = findCondition(next.conditions, Progressing);
  const subject =
    args.newSetName === undefined
      ? `Machine Deployment "${mcd.metadata.name ?? ''}"`
      : `MachineSet "${args.newSetName}"`;
  if (next.replicas === next.updatedReplicas && current?.reason === ConditionReason.NewMachineSetAvailable)
    return next;
  const out = { ...next };
  if (isComplete(mcd, next)) {
    out.conditions = setCondition(
      next.conditions,
      {
        type: Progressing,
        status: 'True',
        reason: ConditionReason.NewMachineSetAvailable,
        message: `${subject} has successfully progressed.`,
      },
      now,
      { withUpdateTime: true },
    );
  } else if (isProgressing(previous, next)) {
    // Progress restarts the deadline clock even when reason and message stay the same.
    const stamp = rfc3339(now);
    const cond: MachineDeploymentCondition = {
      type: Progressing,
      status: 'True',
      reason: ConditionReason.MachineSetUpdated,
      message: `${subject} is progressing.`,
      lastUpdateTime: stamp,
      lastTransitionTime:
        current?.status === 'True' && current.lastTransitionTime !== undefined
          ? current.lastTransitionTime
          : stamp,
    };
    out.conditions = [...removeCondition(next.conditions, Progressing), cond];
  } else if (hasTimedOut(mcd, next, now)) {
    out.conditions = setCondition(
      next.conditions,
      {
        type: Progressing,
        status: 'False',
        reason: ConditionReason.ProgressDeadlineExceeded,
        message: `${subject} has timed out progressing.`,
      },
      now,
      { withUpdateTime: true },
    );
  }
  return out;
}

/**
 * Progressing=Unknown while paused (DeploymentPaused) and once after resuming (DeploymentResumed),
 * so time spent paused never counts against the progress deadline. A reported deadline overrun
 * is left alone.
 */
export function withPauseCondition(
  conditions: readonly MachineDeploymentCondition[] | undefined,
  paused: boolean,
  now: number,
): MachineDeploymentCondition[] {
  const cond = findCondition(conditions, Progressing);
  const list = [...(conditions ?? [])];
  if (cond?.reason === ConditionReason.ProgressDeadlineExceeded) return list;
  const pausedNow = cond?.reason === ConditionReason.DeploymentPaused;
  if (paused && !pausedNow) {
    return setCondition(
      list,
      {
        type: Progressing,
        status: 'Unknown',
        reason: ConditionReason.DeploymentPaused,
        message: 'Deployment is paused',
      },
      now,
      {
        withUpdateTime: true,
      },
    );
  }
  if (!paused && pausedNow) {
    return setCondition(
      list,
      {
        type: Progressing,
        status: 'Unknown',
        reason: ConditionReason.DeploymentResumed,
        message: 'Deployment is resumed',
      },
      now,
      {
        withUpdateTime: true,
      },
    );
  }
  return list;
}

/** Writes the status of a pass that only scaled (no progress accounting). */
export async function syncStatus(
  ctx: PassContext,
  state: DeploymentState,
  newSetUID: string | undefined,
): Promise<DeploymentState> {
  return writeStatus(
    ctx,
    state,
    calculateStatus({
      mcd: state.mcd,
      sets: state.sets,
      newSet: splitSets(state, newSetUID).newSet,
      conditions: state.status.conditions,
      collisionCount: state.status.collisionCount,
      now: ctx.now,
    }),
  );
}

/**
 * Writes the status after a rollout step, with the Progressing condition updated; asks to be
 * requeued when the progress deadline must be checked next, if at all.
 */
export async function syncRolloutStatus(
  ctx: PassContext,
  state: DeploymentState,
  newSetUID: string | undefined,
): Promise<StepResult> {
  const previous = state.status;
  const newSet = splitSets(state, newSetUID).newSet;
  const next = withRolloutProgress({
    mcd: state.mcd,
    previous,
    next: calculateStatus({
      mcd: state.mcd,
      sets: state.sets,
      newSet,
      conditions: previous.conditions,
      collisionCount: previous.collisionCount,
      now: ctx.now,
    }),
    newSetName: newSet?.metadata.name,
    now: ctx.now,
  });
  const after = await writeStatus(ctx, state, next);
  return { state: after, requeueAfter: nextProgressCheck(after.mcd, next, ctx.now) };
}
