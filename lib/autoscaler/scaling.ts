// The scaling decisions of the node-group RPCs (pure): given a group, its deployment and machines,
// what to write, or why not. The server turns a plan into one conditional write.

import { Annotation, TRIGGER_DELETION_ENTRY_SEPARATOR } from '../api/constants.js';
import { replicasOf } from '../api/replicas.js';
import type { Machine, MachineDeployment, MachineSet } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';
import { rfc3339 } from '../controllers/conditions.js';
import { isFailed, isTerminating } from '../controllers/machines.js';
import { templatesEqualIgnoringHash } from '../api/template.js';
import { failedPrecondition, invalidArgument, type GrpcStatusError } from './errors.js';
import type { NodeGroup } from './groups.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;
type AnySet = MachineSet | DeepReadonly<MachineSet>;

/**
 * Why the deployment is rolling out, or undefined when it is not: machines of a set whose template
 * is not the deployment's are still there. During a rollout the MachineDeployment controller splits
 * replica changes across old and new sets, so a decrement cannot be steered to the machines the
 * autoscaler picked; scale-down waits until the old machines are gone. Scale-up is always served.
 */
export function rolloutInProgress(mcd: AnyDeployment, sets: readonly AnySet[]): string | undefined {
  const template = mcd.spec?.template;
  if (template === undefined) return undefined;
  const old = sets.filter(
    (s) =>
      s.metadata.deletionTimestamp === undefined &&
      s.spec?.template !== undefined &&
      !templatesEqualIgnoringHash(s.spec.template, template) &&
      (replicasOf(s) > 0 || (s.status?.replicas ?? 0) > 0),
  );
  if (old.length === 0) return undefined;
  const machines = old.reduce((n, s) => n + Math.max(replicasOf(s), s.status?.replicas ?? 0), 0);
  return (
    `machine deployment ${mcd.metadata.namespace ?? ''}/${mcd.metadata.name ?? ''} is rolling out ` +
    `(${machines} machine(s) of old machine sets ${old.map((s) => s.metadata.name ?? '').join(', ')} remain); ` +
    'scale-down is possible again once the rollout has replaced them'
  );
}

export type ReplicaPlan = { replicas: number } | { error: GrpcStatusError };

/** IncreaseSize: delta > 0 and not beyond max. */
export function planIncrease(group: NodeGroup, mcd: AnyDeployment, delta: number): ReplicaPlan {
  const current = replicasOf(mcd);
  if (!Number.isInteger(delta) || delta <= 0) {
    return { error: invalidArgument(`delta must be a positive integer, got ${delta}`) };
  }
  if (current + delta > group.max) {
    return {
      error: failedPrecondition(
        `node group ${group.id}: size ${current} + ${delta} would exceed its max size ${group.max}`,
      ),
    };
  }
  return { replicas: current + delta };
}

export interface DeletePlan {
  /** New spec.replicas; undefined when nothing changes (every machine is already going). */
  replicas: number | undefined;
  /** New trigger-deletion annotation value. */
  trigger: string | undefined;
  /** Machines newly marked. */
  marked: string[];
  /** Machines that were already going (terminating, failed or marked): no second decrement. */
  already: string[];
}

/**
 * DeleteNodes: mark exactly these machines and lower replicas by the number newly marked, in one
 * write. Idempotent: a machine already being deleted, failed (the MachineSet replaces failed
 * machines itself) or going by a standing mark (`going`, from the controller's plan) counts as
 * done, so a retry after a client timeout changes nothing. A machine still named but whose mark
 * no longer stands (replicas were raised since) is marked anew. Refused as a whole (nothing
 * half-applied) below min or during a rollout.
 */
