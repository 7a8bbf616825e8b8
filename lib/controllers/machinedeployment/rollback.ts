// spec.rollbackTo (deprecated in the API but implemented, as in gardener MCM): copy the template
// of an earlier revision back into the deployment, then clear the request. The rollout that
// follows is an ordinary one.

import { EventReason, Label } from '../../api/constants.js';
import {
  MachineDeploymentResource,
  type MachineDeployment,
  type MachineSet,
  type MachineTemplateSpec,
} from '../../api/types.js';
import { clone, type DeepReadonly } from '../../kube/informer.js';
import { templatesEqualIgnoringHash } from '../../api/template.js';
import { ANNOTATIONS_NOT_COPIED, findNewMachineSet } from './newset.js';
import { untaintSetNodes } from './nodes.js';
import { deploymentTypeMeta, type DeploymentState, type PassContext } from './pass.js';
import { revisionOf } from './sets.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;

export type RollbackTarget<S extends AnySet> =
  | { found: true; revision: number; set: S }
  | { found: false; revision: number; reason: 'no-previous-revision' | 'revision-not-found' };

/**
 * The set to roll back to (pure). Revision 0 means the one before the current: the second highest
 * revision when the current template has a set, else the highest (the current template is then
 * a revision that has no set yet).
 */
export function findRollbackTarget<S extends AnySet>(
  mcd: MachineDeployment | DeepReadonly<MachineDeployment>,
  sets: readonly S[],
  requested: number,
): RollbackTarget<S> {
  let revision = requested;
  if (revision === 0) {
    const revisions = [...new Set(sets.map((s) => revisionOf(s) ?? 0).filter((r) => r > 0))].sort(
      (a, b) => b - a,
    );
    const current = findNewMachineSet(mcd, sets);
    revision = (current === undefined ? revisions[0] : revisions[1]) ?? 0;
    if (revision === 0) return { found: false, revision, reason: 'no-previous-revision' };
  }
  const set = sets.find((s) => revisionOf(s) === revision);
  return set === undefined
    ? { found: false, revision, reason: 'revision-not-found' }
    : { found: true, revision, set };
}

/**
 * The deployment with the template of `ms` (without the template-hash label) and its annotations
 * replaced by those of the set, keeping the deployment's own bookkeeping annotations (MCM's
 * SetFromMachineSetTemplate + SetMachineDeploymentAnnotationsTo). Pure.
 */
export function rolledBackDeployment(mcd: MachineDeployment, ms: AnySet): MachineDeployment {
  const next = clone(mcd);
  const template = clone<MachineTemplateSpec>(ms.spec?.template ?? {});
  if (template.metadata?.labels !== undefined) {
    const { [Label.MachineTemplateHash]: _hash, ...labels } = template.metadata.labels;
    template.metadata.labels = labels;
  }
  if (next.spec !== undefined) next.spec.template = template;
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries(mcd.metadata.annotations ?? {}))
    if (ANNOTATIONS_NOT_COPIED.has(k)) annotations[k] = v;
  for (const [k, v] of Object.entries(ms.metadata.annotations ?? {}))
    if (!ANNOTATIONS_NOT_COPIED.has(k)) annotations[k] = v;
  next.metadata.annotations = annotations;
  return next;
}

/** Performs spec.rollbackTo; the request is always cleared (conditional on resourceVersion). */
export async function rollback(ctx: PassContext, initial: DeploymentState): Promise<DeploymentState> {
  let state = initial;
  const mcd = state.mcd;
  const name = mcd.metadata.name ?? '';
  const target = findRollbackTarget(mcd, state.sets, mcd.spec?.rollbackTo?.revision ?? 0);
  let next = clone(mcd);
  let rolledBack = false;
  if (!target.found) {
    const message =
      target.reason === 'no-previous-revision'
        ? 'Unable to find last revision.'
        : 'Unable to find the revision to rollback to.';
    ctx.event(mcd, 'Warning', EventReason.DeploymentRollbackRevisionNotFound, message);
  } else {
    state = await untaintSetNodes(ctx, state, target.set);
    const template = mcd.spec?.template;
    const targetTemplate = target.set.spec?.template;
    if (
      template !== undefined &&
      targetTemplate !== undefined &&
      templatesEqualIgnoringHash(template, targetTemplate)
    ) {
      ctx.event(
        mcd,
        'Warning',
        EventReason.DeploymentRollbackTemplateUnchanged,
        `The rollback revision contains the same template as current deployment "${name}"`,
      );
    } else {
      next = rolledBackDeployment(next, target.set);
      rolledBack = true;
    }
  }
  if (next.spec !== undefined) delete next.spec.rollbackTo;
  const updated = await ctx.deps.client.update<MachineDeployment>(
    MachineDeploymentResource,
    deploymentTypeMeta(next),
  );
  if (target.found && rolledBack) {
    ctx.log.info('rolled back', { revision: target.revision, machineSet: target.set.metadata.name });
    ctx.event(
      updated,
      'Normal',
      EventReason.DeploymentRollback,
      `Rolled back deployment "${name}" to revision ${target.revision}`,
    );
  }
  return { ...state, mcd: updated };
}
