// Revision history: old MachineSets beyond revisionHistoryLimit are deleted once they are empty.

import { replicasOf } from '../../api/replicas.js';
import { MachineSetResource, type MachineSet } from '../../api/types.js';
import { isNotFound } from '../../kube/errors.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { DeploymentState, PassContext } from './pass.js';
import { compareByRevision } from './sets.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;

/**
 * Old sets beyond revisionHistoryLimit, lowest revision first (as current Kubernetes does; gardener
 * MCM orders by creation time, which cannot tell apart sets created within one second), that may
 * be deleted: only sets that are not being deleted, are scaled to zero, have no machines left and
 * whose controller has seen their latest spec. Without a limit every old set is kept.
 */
export function planCleanup<S extends AnySet>(oldSets: readonly S[], limit: number | undefined): S[] {
  if (limit === undefined) return [];
  const alive = oldSets.filter((s) => s.metadata.deletionTimestamp === undefined).sort(compareByRevision);
  const excess = alive.length - limit;
  if (excess <= 0) return [];
  return alive
    .slice(0, excess)
    .filter(
      (s) =>
        replicasOf(s) === 0 &&
        (s.status?.replicas ?? 0) === 0 &&
        (s.status?.observedGeneration ?? 0) >= (s.metadata.generation ?? 0),
    );
}

/** Deletes old sets beyond revisionHistoryLimit (see planCleanup) that have no machine left. */
export async function cleanupOldMachineSets(
  ctx: PassContext,
  state: DeploymentState,
  oldSets: readonly MachineSet[],
): Promise<DeploymentState> {
  for (const ms of planCleanup(oldSets, state.mcd.spec?.revisionHistoryLimit)) {
    if (ctx.countsOf(ms).all > 0) continue;
    try {
      await ctx.deps.client.delete(MachineSetResource, ms.metadata.name ?? '', {
        namespace: ms.metadata.namespace ?? '',
        preconditions: { uid: ms.metadata.uid ?? '' },
      });
      ctx.log.info('deleted old machine set beyond the revision history limit', {
        machineSet: ms.metadata.name,
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
  return state;
}
