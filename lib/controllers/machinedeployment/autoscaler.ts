// The receiving side of the autoscaler's deletion protocol (gardener MCM §6.6). To remove specific
// machines, the autoscaler lowers spec.replicas and names the machines in the deployment
// annotation `node.machine.sapcloud.io/trigger-deletion-by-mcm` (`name~RFC3339,...`; older
// autoscalers write bare names and rely on `last-deployment-replica-change-by-scaler-time`). This
// controller turns those names into machine annotations (priority 1 and the mark time) that the
// MachineSet controller acts on, keeps the list free of machines that are gone, deletes a named
// machine itself when replicas were raised again before it went (no set would), and takes marks
// off machines whose entry is gone (marks.ts decides).

import { Annotation } from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import { MachineResource, type MachineSet } from '../../api/types.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { controllerRefOf } from '../machines.js';
import { carriesMark, machineMarkPatch, machineUnmarkPatch, planTriggerDeletion, setViews } from './marks.js';
import {
  patchDeploymentAnnotations,
  updateMachineSet,
  type DeploymentState,
  type PassContext,
} from './pass.js';

/**
 * Applies the deletion protocol for one pass: cleans the annotation, marks the machines whose marks
 * stand and unmarks the others (marks.ts). `machinesChanged` when a machine was just marked or
 * unmarked: a replica change must then wait until the machine cache shows it, or the MachineSet
 * controller could pick another machine than the one asked for (a mark not yet seen, or one
 * taken off but still seen).
 */
export async function processTriggerDeletion(
  ctx: PassContext,
  initial: DeploymentState,
): Promise<{ state: DeploymentState; machinesChanged: boolean }> {
  let state = initial;
  const mcd = state.mcd;
  const machines = ctx.deps.informers.machines;
  const views = setViews(state.sets, (s) => {
    const c = ctx.countsOf(s);
    return c.all - c.terminating;
  });
  const plan = planTriggerDeletion({
    mcd,
    now: ctx.now,
    machine: (name) => machines.get(mcd.metadata.namespace, name),
    setOf: (m) => views.get(controllerRefOf(m)?.uid ?? ''),
    sets: [...views.values()],
    // Only sets that have a marked machine are looked through.
    markedMachines: state.sets
      .filter((s) => ctx.countsOf(s).marked > 0)
      .flatMap((s) => ctx.machinesOf(s).filter(carriesMark)),
  });
  for (const d of plan.dropped) ctx.log.verbose('dropping trigger-deletion entry', d);

  if (plan.changed) {
    const changes: Record<string, string | null> = { [Annotation.TriggerDeletionByMCM]: plan.value ?? null };
    if (plan.setScalerTime !== undefined)
      changes[Annotation.LastDeploymentReplicaChangeByScalerTime] = plan.setScalerTime;
    state = await patchDeploymentAnnotations(ctx, state, changes);
    ctx.log.info('updated the machines the autoscaler asked to delete', {
      machines: plan.marks.map((m) => m.name),
      dropped: plan.dropped.length,
    });
  }

  let machinesChanged = false;
  const replace = new Set(plan.replace);
  for (const { name, time } of plan.marks) {
    if (replace.has(name)) continue;
    const m = machines.get(mcd.metadata.namespace, name);
    const annotations = m === undefined ? undefined : machineMarkPatch(m, time);
    if (m === undefined || annotations === undefined) continue;
    if (await patchMachineAnnotations(ctx, m, annotations)) {
      machinesChanged = true;
      ctx.log.info('marked machine for deletion by the autoscaler', { machine: name, markedAt: time });
    }
  }
  for (const { name, time } of plan.marks) {
    if (!replace.has(name)) continue;
    const m = machines.get(mcd.metadata.namespace, name);
    if (m === undefined) continue;
    if (await deleteMachine(ctx, m)) {
      machinesChanged = true;
      ctx.log.info('deleting a machine the autoscaler named: replicas were raised again before it went', {
        machine: name,
        markedAt: time,
      });
      ctx.event(
        state.mcd,
        'Normal',
        REPLACING_MARKED_MACHINE,
        `Machine ${name} was named for deletion at ${time} and replicas were raised again before it went: it is deleted and its MachineSet creates a replacement`,
      );
    }
  }
  for (const name of plan.unmark) {
    const m = machines.get(mcd.metadata.namespace, name);
    if (m === undefined) continue;
    if (await patchMachineAnnotations(ctx, m, machineUnmarkPatch(m))) {
      machinesChanged = true;
      ctx.log.info('removed the deletion mark of a machine: its entry is gone from the annotation', {
        machine: name,
      });
    }
  }
  return { state, machinesChanged };
}

/** The event reason when a named machine is deleted by the deployment controller (no surplus left). */
export const REPLACING_MARKED_MACHINE = 'ReplacingMarkedMachine';

/** Deletes a machine (this one: its UID is a precondition); false when it is gone already. */
async function deleteMachine(
  ctx: PassContext,
  m: { metadata: { name?: string; namespace?: string; uid?: string } },
): Promise<boolean> {
  try {
    await ctx.deps.client.delete(MachineResource, m.metadata.name ?? '', {
      namespace: m.metadata.namespace ?? '',
      preconditions: { uid: m.metadata.uid ?? '' },
    });
    return true;
  } catch (err) {
    if (isNotFound(err) || isConflict(err)) return false;
    throw err;
  }
}

/** Merge-patches a machine's annotations; false when the machine is gone. */
async function patchMachineAnnotations(
  ctx: PassContext,
  m: { metadata: { name?: string; namespace?: string } },
  annotations: Record<string, string | null>,
): Promise<boolean> {
  try {
    await ctx.deps.client.patch(
      MachineResource,
      m.metadata.name ?? '',
      { metadata: { annotations } },
      { type: 'merge', namespace: m.metadata.namespace ?? '' },
    );
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

/**
 * Copies the deployment's scaler time to every set that may have it: sets whose replica count
 * already reflects the deployment's (desired-replicas equals spec.replicas) and sets scaled to
 * zero. A set still waiting for its new size gets it with the size (scaleMachineSet).
 */
export async function propagateScalerTime(
  ctx: PassContext,
  initial: DeploymentState,
): Promise<DeploymentState> {
  let state = initial;
  const scalerTime = state.mcd.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime];
  if (scalerTime === undefined) return state;
  for (const ms of initial.sets) {
    if (ms.metadata.deletionTimestamp !== undefined) continue;
    if (ms.metadata.annotations?.[Annotation.LastDeploymentReplicaChangeByScalerTime] === scalerTime)
      continue;
    const desired = ms.metadata.annotations?.[Annotation.DesiredReplicas];
    if (replicasOf(ms) !== 0 && desired !== String(replicasOf(state.mcd))) continue;
    const next: MachineSet = {
      ...ms,
      metadata: {
        ...ms.metadata,
        annotations: {
          ...(ms.metadata.annotations ?? {}),
          [Annotation.LastDeploymentReplicaChangeByScalerTime]: scalerTime,
        },
      },
    };
    state = await updateMachineSet(ctx, state, next);
  }
  return state;
}
