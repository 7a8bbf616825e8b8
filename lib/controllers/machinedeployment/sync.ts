// MachineSet bookkeeping of a MachineDeployment: which set is new, its revision and annotations,
// how replicas are distributed when the deployment is scaled, and which old sets may go. The
// planners are pure; DeploymentPass carries the state of one reconcile and performs the writes.

import {
  Annotation,
  ConditionReason,
  EventReason,
  Label,
  MachineDeploymentConditionType,
  OrchestrationType,
  StrategyType,
} from '../../api/constants.js';
import {
  API_VERSION,
  MACHINE_CONFIGURATION_FIELDS,
  MachineDeploymentResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineDeploymentStatus,
  type LabelSelector,
  type MachineSet,
  type MachineTemplateSpec,
  type NodeTemplateSpec,
} from '../../api/types.js';
import { resolveFenceposts } from '../../api/intstr.js';
import type { KubeApi } from '../../kube/client.js';
import { jsonEqual, withoutGoZeroValues } from '../../kube/equal.js';
import type { Clock } from '../../kube/clock.js';
import { errorMessage, isAlreadyExists, isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder, EventType } from '../../kube/events.js';
import { CONTROLLER_UID_INDEX, clone, objectKey, type DeepReadonly } from '../../kube/informer.js';
import type { Logger } from '../../observability/logger.js';
import { findCondition, setCondition } from '../conditions.js';
import type { ControllerSettings, SharedInformers } from '../context.js';
import { controllerRefOf, isAvailable, isTerminating } from '../machines.js';
import { claim, controllerReference } from '../ownership.js';
import { machineSetName, templateHash, templatesEqualIgnoringHash } from './hash.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

/** The object with apiVersion and kind set, as full-object writes require. */
export function deploymentTypeMeta(mcd: MachineDeployment): MachineDeployment {
  return { ...mcd, apiVersion: API_VERSION, kind: MachineDeploymentResource.kind };
}

// ---------------------------------------------------------------------------------------------
// Small readers
// ---------------------------------------------------------------------------------------------

export function replicasOf(obj: AnySet | AnyDeployment): number {
  return obj.spec?.replicas ?? 0;
}

function parseCount(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value.trim());
}

/** The number in an annotation, when it holds a non-negative integer. */
export function countAnnotation(obj: AnySet | AnyDeployment, key: string): number | undefined {
  return parseCount(obj.metadata.annotations?.[key]);
}

/** The revision annotation as a number: 0 when absent, undefined when it is not a number. */
export function revisionOf(obj: AnySet | AnyDeployment): number | undefined {
  const raw = obj.metadata.annotations?.[Annotation.Revision];
  if (raw === undefined || raw === '') return 0;
  return parseCount(raw);
}

export function maxRevision(sets: readonly AnySet[]): number {
  return sets.reduce((max, s) => Math.max(max, revisionOf(s) ?? 0), 0);
}

function createdAt(obj: AnySet): number {
  const t = Date.parse(obj.metadata.creationTimestamp ?? '');
  return Number.isNaN(t) ? 0 : t;
}

/**
 * Oldest first. creationTimestamp has second precision, so sets created within one second are
 * ordered by revision (the order the deployment made them in), then by name.
 */
export function compareByAge(a: AnySet, b: AnySet): number {
  return (
    createdAt(a) - createdAt(b) ||
    (revisionOf(a) ?? 0) - (revisionOf(b) ?? 0) ||
    (a.metadata.name ?? '').localeCompare(b.metadata.name ?? '')
  );
}

/** Lowest revision first: the sets rolled away from longest ago. */
export function compareByRevision(a: AnySet, b: AnySet): number {
  return (revisionOf(a) ?? 0) - (revisionOf(b) ?? 0) || compareByAge(a, b);
}

// ---------------------------------------------------------------------------------------------
// Rollout bounds
// ---------------------------------------------------------------------------------------------

export interface RolloutBounds {
  /** Machines allowed above spec.replicas while rolling (0 for every other strategy). */
  maxSurge: number;
  /** Machines allowed below spec.replicas (0 for Recreate and for zero replicas). */
  maxUnavailable: number;
}

/**
 * maxSurge/maxUnavailable resolved against spec.replicas with MCM's rounding (surge up,
 * unavailable down, both zero means one unavailable), unavailable capped at the replicas. Only a
 * rolling update surges; an in-place update's bounds still define availability.
 */
