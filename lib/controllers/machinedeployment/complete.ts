// The end of a rollout, shared by RollingUpdate and Recreate: once nothing is left to scale and the
// rollout is complete, node protection is lifted and old sets beyond the history limit go.

import type { MachineSet } from '../../api/types.js';
import { releaseNodesAfterRollout } from './nodes.js';
import { calculateStatus, isComplete, syncRolloutStatus } from './progress.js';
import type { DeploymentPass } from './sync.js';

/**
 * The end of a rollout pass with nothing left to scale (RollingUpdate and Recreate): once the
 * rollout is complete, node protection is lifted and old sets beyond the history limit go; then
 * status is written. Returns when to check the progress deadline, if due.
 */
export async function finishRollout(
  pass: DeploymentPass,
  newSet: MachineSet,
  oldSets: readonly MachineSet[],
): Promise<number | undefined> {
  const status = calculateStatus({
    mcd: pass.mcd,
    sets: pass.sets,
    newSet,
    conditions: pass.status.conditions,
    collisionCount: pass.status.collisionCount,
    now: pass.now,
  });
  if (isComplete(pass.mcd, status)) {
    await releaseNodesAfterRollout(pass, newSet);
    await pass.cleanupOldMachineSets(oldSets);
  }
  return syncRolloutStatus(pass, newSet);
}
