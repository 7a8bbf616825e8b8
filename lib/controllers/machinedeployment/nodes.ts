// What a rollout does to the Nodes of the target cluster: a PreferNoSchedule taint on nodes of old
// MachineSets so that pods move to new machines first, and cluster-autoscaler's scale-down-disabled
// annotations so that the autoscaler does not remove nodes while machines are being replaced.
// Nodes are read from the shared node cache and found through the machines' `node` label. Nothing
// happens without a target cluster.

import {
  Annotation,
  CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE,
  Label,
  PREFER_NO_SCHEDULE_VALUE,
  TaintEffect,
  TaintKey,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import type { Node, Taint } from '../../kube/types.js';
import type { Machine, MachineSet } from '../../api/types.js';
import { isNotFound } from '../../kube/errors.js';
import { clone, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import { splitSets, updateMachineSet, type DeploymentState, type PassContext } from './pass.js';

type AnyNode = Node | DeepReadonly<Node>;
type AnyTaint = Taint | DeepReadonly<Taint>;

export const PREFER_NO_SCHEDULE_TAINT: Taint = {
  key: TaintKey.PreferNoSchedule,
  value: PREFER_NO_SCHEDULE_VALUE,
  effect: TaintEffect.PreferNoSchedule,
};

const sameSlot = (a: AnyTaint, b: AnyTaint): boolean => a.key === b.key && a.effect === b.effect;

/** The node's taints with `taint` added (or its value updated), or undefined when already there. */
export function taintsWith(taints: readonly AnyTaint[] | undefined, taint: Taint): Taint[] | undefined {
  const list = (taints ?? []).map((t) => clone<Taint>(t));
  const existing = list.find((t) => sameSlot(t, taint));
  if (existing !== undefined && (existing.value ?? '') === (taint.value ?? '')) return undefined;
  return [...list.filter((t) => !sameSlot(t, taint)), { ...taint }];
}

/** The node's taints without `taint` (same key and effect), or undefined when it is not there. */
export function taintsWithout(taints: readonly AnyTaint[] | undefined, taint: Taint): Taint[] | undefined {
  const list = (taints ?? []).map((t) => clone<Taint>(t));
  const kept = list.filter((t) => !sameSlot(t, taint));
  return kept.length === list.length ? undefined : kept;
}

/**
 * Annotations that keep cluster-autoscaler from scaling a node down during a rollout, with the
 * by-mcm marker that later allows removing them; undefined when nothing needs to change. A node
 * whose scale-down-disabled annotation was set by someone else (no marker) is left alone, so that
 * completing the rollout never removes a user's own annotation.
 */
export function scaleDownDisabledPatch(node: AnyNode): Record<string, string> | undefined {
  const annotations = node.metadata.annotations ?? {};
  const value = annotations[Annotation.ClusterAutoscalerScaleDownDisabled];
  const byMCM = annotations[Annotation.ClusterAutoscalerScaleDownDisabledByMCM];
  if (value !== undefined && byMCM === undefined) return undefined;
  if (
    value === CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE &&
    byMCM === CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE
  ) {
    return undefined;
  }
  return {
    [Annotation.ClusterAutoscalerScaleDownDisabled]: CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE,
    [Annotation.ClusterAutoscalerScaleDownDisabledByMCM]: CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE,
  };
}

/** Removes the scale-down protection again, only where our marker shows that we added it. */
export function scaleDownRestorePatch(node: AnyNode): Record<string, null> | undefined {
  if (node.metadata.annotations?.[Annotation.ClusterAutoscalerScaleDownDisabledByMCM] === undefined)
    return undefined;
  return {
    [Annotation.ClusterAutoscalerScaleDownDisabled]: null,
    [Annotation.ClusterAutoscalerScaleDownDisabledByMCM]: null,
  };
}

/** Whether node work is possible: a target cluster and its node cache. */
function nodeAccess(ctx: PassContext): boolean {
  return ctx.deps.target !== undefined && ctx.deps.informers.nodes !== undefined;
}

/** The cached nodes backing a set's machines (machines without a node yet are skipped). */
function nodesOf(
  ctx: PassContext,
  ms: MachineSet,
): { machine: DeepReadonly<Machine>; node: DeepReadonly<Node> }[] {
  const nodes = ctx.deps.informers.nodes;
  if (nodes === undefined) return [];
  const out: { machine: DeepReadonly<Machine>; node: DeepReadonly<Node> }[] = [];
  for (const machine of ctx.machinesOf(ms)) {
    const name = machine.metadata.labels?.[Label.Node];
    if (name === undefined || name === '') continue;
    const node = nodes.get(undefined, name);
    if (node !== undefined) out.push({ machine, node });
  }
  return out;
}

/**
 * Merge-patches a node. A failure does not stop the rollout (node bookkeeping must not hold
 * machines back): it is reported as false and deferred to the end of the pass, which then fails
 * so that the work queue retries with backoff.
 */
async function patchNode(
  ctx: PassContext,
  node: DeepReadonly<Node>,
  patch: unknown,
  what: string,
): Promise<boolean> {
  const target = ctx.deps.target;
  if (target === undefined) return false;
  try {
    await target.patch(CoreResources.nodes, node.metadata.name ?? '', patch, { type: 'merge' });
    return true;
  } catch (err) {
    if (isNotFound(err)) return true;
    ctx.deferFailure(err, `could not ${what} on node ${node.metadata.name ?? ''}`);
    return false;
  }
}

/** Replaces spec.taints, conditional on the node's resourceVersion so a concurrent change is never lost. */
function taintPatch(node: DeepReadonly<Node>, taints: Taint[]): unknown {
  return {
    metadata: { resourceVersion: node.metadata.resourceVersion },
    spec: { taints: taints.length === 0 ? null : taints },
  };
}

async function setPreferNoScheduleAnnotation(
  ctx: PassContext,
  state: DeploymentState,
  ms: MachineSet,
  present: boolean,
): Promise<DeploymentState> {
  const next = clone<MachineSet>(ms);
  const { [Annotation.PreferNoSchedule]: _previous, ...others } = next.metadata.annotations ?? {};
  next.metadata.annotations = present
    ? { ...others, [Annotation.PreferNoSchedule]: PREFER_NO_SCHEDULE_VALUE }
    : others;
  return updateMachineSet(ctx, state, next);
}

/**
 * Taints the nodes of old sets PreferNoSchedule, then annotates each set so it is done once. A set
 * is annotated only when all its nodes were tainted, so a failed node is retried next pass. Each
 * iteration writes only its own set, so the sets taken from the state stay current for it.
 */
export async function taintOldSetNodes(
  ctx: PassContext,
  initial: DeploymentState,
  oldSets: readonly MachineSet[],
): Promise<DeploymentState> {
  let state = initial;
  if (!nodeAccess(ctx)) return state;
  for (const ms of oldSets) {
    if (ms.metadata.annotations?.[Annotation.PreferNoSchedule] !== undefined) continue;
    let allDone = true;
    for (const { node } of nodesOf(ctx, ms)) {
      const taints = taintsWith(node.spec?.taints, PREFER_NO_SCHEDULE_TAINT);
      if (taints === undefined) continue;
      allDone =
        (await patchNode(ctx, node, taintPatch(node, taints), 'add the prefer-no-schedule taint')) && allDone;
    }
    if (allDone) {
      state = await setPreferNoScheduleAnnotation(ctx, state, ms, true);
      ctx.log.verbose('tainted the nodes of an old machine set', { machineSet: ms.metadata.name });
    }
  }
  return state;
}

/** Removes the PreferNoSchedule taint from a set's nodes and then its annotation (if it has one). */
export async function untaintSetNodes(
  ctx: PassContext,
  state: DeploymentState,
  ms: MachineSet,
): Promise<DeploymentState> {
  if (!nodeAccess(ctx) || ms.metadata.annotations?.[Annotation.PreferNoSchedule] === undefined) return state;
  let allDone = true;
  for (const { node } of nodesOf(ctx, ms)) {
    const taints = taintsWithout(node.spec?.taints, PREFER_NO_SCHEDULE_TAINT);
    if (taints === undefined) continue;
    allDone =
      (await patchNode(ctx, node, taintPatch(node, taints), 'remove the prefer-no-schedule taint')) &&
      allDone;
  }
  return allDone ? setPreferNoScheduleAnnotation(ctx, state, ms, false) : state;
}

/** Protects every node of the given sets from cluster-autoscaler scale-down. */
export async function disableScaleDown(ctx: PassContext, sets: readonly MachineSet[]): Promise<void> {
  if (!nodeAccess(ctx)) return;
  for (const ms of sets) {
    for (const { node } of nodesOf(ctx, ms)) {
      const annotations = scaleDownDisabledPatch(node);
      if (annotations === undefined) continue;
      await patchNode(ctx, node, { metadata: { annotations } }, 'disable autoscaler scale-down');
    }
  }
}

/**
 * Lifts the scale-down protection where we set it, except on nodes of preserved machines (the
 * machine controller keeps them protected for as long as the preservation lasts).
 */
export async function restoreScaleDown(ctx: PassContext, sets: readonly MachineSet[]): Promise<void> {
  if (!nodeAccess(ctx)) return;
  for (const ms of sets) {
    for (const { machine, node } of nodesOf(ctx, ms)) {
      if ((machine.status?.currentStatus?.preserveExpiryTime ?? '') !== '') continue;
      const annotations = scaleDownRestorePatch(node);
      if (annotations === undefined) continue;
      await patchNode(ctx, node, { metadata: { annotations } }, 'restore autoscaler scale-down');
    }
  }
}

/** Old sets still have machines (or are asked for some): the rollout is not over. */
export function oldSetsActive(ctx: PassContext, oldSets: readonly MachineSet[]): boolean {
  return oldSets.some((s) => replicasOf(s) > 0 || (s.status?.replicas ?? 0) > 0 || ctx.countsOf(s).all > 0);
}

/** The rollout's node bookkeeping at its start: taint old nodes, protect all nodes from scale-down. */
export async function prepareNodesForRollout(
  ctx: PassContext,
  initial: DeploymentState,
  newSetUID: string | undefined,
): Promise<DeploymentState> {
  const state = await taintOldSetNodes(ctx, initial, splitSets(initial, newSetUID).oldSets);
  const { newSet, oldSets } = splitSets(state, newSetUID);
  if (ctx.deps.settings.autoscalerScaleDownAnnotationDuringRollout && oldSetsActive(ctx, oldSets)) {
    await disableScaleDown(ctx, newSet === undefined ? oldSets : [...oldSets, newSet]);
  }
  return state;
}

/** The rollout's node bookkeeping once it is complete. */
export async function releaseNodesAfterRollout(
  ctx: PassContext,
  state: DeploymentState,
  newSetUID: string | undefined,
): Promise<DeploymentState> {
  if (ctx.deps.settings.autoscalerScaleDownAnnotationDuringRollout) await restoreScaleDown(ctx, state.sets);
  const { newSet } = splitSets(state, newSetUID);
  return newSet === undefined ? state : untaintSetNodes(ctx, state, newSet);
}