export function rolloutBounds(mcd: AnyDeployment): RolloutBounds {
  const replicas = replicasOf(mcd);
  const strategy = mcd.spec?.strategy;
  const cap = (unavailable: number): number => (replicas === 0 ? 0 : Math.min(unavailable, replicas));
  switch (strategy?.type) {
    case StrategyType.RollingUpdate: {
      const f = resolveFenceposts(
        strategy.rollingUpdate?.maxSurge,
        strategy.rollingUpdate?.maxUnavailable,
        replicas,
      );
      return { maxSurge: f.maxSurge, maxUnavailable: cap(f.maxUnavailable) };
    }
    case StrategyType.InPlaceUpdate: {
      const inPlace = strategy.inPlaceUpdate;
      const surge = inPlace?.orchestrationType === OrchestrationType.Manual ? 0 : inPlace?.maxSurge;
      const f = resolveFenceposts(surge, inPlace?.maxUnavailable, replicas);
      return { maxSurge: 0, maxUnavailable: cap(f.maxUnavailable) };
    }
    case StrategyType.Recreate:
    case undefined:
      return { maxSurge: 0, maxUnavailable: 0 };
  }
}

// ---------------------------------------------------------------------------------------------
// What a MachineSet currently amounts to
// ---------------------------------------------------------------------------------------------

/**
 * The numbers of one MachineSet that scaling decisions need. Machine counts come from the shared
 * machine cache (the MachineSet controller acts on the same cache), not from MachineSet status,
 * which lags behind both the spec and the machines.
 */
export interface SetState {
  name: string;
  /** creationTimestamp in ms since the epoch (0 when unknown). */
  created: number;
  /** deployment.kubernetes.io/revision (0 when absent): orders sets created within one second. */
  revision?: number | undefined;
  /** spec.replicas */
  replicas: number;
  /** Machines of the set in the cache, including those being deleted. */
  machines: number;
  /** Machines of the set that are available (Running/Available) and not being deleted. */
  available: number;
  /** deployment.kubernetes.io/desired-replicas */
  desired?: number | undefined;
  /** deployment.kubernetes.io/max-replicas */
  maxReplicas?: number | undefined;
}

/**
 * Machines a set stands for when counting against the surge limit: what its spec asks for (which
 * covers machines whose creation the cache has not shown yet) or what exists (which covers
 * machines still terminating after a scale-down), whichever is more. A requested scale-down is
 * therefore not counted twice, and a machine that still exists is never counted as gone.
 */
export function occupied(s: SetState): number {
  return Math.max(s.replicas, s.machines);
}

/**
 * Available machines a set will still have once it reaches its spec: a set asked to shrink loses
 * machines even if all of them are available now. (Unhealthy machines are deleted first.)
 */
export function usable(s: SetState): number {
  return Math.min(s.replicas, s.available);
}

export function setStateOf(ms: AnySet, machines: readonly (Machine | DeepReadonly<Machine>)[]): SetState {
  return {
    name: ms.metadata.name ?? '',
    created: createdAt(ms),
    revision: revisionOf(ms) ?? 0,
    replicas: replicasOf(ms),
    machines: machines.length,
    available: machines.filter((m) => !isTerminating(m) && isAvailable(m)).length,
    desired: countAnnotation(ms, Annotation.DesiredReplicas),
    maxReplicas: countAnnotation(ms, Annotation.MaxReplicas),
  };
}

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

// ---------------------------------------------------------------------------------------------
// Scaling
// ---------------------------------------------------------------------------------------------

/**
 * Whether spec.replicas changed since the sets were last sized: an active set's desired-replicas
 * annotation differs from it, or there is no active set while replicas are wanted. Only asked
 * once the new set exists; before that the change is a rollout.
 */
export function isScalingEvent(args: {
  replicas: number;
  newSet: SetState | undefined;
  allSets: readonly SetState[];
}): boolean {
  if (args.newSet === undefined) return false;
  const active = args.allSets.filter((s) => s.replicas > 0);
  if (active.length === 0) return args.replicas > 0;
  return active.some((s) => s.desired !== undefined && s.desired !== args.replicas);
}

/** A set to (re)size; its replica annotations are refreshed even when the size stays. */
export interface ScaleTarget {
  name: string;
  replicas: number;
}