export function planDeleteNodes(args: {
  group: NodeGroup;
  mcd: AnyDeployment;
  sets: readonly AnySet[];
  machines: readonly AnyMachine[];
  going: ReadonlySet<string>;
  now: number;
}): { plan: DeletePlan } | { error: GrpcStatusError } {
  const { group, mcd } = args;
  const fresh: AnyMachine[] = [];
  const already: string[] = [];
  for (const m of args.machines) {
    const name = m.metadata.name ?? '';
    if (isTerminating(m) || args.going.has(name)) already.push(name);
    else if (isFailed(m)) already.push(name);
    else if (!fresh.some((f) => f.metadata.name === name)) fresh.push(m);
  }
  if (fresh.length === 0) return { plan: { replicas: undefined, trigger: undefined, marked: [], already } };
  const rolling = rolloutInProgress(mcd, args.sets);
  if (rolling !== undefined) return { error: failedPrecondition(rolling) };
  const current = replicasOf(mcd);
  const next = current - fresh.length;
  if (next < group.min) {
    return {
      error: failedPrecondition(
        `node group ${group.id}: deleting ${fresh.length} node(s) would take its size ${current} below its min size ${group.min}`,
      ),
    };
  }
  const names = fresh.map((m) => m.metadata.name ?? '').sort();
  return { plan: { replicas: next, trigger: withEntries(mcd, names, args.now), marked: names, already } };
}

/**
 * The trigger-deletion annotation with `names` appended as marked now. An older entry of one of
 * them (a mark that no longer stands) is replaced, so the new mark is the newest.
 */
function withEntries(mcd: AnyDeployment, names: readonly string[], now: number): string {
  const time = rfc3339(now);
  const renewed = new Set(names);
  const entries = (mcd.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '' && !renewed.has(e.split(TRIGGER_DELETION_ENTRY_SEPARATOR)[0] ?? ''));
  for (const n of names) entries.push(`${n}${TRIGGER_DELETION_ENTRY_SEPARATOR}${time}`);
  return entries.join(',');
}

/**
 * DecreaseTargetSize: delta < 0 removes only capacity that has not registered (machines without a
 * Node), never a registered node; below min it clamps to min instead of failing (a failure here
 * aborts the autoscaler's whole loop). The unregistered machines to give up are named in the
 * trigger-deletion annotation (newest first), so exactly they go, not a registered one.
 */
export function planDecrease(args: {
  group: NodeGroup;
  mcd: AnyDeployment;
  sets: readonly AnySet[];
  machines: readonly AnyMachine[];
  registered: (m: AnyMachine) => boolean;
  going: ReadonlySet<string>;
  delta: number;
  now: number;
}): { plan: DeletePlan } | { error: GrpcStatusError } {
  const { group, mcd, delta } = args;
  if (!Number.isInteger(delta) || delta >= 0) {
    return { error: invalidArgument(`delta must be a negative integer, got ${delta}`) };
  }
  const current = replicasOf(mcd);
  const live = args.machines.filter((m) => !isTerminating(m) && !args.going.has(m.metadata.name ?? ''));
  const registered = live.filter((m) => args.registered(m)).length;
  if (current + delta < registered) {
    return {
      error: failedPrecondition(
        `node group ${group.id}: size ${current} ${delta} would be below its ${registered} registered node(s); ` +
          'DecreaseTargetSize only removes capacity that has not registered yet (use DeleteNodes)',
      ),
    };
  }
  const target = Math.max(current + delta, group.min);
  if (target >= current)
    return { plan: { replicas: undefined, trigger: undefined, marked: [], already: [] } };
  const rolling = rolloutInProgress(mcd, args.sets);
  if (rolling !== undefined) return { error: failedPrecondition(rolling) };
  const pending = live
    .filter((m) => !args.registered(m))
    .sort((a, b) => (b.metadata.creationTimestamp ?? '').localeCompare(a.metadata.creationTimestamp ?? ''))
    .slice(0, current - target);
  const names = pending.map((m) => m.metadata.name ?? '').sort();
  return {
    plan: {
      replicas: target,
      trigger: names.length === 0 ? undefined : withEntries(mcd, names, args.now),
      marked: names,
      already: [],
    },
  };
}
