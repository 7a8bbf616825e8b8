// What one MachineSet of a deployment amounts to: replicas and annotations read from it, its
// machines counted from the shared cache, its age and revision, and the rollout bounds of the
// deployment. Pure readers only.

import { Annotation, OrchestrationType, StrategyType } from '../../api/constants.js';
import { resolveFenceposts } from '../../api/intstr.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineDeployment, MachineSet } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

export function parseCount(value: string | undefined): number | undefined {
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

export interface RolloutBounds {
  /** Machines allowed above spec.replicas while rolling (0 for every other strategy). */
  maxSurge: number;
  /** Machines allowed below spec.replicas (0 for Recreate and for zero replicas). */
  maxUnavailable: number;
}

/**
 * maxSurge/maxUnavailable resolved against spec.replicas with MCM's rounding (surge up,
 * unavailable down, both zero means one unavailable), unavailable capped at the replicas. A
 * rolling update surges, and so does an in-place update with Auto orchestration (fresh machines
 * of the new template, added before old machines are updated); Manual orchestration never does.
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
      return { maxSurge: f.maxSurge, maxUnavailable: cap(f.maxUnavailable) };
    }
    case StrategyType.Recreate:
    case undefined:
      return { maxSurge: 0, maxUnavailable: 0 };
  }
}

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

/** What a SetState counts of a set's machines (MachineCounts of the accounting has both). */
export interface SetMachineCounts {
  /** Machines with the set's controller reference. */
  all: number;
  /** …of them available and not being deleted. */
  available: number;
}

export const NO_MACHINES: SetMachineCounts = Object.freeze({ all: 0, available: 0 });

export function setStateOf(ms: AnySet, counts: SetMachineCounts): SetState {
  return {
    name: ms.metadata.name ?? '',
    created: createdAt(ms),
    revision: revisionOf(ms) ?? 0,
    replicas: replicasOf(ms),
    machines: counts.all,
    available: counts.available,
    desired: countAnnotation(ms, Annotation.DesiredReplicas),
    maxReplicas: countAnnotation(ms, Annotation.MaxReplicas),
  };
}

/** Oldest first (creation time, then revision, then name). */
export function compareStatesByAge(a: SetState, b: SetState): number {
  return a.created - b.created || (a.revision ?? 0) - (b.revision ?? 0) || a.name.localeCompare(b.name);
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
