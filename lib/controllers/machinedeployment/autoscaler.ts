// The receiving side of the autoscaler's deletion protocol (gardener MCM §6.6). To remove specific
// machines, the autoscaler lowers spec.replicas and names the machines in the deployment
// annotation `node.machine.sapcloud.io/trigger-deletion-by-mcm` (`name~RFC3339,...`; older
// autoscalers write bare names and rely on `last-deployment-replica-change-by-scaler-time`). This
// controller turns those names into machine annotations (priority 1 and the mark time) that the
// MachineSet controller acts on, and keeps the list free of machines that are gone.

import {
  Annotation,
  DELETE_FIRST_MACHINE_PRIORITY,
  TRIGGER_DELETION_ENTRY_SEPARATOR,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import { isRFC3339, parseTriggerDeletion } from '../../api/triggerdeletion.js';
import { MachineResource, type Machine, type MachineDeployment, type MachineSet } from '../../api/types.js';
import { isNotFound } from '../../kube/errors.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { rfc3339 } from '../conditions.js';
import { controllerRefOf, isFailed, isTerminating } from '../machines.js';
import {
  patchDeploymentAnnotations,
  updateMachineSet,
  type DeploymentState,
  type PassContext,
} from './pass.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

export interface TriggerDeletionPlan {
  /** The cleaned annotation value; undefined when no entry is left (the annotation is removed). */
  value: string | undefined;
  /** Whether the deployment's annotations must be written. */
  changed: boolean;
  /** Scaler time to record on the deployment (legacy entries and none recorded yet). */
  setScalerTime?: string | undefined;
  /** Machines to mark for deletion, with their mark time. */
  marks: { name: string; time: string }[];
  /** Entries dropped and why (for the log). */
  dropped: { entry: string; why: string }[];
}

/**
 * Cleans the trigger-deletion annotation (pure): legacy bare names get the scaler time (now, when
 * none is recorded); entries that are malformed, name a machine that does not exist or does not
 * belong to this deployment, or whose machine is Failed or already Terminating are dropped
 * (the MachineSet controller removes failed and terminating machines anyway). Every remaining
 * machine is to be marked with its time. Returns undefined when there is no annotation at all.
 */
export function planTriggerDeletion(args: {
  mcd: AnyDeployment;
  now: number;
  machine: (name: string) => AnyMachine | undefined;
  ownedByDeployment: (m: AnyMachine) => boolean;
}): TriggerDeletionPlan | undefined {
  const annotations = args.mcd.metadata.annotations ?? {};
  const original = annotations[Annotation.TriggerDeletionByMCM];
  if (original === undefined) return undefined;
  const entries = parseTriggerDeletion(original);
  const recorded = annotations[Annotation.LastDeploymentReplicaChangeByScalerTime];
  const needsScalerTime =
    entries.some((e) => e.kind === 'legacy') && (recorded === undefined || recorded === '');
  const scalerTime = needsScalerTime ? rfc3339(args.now) : (recorded ?? '');

  const kept: string[] = [];
  const marks: { name: string; time: string }[] = [];
  const dropped: { entry: string; why: string }[] = [];
  const seen = new Set<string>();
  for (const e of entries) {
    if (e.kind === 'invalid') {
      dropped.push({ entry: e.raw, why: e.why });
      continue;
    }
    const time = e.kind === 'marked' ? e.time : scalerTime;
    const entry = `${e.name}${TRIGGER_DELETION_ENTRY_SEPARATOR}${time}`;
    if (e.kind === 'legacy' && !isRFC3339(time)) {
      dropped.push({ entry: e.name, why: `scaler time "${time}" is not an RFC 3339 time` });
      continue;
    }
    const m = args.machine(e.name);
    if (m === undefined) dropped.push({ entry, why: 'machine does not exist' });
    else if (!args.ownedByDeployment(m))
      dropped.push({ entry, why: 'machine does not belong to this machine deployment' });
    else if (isTerminating(m)) dropped.push({ entry, why: 'machine is already being deleted' });
    else if (isFailed(m)) dropped.push({ entry, why: 'machine has failed and is replaced anyway' });
    else if (!seen.has(e.name)) {
      seen.add(e.name);
      kept.push(entry);
      marks.push({ name: e.name, time });
    }
  }
  const value = kept.length === 0 ? undefined : kept.join(',');
  return {
    value,
    changed: value !== original || needsScalerTime,
    setScalerTime: needsScalerTime ? scalerTime : undefined,
    marks,
    dropped,
  };
}

/** The annotations a marked machine needs, or undefined when it has them already. */
export function machineMarkPatch(m: AnyMachine, time: string): Record<string, string> | undefined {
  const annotations = m.metadata.annotations ?? {};
  const want: Record<string, string> = {
    [Annotation.MachinePriority]: String(DELETE_FIRST_MACHINE_PRIORITY),
    [Annotation.MarkedForDeletionTime]: time,
  };
  const differs = Object.entries(want).some(([k, v]) => annotations[k] !== v);
  return differs ? want : undefined;
}

/**
 * Applies the deletion protocol for one pass. `marked` when machines were just marked: the replica
 * change that goes with the marks must then wait until the machine cache shows them, or the
 * MachineSet controller could pick other machines to delete first.
 */
export async function processTriggerDeletion(
  ctx: PassContext,
  initial: DeploymentState,
): Promise<{ state: DeploymentState; marked: boolean }> {
  let state = initial;
  const mcd = state.mcd;
  const setUIDs = new Set(state.sets.map((s) => s.metadata.uid ?? ''));
  const machines = ctx.deps.informers.machines;
  const plan = planTriggerDeletion({
    mcd,
    now: ctx.now,
    machine: (name) => machines.get(mcd.metadata.namespace, name),
    ownedByDeployment: (m) => {
      const ref = controllerRefOf(m);
      return ref !== undefined && ref.uid !== '' && setUIDs.has(ref.uid);
    },
  });
  if (plan === undefined) return { state, marked: false };
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

  let marked = false;
  for (const { name, time } of plan.marks) {
    const m = machines.get(mcd.metadata.namespace, name);
    if (m === undefined) continue;
    const annotations = machineMarkPatch(m, time);
    if (annotations === undefined) continue;
    try {
      await ctx.deps.client.patch(
        MachineResource,
        name,
        { metadata: { annotations } },
        {
          type: 'merge',
          namespace: m.metadata.namespace ?? '',
        },
      );
      marked = true;
      ctx.log.info('marked machine for deletion by the autoscaler', { machine: name, markedAt: time });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
  return { state, marked };
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
