// RollingUpdate: replace machines a few at a time. Each pass takes one step: grow the new
// MachineSet as far as the surge limit allows, or else shrink old sets as far as the availability
// limit allows. Both limits hold for every state in between, because the step is computed from
// what exists (the machine cache) and from what was asked (spec.replicas), whichever is worse.

import { StrategyType } from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import { finishRollout } from './complete.js';
import { resolveMachineSets } from './newset.js';
import { prepareNodesForRollout } from './nodes.js';
import { applyScale, splitSets, type DeploymentState, type PassContext, type StepResult } from './pass.js';
import { syncRolloutStatus } from './progress.js';
import { newSetReplicas } from './scale.js';
import { compareStatesByAge, rolloutBounds, usable, type SetState } from './sets.js';

export interface ScaleChange {
  name: string;
  from: number;
  to: number;
}

export interface RollingStep {
  /** up: the new set grows; down: sets shrink; none: wait for machines to come or go. */
  direction: 'up' | 'down' | 'none';
  changes: ScaleChange[];
}

/**
 * One rolling-update step (pure), gardener MCM's reconcileNewMachineSet/reconcileOldMachineSets:
 *
 * Up: the new set may grow while the machines of all sets, counted as max(spec, existing), stay
 * within replicas + maxSurge, and never beyond replicas.
 *
 * Down: `maxScaledDown = all spec replicas - (replicas - maxUnavailable) - unavailable new
 * replicas`. First unhealthy replicas (spec minus usable) of old sets are removed, oldest set
 * first, within maxScaledDown: that costs no availability. Then old sets shrink, oldest first,
 * by as many as the usable machines exceed replicas - maxUnavailable. Usable machines are the
 * available ones a set keeps at its spec, so a requested shrink is never counted twice.
 */
export function planRollingStep(args: {
  replicas: number;
  maxSurge: number;
  maxUnavailable: number;
  newSet: SetState;
  oldSets: readonly SetState[];
}): RollingStep {
  const { replicas, maxSurge, maxUnavailable, newSet } = args;
  if (newSet.replicas > replicas) {
    return { direction: 'down', changes: [{ name: newSet.name, from: newSet.replicas, to: replicas }] };
  }
  if (newSet.replicas < replicas) {
    const to = newSetReplicas({
      strategy: StrategyType.RollingUpdate,
      replicas,
      maxSurge,
      newSet,
      allSets: [newSet, ...args.oldSets],
    });
    if (to > newSet.replicas)
      return { direction: 'up', changes: [{ name: newSet.name, from: newSet.replicas, to }] };
  }

  const olds = [...args.oldSets].sort(compareStatesByAge);
  if (olds.every((s) => s.replicas === 0)) return { direction: 'none', changes: [] };
  const minAvailable = replicas - maxUnavailable;
  const allReplicas = olds.reduce((n, s) => n + s.replicas, newSet.replicas);
  const maxScaledDown = allReplicas - minAvailable - (newSet.replicas - usable(newSet));
  if (maxScaledDown <= 0) return { direction: 'none', changes: [] };

  const target = new Map(olds.map((s) => [s.name, s.replicas]));
  const sizeOf = (s: SetState): number => target.get(s.name) ?? s.replicas;

  let cleaned = 0;
  for (const s of olds) {
    if (cleaned >= maxScaledDown) break;
    const unhealthy = s.replicas - usable(s);
    if (s.replicas === 0 || unhealthy <= 0) continue;
    const cut = Math.min(maxScaledDown - cleaned, unhealthy);
    target.set(s.name, s.replicas - cut);
    cleaned += cut;
  }

  const availableNow = olds.reduce((n, s) => n + Math.min(sizeOf(s), s.available), usable(newSet));
  let budget = availableNow - minAvailable;
  for (const s of olds) {
    if (budget <= 0) break;
    const size = sizeOf(s);
    if (size === 0) continue;
    const cut = Math.min(size, budget);
    target.set(s.name, size - cut);
    budget -= cut;
  }

  const changes = olds
    .filter((s) => sizeOf(s) !== s.replicas)
    .map((s) => ({ name: s.name, from: s.replicas, to: sizeOf(s) }));
  return { direction: changes.length > 0 ? 'down' : 'none', changes };
}

/** One pass of a rolling update: one step up or down, or the end of the rollout. */
export async function rolloutRolling(ctx: PassContext, initial: DeploymentState): Promise<StepResult> {
  const resolved = await resolveMachineSets(ctx, initial, true);
  const newSetUID = resolved.newSetUID;
  let state = await prepareNodesForRollout(ctx, resolved.state, newSetUID);
  const { newSet, oldSets } = splitSets(state, newSetUID);
  if (newSet === undefined) throw new Error('rolling update without a new machine set');
  const bounds = rolloutBounds(state.mcd);
  const step = planRollingStep({
    replicas: replicasOf(state.mcd),
    maxSurge: bounds.maxSurge,
    maxUnavailable: bounds.maxUnavailable,
    newSet: ctx.stateOf(newSet),
    oldSets: oldSets.map((s) => ctx.stateOf(s)),
  });
  if (step.changes.length > 0) {
    ctx.log.verbose('rolling update step', { direction: step.direction, changes: step.changes });
    ({ state } = await applyScale(
      ctx,
      state,
      step.changes.map((c) => ({ name: c.name, replicas: c.to })),
    ));
    return syncRolloutStatus(ctx, state, newSetUID);
  }
  return finishRollout(ctx, state, newSetUID);
}