/** Oldest first (creation time, then revision, then name). */
export function compareStatesByAge(a: SetState, b: SetState): number {
  return a.created - b.created || (a.revision ?? 0) - (b.revision ?? 0) || a.name.localeCompare(b.name);
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

// ---------------------------------------------------------------------------------------------
// Revision history cleanup
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The new MachineSet
// ---------------------------------------------------------------------------------------------

/** Deployment annotations that stay on the deployment (gardener MCM's annotationsToSkip). */
export const ANNOTATIONS_NOT_COPIED: ReadonlySet<string> = new Set([
  Annotation.KubectlLastAppliedConfiguration,
  Annotation.Revision,
  Annotation.RevisionHistory,
  Annotation.DesiredReplicas,
  Annotation.MaxReplicas,
  Annotation.PreferNoSchedule,
  Annotation.SafetyUnfreeze,
  Annotation.TriggerDeletionByMCM,
]);

/**
 * The set whose template equals the deployment's, ignoring what is updated in place; the oldest
 * one if several do.
 */
export function findNewMachineSet<S extends AnySet>(mcd: AnyDeployment, sets: readonly S[]): S | undefined {
  const template = mcd.spec?.template;
  if (template === undefined) return undefined;
  return [...sets]
    .sort(compareByAge)
    .find((s) => s.spec?.template !== undefined && templatesEqualIgnoringHash(s.spec.template, template));
}

/**
 * Copies the deployment's annotations onto a set's annotation map (skip list aside). The scaler
 * time is special: with it, the MachineSet controller deletes the machines the autoscaler
 * marked whatever its replica count, so a set only gets it together with (or after) the replica
 * count that already accounts for those machines, never before.
 */
export function copyDeploymentAnnotations(mcd: AnyDeployment, target: Record<string, string>): void {
  for (const [key, value] of Object.entries(mcd.metadata.annotations ?? {})) {
    if (ANNOTATIONS_NOT_COPIED.has(key) || key === Annotation.LastDeploymentReplicaChangeByScalerTime)
      continue;
    target[key] = value;
  }
  const scalerTime = mcd.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime];
  if (scalerTime !== undefined && parseCount(target[Annotation.DesiredReplicas]) === replicasOf(mcd)) {
    target[Annotation.LastDeploymentReplicaChangeByScalerTime] = scalerTime;
  }
}

/** Sets desired-replicas and max-replicas to what the deployment asks for now. */
export function setReplicaAnnotations(
  mcd: AnyDeployment,
  target: Record<string, string>,
  maxSurge: number,
): void {
  target[Annotation.DesiredReplicas] = String(replicasOf(mcd));
  target[Annotation.MaxReplicas] = String(replicasOf(mcd) + maxSurge);
}

/**
 * The existing new set brought in line with the deployment without replacing machines: copied
 * annotations, the revision (raised to newRevision, the replaced revision kept in the history),
 * and the template parts that change in place (node template, machine configuration, class
 * kind), plus minReadySeconds and autoPreserveFailedMachineMax.
 */
export function planNewMachineSetSync(
  mcd: AnyDeployment,
  ms: AnySet,
  newRevision: number,
): { changed: boolean; next: MachineSet } {
  const next = clone<MachineSet>(ms);
  const annotations: Record<string, string> = { ...(next.metadata.annotations ?? {}) };
  copyDeploymentAnnotations(mcd, annotations);
  const current = revisionOf(ms);
  if (current !== undefined && current < newRevision) {
    const previous = ms.metadata.annotations?.[Annotation.Revision];
    annotations[Annotation.Revision] = String(newRevision);
    if (previous !== undefined && previous !== '') {
      const history = annotations[Annotation.RevisionHistory];
      annotations[Annotation.RevisionHistory] =
        history === undefined || history === '' ? previous : `${history},${previous}`;
    }
  }
  next.metadata.annotations = annotations;

  const spec = (next.spec ??= {});
  const want = mcd.spec?.template.spec ?? {};
  const tmplSpec = ((spec.template ??= {}).spec ??= {});
  if (!jsonEqual(withoutGoZeroValues(want.nodeTemplate), withoutGoZeroValues(tmplSpec.nodeTemplate))) {
    if (want.nodeTemplate === undefined) delete tmplSpec.nodeTemplate;
    else tmplSpec.nodeTemplate = clone<NodeTemplateSpec>(want.nodeTemplate);
  }
  const config = tmplSpec as Record<string, unknown>;
  for (const field of MACHINE_CONFIGURATION_FIELDS) {
    // Absent on the deployment means absent on the set (undefined is dropped when serialised).
    config[field] = want[field];
  }
  const kind = want.class?.kind;
  if (kind !== undefined && tmplSpec.class?.kind !== kind)
    tmplSpec.class = { ...(tmplSpec.class ?? {}), kind };
  if (mcd.spec?.minReadySeconds === undefined) delete spec.minReadySeconds;
  else spec.minReadySeconds = mcd.spec.minReadySeconds;
  if (mcd.spec?.autoPreserveFailedMachineMax === undefined) delete spec.autoPreserveFailedMachineMax;
  else spec.autoPreserveFailedMachineMax = mcd.spec.autoPreserveFailedMachineMax;

  return { changed: !jsonEqual(next, ms), next };
}

