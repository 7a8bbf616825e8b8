// Recreate: remove every old machine, and only when none is left create the new ones.

import { replicasOf } from '../../api/replicas.js';
import { finishRollout } from './complete.js';
import { resolveMachineSets } from './newset.js';
import { disableScaleDown, oldSetsActive } from './nodes.js';
import {
  applyScale,
  scaleMachineSet,
  splitSets,
  type DeploymentState,
  type PassContext,
  type StepResult,
} from './pass.js';
import { syncRolloutStatus } from './progress.js';

export interface RecreateStep {
  /** Old sets still asked for machines: scale them to zero. */
  scaleDown: string[];
  /** Old machines still exist: wait for them (a machine deletion re-enqueues the deployment). */
  waitForOldMachines: boolean;
}

/**
 * What a Recreate pass does first (pure). Old machines are counted from the cache by their
 * MachineSet's UID, and also from the sets' status, so a machine the cache already dropped but
 * a set still reports keeps the new machines waiting too.
 */
export function planRecreate(
  oldSets: readonly { name: string; replicas: number; statusReplicas: number; machines: number }[],
): RecreateStep {
  const scaleDown = oldSets.filter((s) => s.replicas > 0).map((s) => s.name);
  return {
    scaleDown,
    waitForOldMachines: scaleDown.length > 0 || oldSets.some((s) => s.machines > 0 || s.statusReplicas > 0),
  };
}

/** One pass of a Recreate rollout: old sets to zero, wait for their machines, then the new set. */
export async function rolloutRecreate(ctx: PassContext, initial: DeploymentState): Promise<StepResult> {
  let { state, newSetUID } = await resolveMachineSets(ctx, initial, false);
  const before = splitSets(state, newSetUID);
  if (ctx.deps.settings.autoscalerScaleDownAnnotationDuringRollout && oldSetsActive(ctx, before.oldSets)) {
    const all = before.newSet === undefined ? before.oldSets : [...before.oldSets, before.newSet];
    await disableScaleDown(ctx, all);
  }
  const step = planRecreate(
    before.oldSets.map((s) => ({
      name: s.metadata.name ?? '',
      replicas: replicasOf(s),
      statusReplicas: s.status?.replicas ?? 0,
      machines: ctx.countsOf(s).all,
    })),
  );
  if (step.scaleDown.length > 0) {
    ({ state } = await applyScale(
      ctx,
      state,
      step.scaleDown.map((name) => ({ name, replicas: 0 })),
    ));
    return syncRolloutStatus(ctx, state, newSetUID);
  }
  if (step.waitForOldMachines) {
    ctx.log.verbose('waiting for the machines of old machine sets to be deleted');
    return syncRolloutStatus(ctx, state, newSetUID);
  }

  if (newSetUID === undefined) ({ state, newSetUID } = await resolveMachineSets(ctx, state, true));
  const { newSet } = splitSets(state, newSetUID);
  if (newSet === undefined) throw new Error('recreate without a new machine set');
  ({ state } = await scaleMachineSet(ctx, state, newSet, replicasOf(state.mcd)));
  return finishRollout(ctx, state, newSetUID);
}
