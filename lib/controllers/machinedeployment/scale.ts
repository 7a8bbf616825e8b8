// Scaling a deployment's MachineSets when spec.replicas changes: how big the new set may be made,
// whether replicas changed since the sets were sized, how a change is distributed over the sets
// (pure planners), and the scaling-only step.

import { StrategyType } from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineSet } from '../../api/types.js';
import { cleanupOldMachineSets } from './cleanup.js';
import { resolveMachineSets } from './newset.js';
import { applyScale, splitSets, type DeploymentState, type PassContext, type ScaleTarget } from './pass.js';
import { compareStatesByAge, occupied, rolloutBounds, usable, type SetState } from './sets.js';

/** How big the new set may be made now (MCM's NewISNewReplicas). */
/** How big the new set may be made now (MCM's NewISNewReplicas). */
export function newSetReplicas(args: {
  strategy: StrategyType | undefined;
  replicas: number;
  maxSurge: number;
  newSet: SetState;
  allSets: readonly SetState[];
}): number {
  const { replicas, maxSurge, newSet, allSets } = args;
  if (args.strategy === StrategyType.Recreate) return replicas;
  const maxTotal = replicas + maxSurge;
  const current = allSets.reduce((sum, s) => sum + occupied(s), 0);
  if (current >= maxTotal) return newSet.replicas;
  return newSet.replicas + Math.max(0, Math.min(maxTotal - current, replicas - newSet.replicas));
}

/**
 * Whether spec.replicas changed since the sets were last sized: an active set's desired-replicas
 * annotation differs from it, or there is no active set while replicas are wanted.
 */
export function replicasChanged(replicas: number, sets: readonly SetState[]): boolean {
  const active = sets.filter((s) => s.replicas > 0);
  if (active.length === 0) return replicas > 0;
  return active.some((s) => s.desired !== undefined && s.desired !== replicas);
}

/**
 * A scaling event: replicas changed (replicasChanged) once the new set exists; before that the
 * change is a rollout.
 */
export function isScalingEvent(args: {
  replicas: number;
  newSet: SetState | undefined;
  allSets: readonly SetState[];
}): boolean {
  return args.newSet !== undefined && replicasChanged(args.replicas, args.allSets);
}

/** Larger sets first; among equal sizes the older one first. */
function bySizeThenAge(a: SetState, b: SetState): number {
  return b.replicas - a.replicas || compareStatesByAge(a, b);
}

function newestFirst(a: SetState, b: SetState): number {
  return compareStatesByAge(b, a);
}

/** How much a set's share changes when the deployment grows or shrinks (MCM's getMachineSetFraction). */
function fractionOf(s: SetState, replicas: number, maxSurge: number, statusReplicas: number): number {
  if (replicas === 0) return -s.replicas;
  const annotated = s.maxReplicas ?? statusReplicas;
  if (annotated <= 0) return 0;
  return Math.round((s.replicas * (replicas + maxSurge)) / annotated) - s.replicas;
}

/**
 * Distributes a change of spec.replicas over the sets (MCM's scale):
 * - at most one active set: it (or the newest set) gets all replicas;
 * - the new set is saturated (all replicas, all usable): old sets go to zero;
 * - rolling update: growth goes to the new set only, within the surge limit and counting machines
 *   that still exist; shrinking is shared proportionally to each set's size relative to the
 *   deployment size it was made for (max-replicas annotation), largest set first, with what
 *   rounding leaves over taken from the largest set.
 * Other strategies with several active sets are left alone.
 */
export function planScale(args: {
  replicas: number;
  maxSurge: number;
  rolling: boolean;
  newSet: SetState | undefined;
  oldSets: readonly SetState[];
  /** status.replicas of the deployment: the fallback for a missing max-replicas annotation. */
  statusReplicas: number;
}): ScaleTarget[] {
  const { replicas, maxSurge, newSet } = args;
  const olds = [...args.oldSets].sort(newestFirst);
  const all = newSet === undefined ? olds : [...olds, newSet];
  const active = all.filter((s) => s.replicas > 0);

  if (active.length <= 1) {
    const target = active[0] ?? newSet ?? olds[0];
    return target === undefined ? [] : [{ name: target.name, replicas }];
  }

  if (newSet?.replicas === replicas && newSet.desired === replicas && usable(newSet) === replicas) {
    return active.filter((s) => s !== newSet).map((s) => ({ name: s.name, replicas: 0 }));
  }

  if (!args.rolling) return [];

  const allowed = replicas > 0 ? replicas + maxSurge : 0;
  const activeTotal = active.reduce((sum, s) => sum + s.replicas, 0);
  const toAdd = allowed - activeTotal;
  const sizes = new Map(active.map((s) => [s.name, s.replicas]));

  if (toAdd > 0) {
    // Grow only into what the surge limit leaves once machines that still exist are counted.
    const room = Math.max(0, allowed - all.reduce((sum, s) => sum + occupied(s), 0));
    if (newSet !== undefined && sizes.has(newSet.name))
      sizes.set(newSet.name, newSet.replicas + Math.min(toAdd, room));
  } else if (toAdd < 0) {
    const ordered = [...active].sort(bySizeThenAge);
    let added = 0;
    for (const s of ordered) {
      if (added === toAdd) break;
      const proportion = Math.max(fractionOf(s, replicas, maxSurge, args.statusReplicas), toAdd - added);
      sizes.set(s.name, s.replicas + proportion);
      added += proportion;
    }
    const largest = ordered[0];
    if (largest !== undefined) {
      sizes.set(largest.name, Math.max(0, (sizes.get(largest.name) ?? 0) + (toAdd - added)));
    }
  }
  return active.map((s) => ({ name: s.name, replicas: Math.max(0, sizes.get(s.name) ?? s.replicas) }));
}

/**
 * Scaling only (a scaling event, a paused deployment, or a strategy we do not roll): the sets are
 * resized, old sets beyond the history limit removed when paused, nothing is rolled. Returns the
 * state and the new set's UID (undefined when there is none).
 */
export async function syncScaling(
  ctx: PassContext,
  initial: DeploymentState,
  opts: { createIfMissing: boolean },
): Promise<{ state: DeploymentState; newSetUID: string | undefined }> {
  const resolved = await resolveMachineSets(ctx, initial, opts.createIfMissing);
  let state = resolved.state;
  const newSetUID = resolved.newSetUID;
  const { newSet, oldSets } = splitSets(state, newSetUID);
  const newState = newSet === undefined ? undefined : ctx.stateOf(newSet);
  const oldStates = oldSets.map((s) => ctx.stateOf(s));
  const mcd = state.mcd;
  const replicas = replicasOf(mcd);
  const paused = mcd.spec?.paused === true;
  // While paused only a change of replicas is applied: filling the surge room would otherwise
  // grow the new set and quietly continue the rollout the user paused.
  const all = newState === undefined ? oldStates : [newState, ...oldStates];
  const targets: ScaleTarget[] =
    !paused || replicasChanged(replicas, all)
      ? planScale({
          replicas,
          maxSurge: rolloutBounds(mcd).maxSurge,
          rolling: mcd.spec?.strategy?.type === StrategyType.RollingUpdate,
          newSet: newState,
          oldSets: oldStates,
          statusReplicas: mcd.status?.replicas ?? 0,
        })
      : [];
  ({ state } = await applyScale(ctx, state, targets));
  if (paused && state.mcd.spec?.rollbackTo === undefined) {
    const old: MachineSet[] = splitSets(state, newSetUID).oldSets;
    state = await cleanupOldMachineSets(ctx, state, old);
  }
  return { state, newSetUID };
}