/** The MachineSet that runs the deployment's current template. */
export function buildNewMachineSet(
  mcd: AnyDeployment,
  opts: { hash: string; revision: number; replicas: number; maxSurge: number },
): MachineSet {
  const template = clone<MachineTemplateSpec>(mcd.spec?.template ?? {});
  const labels = { ...(template.metadata?.labels ?? {}), [Label.MachineTemplateHash]: opts.hash };
  template.metadata = { ...(template.metadata ?? {}), labels };
  const selector = clone<LabelSelector>(mcd.spec?.selector ?? {});
  selector.matchLabels = { ...(selector.matchLabels ?? {}), [Label.MachineTemplateHash]: opts.hash };
  const annotations: Record<string, string> = {};
  setReplicaAnnotations(mcd, annotations, opts.maxSurge);
  copyDeploymentAnnotations(mcd, annotations);
  annotations[Annotation.Revision] = String(opts.revision);
  const ms: MachineSet = {
    apiVersion: API_VERSION,
    kind: MachineSetResource.kind,
    metadata: {
      name: machineSetName(mcd.metadata.name ?? '', opts.hash),
      namespace: mcd.metadata.namespace ?? '',
      labels: { ...labels },
      annotations,
      ownerReferences: [
        controllerReference({
          apiVersion: API_VERSION,
          kind: MachineDeploymentResource.kind,
          name: mcd.metadata.name ?? '',
          uid: mcd.metadata.uid ?? '',
        }),
      ],
    },
    spec: { replicas: opts.replicas, selector, template },
  };
  if (mcd.spec?.minReadySeconds !== undefined && ms.spec !== undefined)
    ms.spec.minReadySeconds = mcd.spec.minReadySeconds;
  if (mcd.spec?.autoPreserveFailedMachineMax !== undefined && ms.spec !== undefined) {
    ms.spec.autoPreserveFailedMachineMax = mcd.spec.autoPreserveFailedMachineMax;
  }
  return ms;
}

// ---------------------------------------------------------------------------------------------
// Claiming MachineSets
// ---------------------------------------------------------------------------------------------

/**
 * The sets a deployment controls, after adopting matching orphans and releasing owned sets its
 * selector no longer matches (controller-reference rules, see ownership.ts). Returned as mutable
 * copies. Adoption is confirmed by a live read of the deployment, so that one that is gone (or
 * going) never adopts on the word of a stale cache.
 */
export async function claimMachineSets(
  client: KubeApi,
  informers: SharedInformers,
  mcd: MachineDeployment,
  deleting: boolean,
): Promise<MachineSet[]> {
  const owned = await claim({
    client,
    ownerRes: MachineDeploymentResource,
    childRes: MachineSetResource,
    children: informers.machineSets,
    owner: {
      apiVersion: API_VERSION,
      kind: MachineDeploymentResource.kind,
      name: mcd.metadata.name ?? '',
      uid: mcd.metadata.uid ?? '',
      deleting,
    },
    namespace: mcd.metadata.namespace,
    selector: mcd.spec?.selector,
  });
  return owned.map((s) => clone<MachineSet>(s));
}

// ---------------------------------------------------------------------------------------------
// One reconcile pass
// ---------------------------------------------------------------------------------------------

export interface PassDeps {
  client: KubeApi;
  /** Target cluster (Nodes); undefined without one. */
  target: KubeApi | undefined;
  informers: SharedInformers;
  clock: Clock;
  recorder: EventRecorder;
  settings: ControllerSettings;
}

/** Raised after a name collision was recorded in status: the next pass retries with a new name. */
export class MachineSetCollisionError extends Error {
  override readonly name = 'MachineSetCollisionError';
}

