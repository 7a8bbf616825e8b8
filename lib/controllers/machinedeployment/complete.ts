// The end of a rollout, shared by RollingUpdate and Recreate: once nothing is left to scale and the
// rollout is complete, node protection is lifted and old sets beyond the history limit go.

import { cleanupOldMachineSets } from './cleanup.js';
import { releaseNodesAfterRollout } from './nodes.js';
import { splitSets, type DeploymentState, type PassContext, type StepResult } from './pass.js';
import { calculateStatus, isComplete, syncRolloutStatus } from './progress.js';

/**
 * The end of a rollout pass with nothing left to scale (RollingUpdate and Recreate): once the
 * rollout is complete, node protection is lifted and old sets beyond the history limit go; then
 * status is written, with a requeue when the progress deadline must be checked.
 */
export async function finishRollout(
  ctx: PassContext,
  initial: DeploymentState,
  newSetUID: string | undefined,
): Promise<StepResult> {
  let state = initial;
  const status = calculateStatus({
    mcd: state.mcd,
    sets: state.sets,
    newSet: splitSets(state, newSetUID).newSet,
    conditions: state.status.conditions,
    collisionCount: state.status.collisionCount,
    now: ctx.now,
  });
  if (isComplete(state.mcd, status)) {
    state = await releaseNodesAfterRollout(ctx, state, newSetUID);
    state = await cleanupOldMachineSets(ctx, state, splitSets(state, newSetUID).oldSets);
  }
  return syncRolloutStatus(ctx, state, newSetUID);
}
