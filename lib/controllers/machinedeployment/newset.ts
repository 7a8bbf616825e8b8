// The deployment's "new" MachineSet, the one running its current template: which set it is, what
// it looks like when created, how an existing one is kept in line with the deployment without
// replacing machines (pure planners), and the step that finds, syncs or creates it.

import {
  Annotation,
  ConditionReason,
  EventReason,
  Label,
  MachineDeploymentConditionType,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import {
  API_VERSION,
  MACHINE_CONFIGURATION_FIELDS,
  MachineDeploymentResource,
  MachineSetResource,
  type LabelSelector,
  type MachineDeployment,
  type MachineSet,
  type MachineTemplateSpec,
  type NodeTemplateSpec,
} from '../../api/types.js';
import { jsonEqual, withoutGoZeroValues } from '../../kube/equal.js';
import { errorMessage, isAlreadyExists, isNotFound } from '../../kube/errors.js';
import { clone, type DeepReadonly } from '../../kube/informer.js';
import { findCondition } from '../conditions.js';
import { controllerRefOf } from '../machines.js';
import { controllerReference } from '../ownership.js';
import { machineSetName, templateHash, templatesEqualIgnoringHash } from '../../api/template.js';
import {
  patchDeploymentAnnotations,
  splitSets,
  updateMachineSet,
  withCondition,
  withSet,
  writeStatus,
  type DeploymentState,
  type PassContext,
} from './pass.js';
import { newSetReplicas } from './scale.js';
import {
  compareByAge,
  maxRevision,
  parseCount,
  revisionOf,
  rolloutBounds,
  setReplicaAnnotations,
  NO_MACHINES,
  setStateOf,
} from './sets.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

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
  // A set that was old during an in-place update and is the deployment's template again (a
  // rollback, or the template changed back) must be able to create machines.
  if (next.metadata.labels?.[Label.ScaleUpDisabled] !== undefined) {
    const { [Label.ScaleUpDisabled]: _disabled, ...labels } = next.metadata.labels;
    next.metadata.labels = labels;
  }

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

/** Raised after a name collision was recorded in status: the next pass retries with a new name. */
export class MachineSetCollisionError extends Error {
  override readonly name = 'MachineSetCollisionError';
}

/**
 * The new set (created when asked and missing) with its revision, annotations and in-place fields
 * synced and the deployment's revision annotation following it. Returns the state and the new
 * set's UID (undefined when there is none and none was to be created).
 */
export async function resolveMachineSets(
  ctx: PassContext,
  initial: DeploymentState,
  createIfMissing: boolean,
): Promise<{ state: DeploymentState; newSetUID: string | undefined }> {
  let state = initial;
  const found = findNewMachineSet(state.mcd, state.sets);
  const newRevision = maxRevision(state.sets.filter((s) => s !== found)) + 1;
  let newSetUID: string | undefined;
  if (found !== undefined) {
    newSetUID = found.metadata.uid;
    const plan = planNewMachineSetSync(state.mcd, found, newRevision);
    if (plan.changed) state = await updateMachineSet(ctx, state, plan.next);
    if (findCondition(state.status.conditions, MachineDeploymentConditionType.Progressing) === undefined) {
      state = withCondition(
        state,
        ctx.now,
        MachineDeploymentConditionType.Progressing,
        'True',
        ConditionReason.FoundNewMachineSet,
        `Found new machine set "${found.metadata.name ?? ''}"`,
      );
    }
  } else if (createIfMissing) {
    let created: MachineSet;
    ({ state, newSet: created } = await createNewMachineSet(ctx, state, newRevision));
    newSetUID = created.metadata.uid;
  } else {
    return { state, newSetUID: undefined };
  }

  const revision = splitSets(state, newSetUID).newSet?.metadata.annotations?.[Annotation.Revision];
  if (revision !== undefined && state.mcd.metadata.annotations?.[Annotation.Revision] !== revision) {
    state = await patchDeploymentAnnotations(ctx, state, { [Annotation.Revision]: revision });
  }
  return { state, newSetUID };
}

async function createNewMachineSet(
  ctx: PassContext,
  initial: DeploymentState,
  revision: number,
): Promise<{ state: DeploymentState; newSet: MachineSet }> {
  let state = initial;
  const mcd = state.mcd;
  const maxSurge = rolloutBounds(mcd).maxSurge;
  const hash = templateHash(mcd.spec?.template ?? {}, state.status.collisionCount);
  const probe = buildNewMachineSet(mcd, { hash, revision, replicas: 0, maxSurge });
  const replicas = newSetReplicas({
    strategy: mcd.spec?.strategy?.type,
    replicas: replicasOf(mcd),
    maxSurge,
    newSet: setStateOf(probe, NO_MACHINES),
    allSets: [...state.sets.map((s) => ctx.stateOf(s)), setStateOf(probe, NO_MACHINES)],
  });
  const wanted = buildNewMachineSet(mcd, { hash, revision, replicas, maxSurge });
  const name = wanted.metadata.name ?? '';
  let created: MachineSet;
  try {
    created = await ctx.deps.client.create<MachineSet>(MachineSetResource, wanted);
  } catch (err) {
    if (isAlreadyExists(err)) return adoptExistingNewSet(ctx, state, wanted);
    const message = `Failed to create new machine set "${name}": ${errorMessage(err)}`;
    state = withCondition(
      state,
      ctx.now,
      MachineDeploymentConditionType.Progressing,
      'False',
      ConditionReason.MachineSetCreateError,
      message,
    );
    ctx.event(mcd, 'Warning', EventReason.MachineSetCreateError, message);
    try {
      await writeStatus(ctx, state, state.status);
    } catch (statusErr) {
      // The creation error is what matters; the condition is written on the next pass.
      ctx.log.warn('could not record the machine set creation error in status', { err: statusErr });
    }
    throw err;
  }
  state = withSet(state, created);
  ctx.log.info('created new machine set', { machineSet: name, replicas, revision });
  if (replicas > 0)
    ctx.event(mcd, 'Normal', EventReason.ScalingMachineSet, `Scaled up machine set ${name} to ${replicas}`);
  state = withCondition(
    state,
    ctx.now,
    MachineDeploymentConditionType.Progressing,
    'True',
    ConditionReason.NewMachineSetCreated,
    `Created new machine set "${name}"`,
  );
  return { state, newSet: created };
}

/**
 * The name is taken. Usually by our own set, created by an earlier pass the cache does not show
 * yet (read it live to be sure); otherwise it is a hash collision: count it in status so that the
 * next pass hashes differently.
 */
async function adoptExistingNewSet(
  ctx: PassContext,
  state: DeploymentState,
  wanted: MachineSet,
): Promise<{ state: DeploymentState; newSet: MachineSet }> {
  const name = wanted.metadata.name ?? '';
  let existing: MachineSet | undefined;
  try {
    existing = await ctx.deps.client.get<MachineSet>(MachineSetResource, name, wanted.metadata.namespace);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const template = state.mcd.spec?.template;
  if (
    existing !== undefined &&
    controllerRefOf(existing)?.uid === state.mcd.metadata.uid &&
    existing.spec?.template !== undefined &&
    template !== undefined &&
    templatesEqualIgnoringHash(existing.spec.template, template)
  ) {
    return { state: withSet(state, existing), newSet: existing };
  }
  const before = state.status.collisionCount ?? 0;
  await writeStatus(ctx, state, { ...state.status, collisionCount: before + 1 });
  throw new MachineSetCollisionError(
    `machine set name ${name} is taken by another machine set; collisionCount ${before} -> ${before + 1}`,
  );
}