/**
 * The state of one reconcile of one MachineDeployment. `mcd` and `sets` always hold the newest
 * version this pass knows (the objects returned by its own writes), so that every write is
 * conditional on the resourceVersion it was computed from: a concurrent change, or a decision
 * taken on a stale cache, fails with a conflict and the key is retried instead of acting twice.
 * `status` collects the conditions decided during the pass; it is written once, at the end.
 */
export class DeploymentPass {
  readonly bounds: RolloutBounds;
  status: MachineDeploymentStatus;
  private readonly deferred: { err: unknown; context: string }[] = [];

  constructor(
    readonly deps: PassDeps,
    public mcd: MachineDeployment,
    public sets: MachineSet[],
    readonly log: Logger,
  ) {
    this.bounds = rolloutBounds(mcd);
    this.status = clone(mcd.status ?? {});
  }

  get replicas(): number {
    return replicasOf(this.mcd);
  }

  get now(): number {
    return this.deps.clock.now();
  }

  event(type: EventType, reason: string, message: string): void {
    this.deps.recorder.event(this.mcd, type, reason, message);
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
  throwDeferred(): void {
    if (this.deferred.length === 0) return;
    const first = this.deferred.find((d) => !isConflict(d.err)) ?? this.deferred[0];
    if (first === undefined) return;
    if (isConflict(first.err)) throw first.err;
    const details = this.deferred.map((d) => `${d.context}: ${errorMessage(d.err)}`).join('; ');
    throw new Error(`MachineDeployment ${objectKey(this.mcd)}: ${details}`, { cause: first.err });
  }

  machinesOf(ms: AnySet): readonly DeepReadonly<Machine>[] {
    const uid = ms.metadata.uid;
    return uid === undefined ? [] : this.deps.informers.machines.byIndex(CONTROLLER_UID_INDEX, uid);
  }

  stateOf(ms: AnySet): SetState {
    return setStateOf(ms, this.machinesOf(ms));
  }

  setCondition(
    type: MachineDeploymentConditionType,
    status: 'True' | 'False' | 'Unknown',
    reason: string,
    message: string,
  ): void {
    this.status.conditions = setCondition(
      this.status.conditions,
      { type, status, reason, message },
      this.now,
      {
        withUpdateTime: true,
      },
    );
  }

  private replaceSet(updated: MachineSet): MachineSet {
    const i = this.sets.findIndex((s) => s.metadata.uid === updated.metadata.uid);
    if (i >= 0) this.sets[i] = updated;
    else this.sets.push(updated);
    return updated;
  }

  /** Replaces a set (conditional on its resourceVersion) and remembers the result. */
  async updateMachineSet(next: MachineSet): Promise<MachineSet> {
    const updated = await this.deps.client.update<MachineSet>(MachineSetResource, {
      ...next,
      apiVersion: API_VERSION,
      kind: MachineSetResource.kind,
    });
    return this.replaceSet(updated);
  }

  /**
   * Sets a set's replicas and refreshes its replica annotations (and the scaler time, which may
   * only arrive together with the replicas that account for it). Writes only when something
   * differs; records ScalingMachineSet when the size changes.
   */
  async scaleMachineSet(ms: MachineSet, replicas: number): Promise<{ scaled: boolean; ms: MachineSet }> {
    const from = replicasOf(ms);
    const next = clone<MachineSet>(ms);
    (next.spec ??= {}).replicas = replicas;
    const annotations = { ...(next.metadata.annotations ?? {}) };
    setReplicaAnnotations(this.mcd, annotations, this.bounds.maxSurge);
    const scalerTime = this.mcd.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime];
    if (scalerTime !== undefined)
      annotations[Annotation.LastDeploymentReplicaChangeByScalerTime] = scalerTime;
    next.metadata.annotations = annotations;
    if (jsonEqual(next, ms)) return { scaled: false, ms };
    const updated = await this.updateMachineSet(next);
    if (from !== replicas) {
      const direction = replicas > from ? 'up' : 'down';
      this.event(
        'Normal',
        EventReason.ScalingMachineSet,
        `Scaled ${direction} machine set ${ms.metadata.name ?? ''} to ${replicas}`,
      );
      this.log.info('scaled machine set', { machineSet: ms.metadata.name, from, to: replicas });
    }
    return { scaled: from !== replicas, ms: updated };
  }

