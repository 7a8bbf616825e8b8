// One reconcile pass of a MachineDeployment: the state it carries from step to step (immutable;
// every step takes a state and returns the next one), what the steps read and report through
// (PassContext), and the writes they share. A step never keeps a MachineSet object across a write:
// it derives the sets it needs from the state it was given, by UID (splitSets).

import { Annotation, EventReason, type MachineDeploymentConditionType } from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import {
  API_VERSION,
  MachineDeploymentResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineDeploymentStatus,
  type MachineSet,
} from '../../api/types.js';
import type { KubeApi } from '../../kube/client.js';
import type { Clock } from '../../kube/clock.js';
import { jsonEqual } from '../../kube/equal.js';
import { errorMessage, isConflict } from '../../kube/errors.js';
import type { EventRecorder, EventType } from '../../kube/events.js';
import { CONTROLLER_UID_INDEX, clone, objectKey, type DeepReadonly } from '../../kube/informer.js';
import type { Logger } from '../../observability/logger.js';
import { setCondition } from '../conditions.js';
import type { OwnerCounts } from '../accounting.js';
import type { ControllerSettings, SharedInformers } from '../context.js';
import { rolloutBounds, setReplicaAnnotations, setStateOf, type SetState } from './sets.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;

/** The object with apiVersion and kind set, as full-object writes require. */
export function deploymentTypeMeta(mcd: MachineDeployment): MachineDeployment {
  return { ...mcd, apiVersion: API_VERSION, kind: MachineDeploymentResource.kind };
}

// ---- state ----

/**
 * What a pass knows: the newest versions of the deployment and its sets (those its own writes
 * returned, so every later write is conditional on the resourceVersion it was computed from), and
 * the status decided so far, written once at the end.
 */
export interface DeploymentState {
  readonly mcd: MachineDeployment;
  readonly sets: readonly MachineSet[];
  readonly status: MachineDeploymentStatus;
}

/** A step's outcome: the state after it, and when to reconcile again if it asks for that. */
export interface StepResult {
  state: DeploymentState;
  requeueAfter?: number | undefined;
}

export function initialState(mcd: MachineDeployment, sets: readonly MachineSet[]): DeploymentState {
  return { mcd, sets, status: clone(mcd.status ?? {}) };
}

/** The state with `updated` in place of the set with its UID (or added). */
export function withSet(state: DeploymentState, updated: MachineSet): DeploymentState {
  const uid = updated.metadata.uid;
  const found = state.sets.some((s) => s.metadata.uid === uid);
  return {
    ...state,
    sets: found ? state.sets.map((s) => (s.metadata.uid === uid ? updated : s)) : [...state.sets, updated],
  };
}

/** The state with a condition set on the status the pass will write. */
export function withCondition(
  state: DeploymentState,
  now: number,
  type: MachineDeploymentConditionType,
  status: 'True' | 'False' | 'Unknown',
  reason: string,
  message: string,
): DeploymentState {
  const conditions = setCondition(state.status.conditions, { type, status, reason, message }, now, {
    withUpdateTime: true,
  });
  return { ...state, status: { ...state.status, conditions } };
}

/** The new set (by UID) and the others, as the state holds them now. */
export function splitSets(
  state: DeploymentState,
  newSetUID: string | undefined,
): { newSet: MachineSet | undefined; oldSets: MachineSet[] } {
  const newSet = newSetUID === undefined ? undefined : state.sets.find((s) => s.metadata.uid === newSetUID);
  return { newSet, oldSets: state.sets.filter((s) => s !== newSet) };
}

// ---- context ----

export interface PassDeps {
  client: KubeApi;
  /** Target cluster (Nodes); undefined without one. */
  target: KubeApi | undefined;
  informers: SharedInformers;
  clock: Clock;
  recorder: EventRecorder;
  settings: ControllerSettings;
  /** The deployment's autoscaler maximum when it is a node group (voluntary surges stay under it). */
  groupMaxOf?: (mcd: DeepReadonly<MachineDeployment> | MachineDeployment) => number | undefined;
}

/**
 * What the steps of one pass read and report through: the clients and caches, the logger, events,
 * and failures that must not stop the pass but must fail it at the end (node bookkeeping).
 */
export class PassContext {
  private readonly deferred: { err: unknown; context: string }[] = [];

  constructor(
    readonly deps: PassDeps,
    readonly log: Logger,
  ) {}

  get now(): number {
    return this.deps.clock.now();
  }

  event(mcd: MachineDeployment, type: EventType, reason: string, message: string): void {
    this.deps.recorder.event(mcd, type, reason, message);
  }

  machinesOf(ms: AnySet): readonly DeepReadonly<Machine>[] {
    const uid = ms.metadata.uid;
    return uid === undefined ? [] : this.deps.informers.machines.byIndex(CONTROLLER_UID_INDEX, uid);
  }

  /** Counts of the set's machines that do not depend on its spec, from the accounting (no scan). */
  countsOf(ms: AnySet): OwnerCounts {
    return this.deps.informers.machineCounts.ownerlessCountsOf(ms.metadata.uid ?? '');
  }

