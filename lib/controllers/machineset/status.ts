import {
  Annotation,
  ConditionReason,
  MachineSetConditionType,
  MachineState,
  PreserveValue,
} from '../../api/constants.js';
import type { MachineSet, MachineSetStatus, MachineSummary } from '../../api/types.js';
import { jsonEqual } from '../../kube/equal.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { selectorMatches, selectorToString } from '../../kube/labels.js';
import type { MachineCounts } from '../accounting.js';
import { removeCondition, setCondition } from '../conditions.js';
import { isAvailable, isFailed, isPreserved, isReady, isTerminating, type AnyMachine } from '../machines.js';

export interface StatusInput {
  ms: MachineSet | DeepReadonly<MachineSet>;
  machines: readonly AnyMachine[];
  now: number;
  /** Error of this pass's create/delete work: sets ReplicaFailure; undefined clears it. */
  replicaFailure?: { reason: string; message: string } | undefined;
}

function summary(m: AnyMachine, owner: string): MachineSummary {
  const s: MachineSummary = { name: m.metadata.name ?? '', ownerRef: owner };
  if (m.spec?.providerID !== undefined) s.providerID = m.spec.providerID;
  if (m.status?.lastOperation !== undefined) s.lastOperation = structuredClone(m.status.lastOperation);
  return s;
}

/** What a MachineSet's status reports about its machines. */
interface MachineTally {
  replicas: number;
  fullyLabeledReplicas: number;
  readyReplicas: number;
  availableReplicas: number;
  preservedFailedReplicas: number;
  autoPreserveFailedMachineCount: number;
  failed: readonly AnyMachine[];
}

/** The status a MachineSet should have for the machines it owns (pure; one pass over them). */
export function calculateStatus({ ms, machines, now, replicaFailure }: StatusInput): MachineSetStatus {
  const labelled = { matchLabels: ms.spec?.template?.metadata?.labels ?? {} };
  const failed: AnyMachine[] = [];
  const tally: MachineTally = {
    replicas: machines.length,
    fullyLabeledReplicas: 0,
    readyReplicas: 0,
    availableReplicas: 0,
    preservedFailedReplicas: 0,
    autoPreserveFailedMachineCount: 0,
    failed,
  };
  for (const m of machines) {
    if (selectorMatches(labelled, m.metadata.labels)) tally.fullyLabeledReplicas++;
    // A machine being deleted is out of service even before its controller marks it Terminating.
    if (!isTerminating(m)) {
      if (isReady(m)) tally.readyReplicas++;
      if (isAvailable(m)) tally.availableReplicas++;
    }
    const preservedFailure = isFailed(m) && isPreserved(m, now);
    if (preservedFailure) tally.preservedFailedReplicas++;
    if (m.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved)
      tally.autoPreserveFailedMachineCount++;
    if (m.status?.lastOperation?.state === MachineState.Failed && !preservedFailure) failed.push(m);
  }
  return statusOf(ms, now, replicaFailure, tally);
}

/**
 * calculateStatus from the set's machine counts (the same result), when they prove that no
 * machine failed: then no machine is listed and none is preserved after failing. Undefined
 * otherwise.
 */
export function calculateStatusFromCounts(args: {
  ms: MachineSet | DeepReadonly<MachineSet>;
  counts: MachineCounts;
  now: number;
  replicaFailure?: { reason: string; message: string } | undefined;
}): MachineSetStatus | undefined {
  const { counts } = args;
  if (counts.selectedFailed > 0 || counts.selectedFailedOperation > 0) return undefined;
  return statusOf(args.ms, args.now, args.replicaFailure, {
    replicas: counts.selected,
    fullyLabeledReplicas: counts.selectedFullyLabeled,
    readyReplicas: counts.selectedReady,
    availableReplicas: counts.selectedAvailable,
    preservedFailedReplicas: 0,
    autoPreserveFailedMachineCount: counts.selectedAutoPreserved,
    failed: [],
  });
}

function statusOf(
  ms: MachineSet | DeepReadonly<MachineSet>,
  now: number,
  replicaFailure: { reason: string; message: string } | undefined,
  tally: MachineTally,
): MachineSetStatus {
  const prev = (ms.status ?? {}) as MachineSetStatus;
  const { failed, ...counts } = tally;
  const status: MachineSetStatus = { ...structuredClone(prev), ...counts };
  if (ms.metadata.generation !== undefined) status.observedGeneration = ms.metadata.generation;
  if (ms.spec?.selector !== undefined) status.labelSelector = selectorToString(ms.spec.selector);
  if (failed.length > 0) status.failedMachines = failed.map((m) => summary(m, ms.metadata.name ?? ''));
  else delete status.failedMachines;
  const conds =
    replicaFailure === undefined
      ? removeCondition(prev.machineSetCondition, MachineSetConditionType.ReplicaFailure)
      : setCondition(
          prev.machineSetCondition,
          {
            type: MachineSetConditionType.ReplicaFailure,
            status: 'True',
            reason: replicaFailure.reason,
            message: replicaFailure.message,
          },
          now,
        );
  if (conds.length > 0) status.machineSetCondition = conds;
  else delete status.machineSetCondition;
  return status;
}

export const ReplicaFailureReason = {
  FailedCreate: ConditionReason.FailedCreate,
  FailedDelete: ConditionReason.FailedDelete,
  InvalidSpec: ConditionReason.InvalidSpec,
} as const;

/** The status without the fields that only count machines. */
function withoutCounts(s: MachineSetStatus | DeepReadonly<MachineSetStatus>): Record<string, unknown> {
  const {
    replicas: _replicas,
    fullyLabeledReplicas: _fullyLabeled,
    readyReplicas: _ready,
    availableReplicas: _available,
    ...rest
  } = s;
  return rest;
}

/**
 * How long the write of `next` over `current` must wait (ms; 0: write now). A status that changes
 * only machine counts is written at most once per `intervalMs` (the wait runs from the last
 * write), so a mass scale-up or scale-down costs a status write per interval instead of one per
 * pass; any other change (a condition, a failed machine, the observed generation) is written at
 * once. The caller requeues the set after the wait, so the last counts are always written.
 */
export function statusWriteDelay(
  current: MachineSetStatus | DeepReadonly<MachineSetStatus> | undefined,
  next: MachineSetStatus,
  lastWriteAt: number | undefined,
  now: number,
  intervalMs: number,
): number {
  if (lastWriteAt === undefined) return 0;
  if (!jsonEqual(withoutCounts(current ?? {}), withoutCounts(next))) return 0;
  return Math.max(0, lastWriteAt + intervalMs - now);
}