  /** Applies scale targets by set name, in order. */
  async applyScale(targets: readonly ScaleTarget[]): Promise<boolean> {
    let scaled = false;
    for (const t of targets) {
      const ms = this.sets.find((s) => s.metadata.name === t.name);
      if (ms === undefined) continue;
      scaled = (await this.scaleMachineSet(ms, t.replicas)).scaled || scaled;
    }
    return scaled;
  }

  /** Merge-patches deployment annotations (null removes one), conditional on its resourceVersion. */
  async patchDeploymentAnnotations(changes: Record<string, string | null>): Promise<void> {
    const updated = await this.deps.client.patch<MachineDeployment>(
      MachineDeploymentResource,
      this.mcd.metadata.name ?? '',
      { metadata: { resourceVersion: this.mcd.metadata.resourceVersion, annotations: changes } },
      { type: 'merge', namespace: this.mcd.metadata.namespace ?? '' },
    );
    this.mcd = updated;
  }

  /** Writes `status` when it differs from what the deployment has (conditional on resourceVersion). */
  async writeStatus(status: MachineDeploymentStatus): Promise<void> {
    this.status = status;
    if (jsonEqual(this.mcd.status ?? {}, status)) return;
    this.mcd = await this.deps.client.updateStatus<MachineDeployment>(MachineDeploymentResource, {
      ...deploymentTypeMeta(this.mcd),
      status,
    });
  }

  /**
   * The new set (created when asked and missing) and the old ones, with the new set's revision,
   * annotations and in-place fields synced and the deployment's revision annotation following it.
   */
  async resolveMachineSets(
    createIfMissing: boolean,
  ): Promise<{ newSet: MachineSet | undefined; oldSets: MachineSet[] }> {
    const found = findNewMachineSet(this.mcd, this.sets);
    const newRevision = maxRevision(this.sets.filter((s) => s !== found)) + 1;
    let newSet: MachineSet | undefined = found;
    // Read after the writes below, so the caller gets the objects those writes returned.
    const oldSets = (): MachineSet[] => this.sets.filter((s) => s.metadata.uid !== newSet?.metadata.uid);

    if (found !== undefined) {
      const plan = planNewMachineSetSync(this.mcd, found, newRevision);
      if (plan.changed) newSet = await this.updateMachineSet(plan.next);
      if (findCondition(this.status.conditions, MachineDeploymentConditionType.Progressing) === undefined) {
        this.setCondition(
          MachineDeploymentConditionType.Progressing,
          'True',
          ConditionReason.FoundNewMachineSet,
          `Found new machine set "${found.metadata.name ?? ''}"`,
        );
      }
    } else if (createIfMissing) {
      newSet = await this.createNewMachineSet(newRevision);
    } else {
      return { newSet: undefined, oldSets: oldSets() };
    }

    const revision = newSet?.metadata.annotations?.[Annotation.Revision];
    if (revision !== undefined && this.mcd.metadata.annotations?.[Annotation.Revision] !== revision) {
      await this.patchDeploymentAnnotations({ [Annotation.Revision]: revision });
    }
    return { newSet, oldSets: oldSets() };
  }

  private async createNewMachineSet(revision: number): Promise<MachineSet> {
    const template = this.mcd.spec?.template ?? {};
    const hash = templateHash(template, this.status.collisionCount);
    const probe = buildNewMachineSet(this.mcd, {
      hash,
      revision,
      replicas: 0,
      maxSurge: this.bounds.maxSurge,
    });
    const replicas = newSetReplicas({
      strategy: this.mcd.spec?.strategy?.type,
      replicas: this.replicas,
      maxSurge: this.bounds.maxSurge,
      newSet: setStateOf(probe, []),
      allSets: [...this.sets.map((s) => this.stateOf(s)), setStateOf(probe, [])],
    });
    const wanted = buildNewMachineSet(this.mcd, { hash, revision, replicas, maxSurge: this.bounds.maxSurge });
    const name = wanted.metadata.name ?? '';
    let created: MachineSet;
    try {
      created = await this.deps.client.create<MachineSet>(MachineSetResource, wanted);
    } catch (err) {
      if (isAlreadyExists(err)) return this.adoptExistingNewSet(wanted);
      const message = `Failed to create new machine set "${name}": ${err instanceof Error ? err.message : String(err)}`;
      this.setCondition(
        MachineDeploymentConditionType.Progressing,
        'False',
        ConditionReason.MachineSetCreateError,
        message,
      );
      this.event('Warning', EventReason.MachineSetCreateError, message);
      try {
        await this.writeStatus(this.status);
      } catch (statusErr) {
        // The creation error is what matters; the condition is written on the next pass.
        this.log.warn('could not record the machine set creation error in status', { err: statusErr });
      }
      throw err;
    }
    this.replaceSet(created);
    this.log.info('created new machine set', { machineSet: name, replicas, revision });
    if (replicas > 0)
      this.event('Normal', EventReason.ScalingMachineSet, `Scaled up machine set ${name} to ${replicas}`);
    this.setCondition(
      MachineDeploymentConditionType.Progressing,
      'True',
      ConditionReason.NewMachineSetCreated,
      `Created new machine set "${name}"`,
    );
    return created;
  }