  stateOf(ms: AnySet): SetState {
    return setStateOf(ms, this.countsOf(ms));
  }

  /** A failure that must not stop the pass but must fail it at the end (see throwDeferred). */
  deferFailure(err: unknown, context: string): void {
    this.deferred.push({ err, context });
  }

  /**
   * Fails the pass with the failures deferred during it, so that the key is retried with backoff:
   * conflicts alone are rethrown as the conflict (a plain requeue), anything else as one error
   * naming each failure, with the first real failure as its cause.
   */
  throwDeferred(mcd: MachineDeployment): void {
    if (this.deferred.length === 0) return;
    const first = this.deferred.find((d) => !isConflict(d.err)) ?? this.deferred[0];
    if (first === undefined) return;
    if (isConflict(first.err)) throw first.err;
    const details = this.deferred.map((d) => `${d.context}: ${errorMessage(d.err)}`).join('; ');
    throw new Error(`MachineDeployment ${objectKey(mcd)}: ${details}`, { cause: first.err });
  }
}

// ---- writes ----

/** Replaces a set (conditional on its resourceVersion); returns the state with the result. */
export async function updateMachineSet(
  ctx: PassContext,
  state: DeploymentState,
  next: MachineSet,
): Promise<DeploymentState> {
  const updated = await ctx.deps.client.update<MachineSet>(MachineSetResource, {
    ...next,
    apiVersion: API_VERSION,
    kind: MachineSetResource.kind,
  });
  return withSet(state, updated);
}

/**
 * Sets a set's replicas and refreshes its replica annotations (and the scaler time, which may
 * only arrive together with the replicas that account for it). Writes only when something
 * differs; records ScalingMachineSet when the size changes.
 */
export async function scaleMachineSet(
  ctx: PassContext,
  state: DeploymentState,
  ms: MachineSet,
  replicas: number,
): Promise<{ state: DeploymentState; scaled: boolean }> {
  const from = replicasOf(ms);
  const next = clone<MachineSet>(ms);
  (next.spec ??= {}).replicas = replicas;
  const annotations = { ...(next.metadata.annotations ?? {}) };
  setReplicaAnnotations(state.mcd, annotations, rolloutBounds(state.mcd).maxSurge);
  const scalerTime = state.mcd.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime];
  if (scalerTime !== undefined) annotations[Annotation.LastDeploymentReplicaChangeByScalerTime] = scalerTime;
  next.metadata.annotations = annotations;
  if (jsonEqual(next, ms)) return { state, scaled: false };
  const after = await updateMachineSet(ctx, state, next);
  if (from !== replicas) {
    const direction = replicas > from ? 'up' : 'down';
    ctx.event(
      state.mcd,
      'Normal',
      EventReason.ScalingMachineSet,
      `Scaled ${direction} machine set ${ms.metadata.name ?? ''} to ${replicas}`,
    );
    ctx.log.info('scaled machine set', { machineSet: ms.metadata.name, from, to: replicas });
  }
  return { state: after, scaled: from !== replicas };
}

/** A set to (re)size; its replica annotations are refreshed even when the size stays. */
export interface ScaleTarget {
  name: string;
  replicas: number;
}

/** Applies scale targets by set name, in order. */
export async function applyScale(
  ctx: PassContext,
  state: DeploymentState,
  targets: readonly ScaleTarget[],
): Promise<{ state: DeploymentState; scaled: boolean }> {
  let scaled = false;
  let current = state;
  for (const t of targets) {
    const ms = current.sets.find((s) => s.metadata.name === t.name);
    if (ms === undefined) continue;
    const r = await scaleMachineSet(ctx, current, ms, t.replicas);
    current = r.state;
    scaled = r.scaled || scaled;
  }
  return { state: current, scaled };
}

/** Merge-patches deployment annotations (null removes one), conditional on its resourceVersion. */
export async function patchDeploymentAnnotations(
  ctx: PassContext,
  state: DeploymentState,
  changes: Record<string, string | null>,
): Promise<DeploymentState> {
  const mcd = await ctx.deps.client.patch<MachineDeployment>(
    MachineDeploymentResource,
    state.mcd.metadata.name ?? '',
    { metadata: { resourceVersion: state.mcd.metadata.resourceVersion, annotations: changes } },
    { type: 'merge', namespace: state.mcd.metadata.namespace ?? '' },
  );
  return { ...state, mcd };
}

/** Writes `status` when it differs from what the deployment has (conditional on resourceVersion). */
export async function writeStatus(
  ctx: PassContext,
  state: DeploymentState,
  status: MachineDeploymentStatus,
): Promise<DeploymentState> {
  if (jsonEqual(state.mcd.status ?? {}, status)) return { ...state, status };
  const mcd = await ctx.deps.client.updateStatus<MachineDeployment>(MachineDeploymentResource, {
    ...deploymentTypeMeta(state.mcd),
    status,
  });
  return { ...state, mcd, status };
}
