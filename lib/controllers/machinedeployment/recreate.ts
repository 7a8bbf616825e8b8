// Recreate: remove every old machine, and only when none is left create the new ones.

import type { MachineSet } from '../../api/types.js';
import { oldSetsActive, disableScaleDown } from './nodes.js';
import { syncRolloutStatus } from './progress.js';
import { finishRollout } from './complete.js';
import type { DeploymentPass } from './sync.js';

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

/** One pass of a Recreate rollout; returns when to check the progress deadline, if due. */
export async function rolloutRecreate(pass: DeploymentPass): Promise<number | undefined> {
  let { newSet, oldSets } = await pass.resolveMachineSets(false);
  if (pass.deps.settings.autoscalerScaleDownAnnotationDuringRollout && oldSetsActive(pass, oldSets)) {
    await disableScaleDown(pass, newSet === undefined ? oldSets : [...oldSets, newSet]);
  }
  const current = (ms: MachineSet): MachineSet =>
    pass.sets.find((s) => s.metadata.uid === ms.metadata.uid) ?? ms;

  const step = planRecreate(
    oldSets.map((s) => ({
      name: s.metadata.name ?? '',
      replicas: s.spec?.replicas ?? 0,
      statusReplicas: s.status?.replicas ?? 0,
      machines: pass.machinesOf(s).length,
    })),
  );
  if (step.scaleDown.length > 0) {
    await pass.applyScale(step.scaleDown.map((name) => ({ name, replicas: 0 })));
    return syncRolloutStatus(pass, newSet === undefined ? undefined : current(newSet));
  }
  if (step.waitForOldMachines) {
    pass.log.verbose('waiting for the machines of old machine sets to be deleted');
    return syncRolloutStatus(pass, newSet === undefined ? undefined : current(newSet));
  }

  if (newSet === undefined) ({ newSet, oldSets } = await pass.resolveMachineSets(true));
  if (newSet === undefined) throw new Error('recreate without a new machine set');
  await pass.scaleMachineSet(current(newSet), pass.replicas);

  return finishRollout(pass, current(newSet), oldSets.map(current));
}