  /**
   * The name is taken. Usually by our own set, created by an earlier pass the cache does not show
   * yet (read it live to be sure); otherwise it is a hash collision: count it in status so that the
   * next pass hashes differently.
   */
  private async adoptExistingNewSet(wanted: MachineSet): Promise<MachineSet> {
    const name = wanted.metadata.name ?? '';
    let existing: MachineSet | undefined;
    try {
      existing = await this.deps.client.get<MachineSet>(MachineSetResource, name, wanted.metadata.namespace);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const template = this.mcd.spec?.template;
    if (
      existing !== undefined &&
      controllerRefOf(existing)?.uid === this.mcd.metadata.uid &&
      existing.spec?.template !== undefined &&
      template !== undefined &&
      templatesEqualIgnoringHash(existing.spec.template, template)
    ) {
      return this.replaceSet(existing);
    }
    const before = this.status.collisionCount ?? 0;
    await this.writeStatus({ ...this.status, collisionCount: before + 1 });
    throw new MachineSetCollisionError(
      `machine set name ${name} is taken by another machine set; collisionCount ${before} -> ${before + 1}`,
    );
  }

  /** Deletes old sets beyond revisionHistoryLimit (see planCleanup). */
  async cleanupOldMachineSets(oldSets: readonly MachineSet[]): Promise<void> {
    for (const ms of planCleanup(oldSets, this.mcd.spec?.revisionHistoryLimit)) {
      if (this.machinesOf(ms).length > 0) continue;
      try {
        await this.deps.client.delete(MachineSetResource, ms.metadata.name ?? '', {
          namespace: ms.metadata.namespace ?? '',
          preconditions: { uid: ms.metadata.uid ?? '' },
        });
        this.log.info('deleted old machine set beyond the revision history limit', {
          machineSet: ms.metadata.name,
        });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }
}

/**
 * Scaling only (a scaling event, a paused deployment, or a strategy we do not roll): the sets are
 * resized, old sets beyond the history limit removed when paused, nothing is rolled.
 */
export async function syncScaling(
  pass: DeploymentPass,
  opts: { createIfMissing: boolean },
): Promise<MachineSet | undefined> {
  const { newSet, oldSets } = await pass.resolveMachineSets(opts.createIfMissing);
  const newState = newSet === undefined ? undefined : pass.stateOf(newSet);
  const oldStates = oldSets.map((s) => pass.stateOf(s));
  const paused = pass.mcd.spec?.paused === true;
  // While paused only a change of replicas is applied: filling the surge room would otherwise
  // grow the new set and quietly continue the rollout the user paused.
  const all = newState === undefined ? oldStates : [newState, ...oldStates];
  const active = all.filter((s) => s.replicas > 0);
  const scaling =
    !paused ||
    (active.length === 0
      ? pass.replicas > 0
      : active.some((s) => s.desired !== undefined && s.desired !== pass.replicas));
  const targets = scaling
    ? planScale({
        replicas: pass.replicas,
        maxSurge: pass.bounds.maxSurge,
        rolling: pass.mcd.spec?.strategy?.type === StrategyType.RollingUpdate,
        newSet: newState,
        oldSets: oldStates,
        statusReplicas: pass.mcd.status?.replicas ?? 0,
      })
    : [];
  await pass.applyScale(targets);
  if (pass.mcd.spec?.paused === true && pass.mcd.spec.rollbackTo === undefined) {
    await pass.cleanupOldMachineSets(pass.sets.filter((s) => s.metadata.uid !== newSet?.metadata.uid));
  }
  return pass.sets.find((s) => s.metadata.uid === newSet?.metadata.uid);
}
