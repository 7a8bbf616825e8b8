// InPlaceUpdate (the writes): one pass labels old sets and nodes, hands over machines whose update
// succeeded, sizes the sets, and selects the next nodes to update (Auto orchestration). Decisions
// come from inplace-plan.ts. Every write is conditional on the resourceVersion the decision was
// read from, so a pass working from a stale cache fails with a conflict and is retried instead of
// selecting or moving anything twice.

import {
  Annotation,
  EventReason,
  ExtensionAnnotation,
  Label,
  LabelValue,
  MachinePhase,
  NodeConditionType,
  OrchestrationType,
} from '../../api/constants.js';
import { parseDisruptionBudget, parseDisruptionSchedule, windowState } from '../../api/disruption.js';
import { replicasOf } from '../../api/replicas.js';
import {
  API_VERSION,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../api/types.js';
import { isNotFound } from '../../kube/errors.js';
import { clone, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node, OwnerReference } from '../../kube/types.js';
import { controllerReference } from '../ownership.js';
import { isAvailable, isTerminating, phaseOf } from '../machines.js';
import { finishRollout } from './complete.js';
import {
  activeOldSets,
  nodesToMarkCandidate,
  planNewSet,
  planOldSets,
  planSync,
  setsToDisable,
  type InPlaceInput,
  type InPlaceMachine,
  type InPlaceSet,
} from './inplace-plan.js';
import { resolveMachineSets } from './newset.js';
import { PREFER_NO_SCHEDULE_TAINT, prepareNodesForRollout, taintsWithout } from './nodes.js';
import {
  applyScale,
  scaleMachineSet,
  splitSets,
  updateMachineSet,
  type DeploymentState,
  type PassContext,
  type StepResult,
} from './pass.js';
import { syncRolloutStatus } from './progress.js';
import { rolloutBounds } from './sets.js';

type CachedMachine = DeepReadonly<Machine>;
type CachedNode = DeepReadonly<Node>;

/** Reason of the InPlaceUpdate condition among a node's (or a machine's mirrored) conditions. */
export function inPlaceReason(
  conditions: readonly { type: string; reason?: string }[] | undefined,
): string | undefined {
  return conditions?.find((c) => c.type === NodeConditionType.InPlaceUpdate)?.reason;
}

function nodeOf(ctx: PassContext, m: CachedMachine): CachedNode | undefined {
  const name = m.metadata.labels?.[Label.Node];
  if (name === undefined || name === '') return undefined;
  return ctx.deps.informers.nodes?.get(undefined, name);
}

/** What the planner needs to know about a machine and its node (from the caches). */
export function inPlaceMachineOf(m: CachedMachine, node: CachedNode | undefined): InPlaceMachine {
  const labels = node?.metadata.labels ?? {};
  return {
    name: m.metadata.name ?? '',
    node:
      node === undefined
        ? undefined
        : {
            name: node.metadata.name ?? '',
            candidate: labels[Label.CandidateForUpdate] !== undefined,
            selected: labels[Label.SelectedForUpdate] !== undefined,
            updateResult: labels[Label.UpdateResult],
            conditionReason: inPlaceReason(node.status?.conditions),
          },
    conditionReason: inPlaceReason(m.status?.conditions),
    phase: phaseOf(m),
    terminating: isTerminating(m),
    available: !isTerminating(m) && isAvailable(m),
    transferLabel: m.metadata.labels?.[Label.UpdateResult] === LabelValue.UpdateSuccessful,
  };
}

function inPlaceSetOf(ctx: PassContext, ms: MachineSet): InPlaceSet {
  return {
    state: ctx.stateOf(ms),
    machines: ctx.machinesOf(ms).map((m) => inPlaceMachineOf(m, nodeOf(ctx, m))),
    scaleUpDisabled: ms.metadata.labels?.[Label.ScaleUpDisabled] !== undefined,
  };
}

/**
 * The disruption budget and windows that bound the drains of an Auto in-place update, when the
 * deployment sets either annotation; invalid ones allow none (the Expiry condition reports them).
 */
export function inPlaceDisruption(
  mcd: DeepReadonly<MachineDeployment> | MachineDeployment,
  now: number,
): InPlaceInput['disruption'] {
  const a = mcd.metadata.annotations ?? {};
  const rawBudget = a[ExtensionAnnotation.DisruptionBudget];
  const rawSchedule = a[ExtensionAnnotation.DisruptionSchedule];
  if (rawBudget === undefined && rawSchedule === undefined) return undefined;
  const budget = parseDisruptionBudget(rawBudget, replicasOf(mcd));
  const schedule = parseDisruptionSchedule(rawSchedule);
  if (!budget.ok || !schedule.ok) {
    const problem = [budget, schedule]
      .map((r) => (r.ok ? '' : r.problem))
      .filter((p) => p !== '')
      .join('; ');
    return {
      allowed: 0,
      open: false,
      why: `invalid disruption settings (${problem}): no voluntary disruption`,
      recheckAt: undefined,
    };
  }
  const w = windowState(schedule.windows, now);
  return {
    allowed: rawBudget === undefined ? Number.POSITIVE_INFINITY : budget.allowed,
    open: w.open,
    why: w.open
      ? ''
      : `outside the disruption windows (${w.changesAt === undefined ? 'none opens within a year' : `the next opens at ${new Date(w.changesAt).toISOString()}`})`,
    recheckAt: w.changesAt,
  };
}

function inputOf(ctx: PassContext, state: DeploymentState, newSetUID: string): InPlaceInput {
  const { newSet, oldSets } = splitSets(state, newSetUID);
  if (newSet === undefined) throw new Error('in-place update without a new machine set');
  const bounds = rolloutBounds(state.mcd);
  return {
    replicas: replicasOf(state.mcd),
    maxSurge: bounds.maxSurge,
    maxUnavailable: bounds.maxUnavailable,
    manual: state.mcd.spec?.strategy?.inPlaceUpdate?.orchestrationType === OrchestrationType.Manual,
    disruption: inPlaceDisruption(state.mcd, ctx.now),
    newSet: inPlaceSetOf(ctx, newSet),
    oldSets: oldSets.map((s) => inPlaceSetOf(ctx, s)),
  };
}

// ---- node and machine writes ----

/** Merge-patches a node, conditional on the cached resourceVersion the decision was taken on. */
async function patchNode(ctx: PassContext, name: string, patch: Record<string, unknown>): Promise<void> {
  const target = ctx.deps.target;
  const node = ctx.deps.informers.nodes?.get(undefined, name);
  if (target === undefined || node === undefined) return;
  const metadata = { ...((patch.metadata as Record<string, unknown> | undefined) ?? {}) };
  metadata.resourceVersion = node.metadata.resourceVersion;
  try {
    await target.patch(CoreResources.nodes, name, { ...patch, metadata }, { type: 'merge' });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

async function labelNodes(ctx: PassContext, names: readonly string[], label: string): Promise<void> {
  for (const name of names) await patchNode(ctx, name, { metadata: { labels: { [label]: 'true' } } });
}

/**
 * A node whose machine now belongs to the new set: the protocol's labels and failure reason go,
 * the node is schedulable again and no longer discouraged from (PreferNoSchedule).
 */
async function finishNode(ctx: PassContext, name: string): Promise<void> {
  const node = ctx.deps.informers.nodes?.get(undefined, name);
  if (node === undefined) return;
  const taints = taintsWithout(node.spec?.taints, PREFER_NO_SCHEDULE_TAINT);
  await patchNode(ctx, name, {
    metadata: {
      labels: {
        [Label.CandidateForUpdate]: null,
        [Label.SelectedForUpdate]: null,
        [Label.UpdateResult]: null,
      },
      annotations: { [Annotation.UpdateFailedReason]: null },
    },
    spec: {
      unschedulable: null,
      ...(taints === undefined ? {} : { taints: taints.length === 0 ? null : taints }),
    },
  });
}

/** Selector labels of the old set that the new set does not share are removed from a machine. */
export function transferLabels(
  oldSelector: Readonly<Record<string, string>>,
  newSelector: Readonly<Record<string, string>>,
): Record<string, string | null> {
  const labels: Record<string, string | null> = {};
  for (const key of Object.keys(oldSelector)) if (!(key in newSelector)) labels[key] = null;
  return { ...labels, ...newSelector, [Label.UpdateResult]: LabelValue.UpdateSuccessful };
}

/**
 * Hands a machine over to the new set in one conditional write: the new set's selector labels
 * (plus update-result=successful, which keeps either set from counting it as surplus until the
 * sets are resized), the new set as controller, and the new template's class, since the machine
 * now runs it (so the old class is no longer in use).
 */
async function transferMachine(
  ctx: PassContext,
  m: CachedMachine,
  from: MachineSet,
  to: MachineSet,
): Promise<void> {
  const others = (m.metadata.ownerReferences ?? [])
    .filter((r) => r.controller !== true)
    .map((r) => clone<OwnerReference>(r));
  const owner = controllerReference({
    apiVersion: API_VERSION,
    kind: MachineSetResource.kind,
    name: to.metadata.name ?? '',
    uid: to.metadata.uid ?? '',
  });
  const cls = to.spec?.template?.spec?.class;
  await ctx.deps.client.patch<Machine>(
    MachineResource,
    m.metadata.name ?? '',
    {
      metadata: {
        resourceVersion: m.metadata.resourceVersion,
        labels: transferLabels(from.spec?.selector?.matchLabels ?? {}, to.spec?.selector?.matchLabels ?? {}),
        ownerReferences: [...others, owner],
      },
      ...(cls === undefined ? {} : { spec: { class: clone(cls) } }),
    },
    { type: 'merge', namespace: m.metadata.namespace ?? '' },
  );
}

async function unlabelMachine(ctx: PassContext, m: CachedMachine): Promise<void> {
  await ctx.deps.client.patch<Machine>(
    MachineResource,
    m.metadata.name ?? '',
    { metadata: { resourceVersion: m.metadata.resourceVersion, labels: { [Label.UpdateResult]: null } } },
    { type: 'merge', namespace: m.metadata.namespace ?? '' },
  );
}

async function disableScaleUp(ctx: PassContext, state: DeploymentState, names: readonly string[]) {
  let current = state;
  for (const name of names) {
    const ms = current.sets.find((s) => s.metadata.name === name);
    if (ms === undefined) continue;
    const next = clone<MachineSet>(ms);
    next.metadata.labels = { ...(next.metadata.labels ?? {}), [Label.ScaleUpDisabled]: 'true' };
    current = await updateMachineSet(ctx, current, next);
    ctx.log.verbose('old machine set no longer scales up', { machineSet: name });
  }
  return current;
}

function machineByName(ctx: PassContext, ms: MachineSet, name: string): CachedMachine | undefined {
  return ctx.machinesOf(ms).find((m) => m.metadata.name === name);
}

/** A Warning on the deployment for each machine whose in-place update failed (aggregated by the recorder). */
function reportFailures(ctx: PassContext, state: DeploymentState): void {
  for (const ms of state.sets) {
    for (const m of ctx.machinesOf(ms)) {
      if (phaseOf(m) !== MachinePhase.InPlaceUpdateFailed) continue;
      ctx.event(
        state.mcd,
        'Warning',
        EventReason.InPlaceUpdateFailed,
        `In-place update of machine ${m.metadata.name ?? ''} failed: ${m.status?.lastOperation?.description ?? 'no reason given'}`,
      );
    }
  }
}

// ---- the pass ----

/**
 * One pass of an InPlaceUpdate rollout (gardener MCM's rolloutInPlace). In order: old sets stop
 * scaling up; old nodes are tainted PreferNoSchedule and protected from autoscaler scale-down;
 * old nodes become update candidates; hand-overs of earlier passes are completed; then either the
 * new set changes (resize or hand-over) or the old sets do (resize or, with Auto orchestration,
 * select nodes for update); when nothing is left, the rollout is finished like any other.
 */
export async function rolloutInPlace(ctx: PassContext, initial: DeploymentState): Promise<StepResult> {
  const resolved = await resolveMachineSets(ctx, initial, true);
  const newSetUID = resolved.newSetUID;
  if (newSetUID === undefined) throw new Error('in-place update without a new machine set');
  let state = resolved.state;
  reportFailures(ctx, state);

  const first = inputOf(ctx, state, newSetUID);
  state = await disableScaleUp(ctx, state, setsToDisable(first.oldSets));
  if (activeOldSets(first.oldSets).length > 0) {
    state = await prepareNodesForRollout(ctx, state, newSetUID);
    await labelNodes(ctx, nodesToMarkCandidate(first.oldSets), Label.CandidateForUpdate);
  }

  // Hand-overs of earlier passes: the new set counts them, the old sets let them go.
  const sync = planSync(inputOf(ctx, state, newSetUID));
  {
    const { newSet } = splitSets(state, newSetUID);
    if (sync.newSetTo !== undefined && newSet !== undefined)
      ({ state } = await scaleMachineSet(ctx, state, newSet, sync.newSetTo));
    for (const name of sync.unlabelMachines) {
      const m = newSet === undefined ? undefined : machineByName(ctx, newSet, name);
      if (m !== undefined) await unlabelMachine(ctx, m);
    }
    for (const name of sync.finishNodes) await finishNode(ctx, name);
    ({ state } = await applyScale(
      ctx,
      state,
      sync.shrinkOld.map((c) => ({ name: c.name, replicas: c.to })),
    ));
  }

  const input = inputOf(ctx, state, newSetUID);
  const newStep = planNewSet(input);
  if (newStep.kind === 'scale') {
    const { newSet } = splitSets(state, newSetUID);
    if (newSet !== undefined) ({ state } = await scaleMachineSet(ctx, state, newSet, newStep.to));
    return syncRolloutStatus(ctx, state, newSetUID);
  }
  if (newStep.kind === 'transfer') {
    state = await transferAll(ctx, state, newSetUID, newStep.machines);
    return syncRolloutStatus(ctx, state, newSetUID);
  }

  const oldStep = planOldSets(input);
  if (oldStep.kind === 'scale') {
    ({ state } = await applyScale(
      ctx,
      state,
      oldStep.changes.map((c) => ({ name: c.name, replicas: c.to })),
    ));
    return syncRolloutStatus(ctx, state, newSetUID);
  }
  if (oldStep.kind === 'select') {
    for (const name of oldStep.nodes) {
      await patchNode(ctx, name, { metadata: { labels: { [Label.SelectedForUpdate]: 'true' } } });
      ctx.event(
        state.mcd,
        'Normal',
        EventReason.SelectedForUpdate,
        `Selected node ${name} for an in-place update`,
      );
    }
    ctx.log.info('selected nodes for an in-place update', { nodes: oldStep.nodes });
    return syncRolloutStatus(ctx, state, newSetUID);
  }
  ctx.log.debug('in-place update waits', { reason: oldStep.reason });
  const finished = await finishRollout(ctx, state, newSetUID);
  if (oldStep.recheckAt === undefined) return finished;
  const untilWindow = Math.max(1000, oldStep.recheckAt - ctx.now);
  return { ...finished, requeueAfter: Math.min(finished.requeueAfter ?? untilWindow, untilWindow) };
}

/**
 * Hands machines over, then moves their count from each old set to the new set. A failure part
 * way leaves machines labelled update-result=successful, which neither set removes as surplus,
 * and the next pass's sync (planSync) completes the counts.
 */
async function transferAll(
  ctx: PassContext,
  initial: DeploymentState,
  newSetUID: string,
  machines: readonly { name: string; from: string }[],
): Promise<DeploymentState> {
  let state = initial;
  const { newSet } = splitSets(state, newSetUID);
  if (newSet === undefined) return state;
  const moved = new Map<string, number>();
  let failure: Error | undefined;
  for (const { name, from } of machines) {
    const old = state.sets.find((s) => s.metadata.name === from);
    const m = old === undefined ? undefined : machineByName(ctx, old, name);
    if (old === undefined || m === undefined) continue;
    try {
      await transferMachine(ctx, m, old, newSet);
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err));
      break;
    }
    moved.set(from, (moved.get(from) ?? 0) + 1);
    const node = m.metadata.labels?.[Label.Node];
    if (node !== undefined) await patchNode(ctx, node, { spec: { unschedulable: null } });
    ctx.event(
      state.mcd,
      'Normal',
      EventReason.UpdatedInPlace,
      `Machine ${name} was updated in place and moved from machine set ${from} to ${newSet.metadata.name ?? ''}`,
    );
  }
  const total = [...moved.values()].reduce((a, b) => a + b, 0);
  if (total > 0) {
    const targets = [...moved].map(([name, n]) => ({
      name,
      replicas: Math.max(
        0,
        replicasOf(state.sets.find((s) => s.metadata.name === name) ?? { metadata: {} }) - n,
      ),
    }));
    ({ state } = await applyScale(ctx, state, targets));
    const current = splitSets(state, newSetUID).newSet;
    if (current !== undefined)
      ({ state } = await scaleMachineSet(ctx, state, current, replicasOf(current) + total));
  }
  if (failure !== undefined) throw failure;
  return state;
}
