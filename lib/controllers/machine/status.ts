// Writes of a machine: merge patches, each conditional on the resourceVersion its decision was
// read from, so a decision taken on a stale cache fails with a conflict (and is retried) instead
// of overwriting newer state.

import type { MachinePhase } from '../../api/constants.js';
import { MachineResource, type CurrentStatus, type LastOperation, type Machine } from '../../api/types.js';
import type { KubeApi } from '../../kube/client.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { NodeAddress, NodeCondition } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';
import { phaseOf } from '../machines.js';

type AnyMachine = Machine | DeepReadonly<Machine>;

/** The deletion steps, stored in status.deletionStep (an addition; see docs/machine-lifecycle.md). */
export const DeletionStep = {
  GetVMStatus: 'GetVMStatus',
  DrainNode: 'DrainNode',
  DeleteVM: 'DeleteVM',
  DeleteNode: 'DeleteNode',
  RemoveFinalizer: 'RemoveFinalizer',
} as const;
export type DeletionStep = (typeof DeletionStep)[keyof typeof DeletionStep];

export interface StatusChange {
  phase?: MachinePhase;
  /** A full lastOperation: absent fields are removed (errorCode in particular). */
  lastOperation?: LastOperation;
  conditions?: NodeCondition[];
  addresses?: NodeAddress[];
  timeoutActive?: boolean;
  deletionStep?: DeletionStep | null;
  /** RFC 3339 to start or extend a preservation, null to end it. */
  preserveExpiryTime?: string | null;
}

/** Whether applying change would alter nothing a reader cares about (timestamps aside). */
export function isNoop(m: AnyMachine, change: StatusChange): boolean {
  const s = m.status ?? {};
  if (change.phase !== undefined && change.phase !== phaseOf(m)) return false;
  if (change.lastOperation !== undefined) {
    const a = s.lastOperation ?? {};
    const b = change.lastOperation;
    if (
      a.type !== b.type ||
      a.state !== b.state ||
      a.description !== b.description ||
      (a.errorCode ?? '') !== (b.errorCode ?? '')
    )
      return false;
  }
  if (change.conditions !== undefined) return false;
  if (
    change.addresses !== undefined &&
    JSON.stringify(s.addresses ?? []) !== JSON.stringify(change.addresses)
  )
    return false;
  if (
    change.timeoutActive !== undefined &&
    change.timeoutActive !== (s.currentStatus?.timeoutActive ?? false)
  )
    return false;
  if (change.deletionStep !== undefined && (change.deletionStep ?? undefined) !== s.deletionStep)
    return false;
  if (
    change.preserveExpiryTime !== undefined &&
    (change.preserveExpiryTime ?? undefined) !== s.currentStatus?.preserveExpiryTime
  )
    return false;
  return true;
}

/** The merge patch for a status change; currentStatus.lastUpdateTime moves with the phase only. */
export function statusPatch(m: AnyMachine, change: StatusChange, now: number): Record<string, unknown> {
  const status: Record<string, unknown> = {};
  const current: Partial<Record<keyof CurrentStatus, unknown>> = {};
  if (change.phase !== undefined && change.phase !== phaseOf(m)) {
    current.phase = change.phase;
    current.lastUpdateTime = rfc3339(now);
  }
  if (change.timeoutActive !== undefined) current.timeoutActive = change.timeoutActive;
  if (change.preserveExpiryTime !== undefined) current.preserveExpiryTime = change.preserveExpiryTime;
  if (Object.keys(current).length > 0) status.currentStatus = current;
  if (change.lastOperation !== undefined) {
    const op = change.lastOperation;
    status.lastOperation = {
      type: op.type ?? null,
      state: op.state ?? null,
      description: op.description ?? null,
      errorCode: op.errorCode ?? null,
      lastUpdateTime: op.lastUpdateTime ?? rfc3339(now),
    };
  }
  if (change.conditions !== undefined) status.conditions = change.conditions;
  if (change.addresses !== undefined) status.addresses = change.addresses;
  if (change.deletionStep !== undefined) status.deletionStep = change.deletionStep;
  return { metadata: { resourceVersion: m.metadata.resourceVersion }, status };
}

export async function patchMachineStatus(
  client: KubeApi,
  m: AnyMachine,
  change: StatusChange,
  now: number,
): Promise<Machine> {
  return client.patch<Machine>(MachineResource, m.metadata.name ?? '', statusPatch(m, change, now), {
    type: 'merge',
    namespace: m.metadata.namespace ?? '',
    subresource: 'status',
  });
}

/** Merge patch of labels, annotations and spec fields (null removes a key). */
export async function patchMachine(
  client: KubeApi,
  m: AnyMachine,
  patch: {
    labels?: Record<string, string | null>;
    annotations?: Record<string, string | null>;
    spec?: Record<string, unknown>;
    finalizers?: string[] | null;
  },
): Promise<Machine> {
  const metadata: Record<string, unknown> = {};
  if (patch.labels !== undefined) metadata.labels = patch.labels;
  if (patch.annotations !== undefined) metadata.annotations = patch.annotations;
  if (patch.finalizers !== undefined) {
    metadata.finalizers = patch.finalizers;
    metadata.resourceVersion = m.metadata.resourceVersion;
  }
  return client.patch<Machine>(
    MachineResource,
    m.metadata.name ?? '',
    { metadata, ...(patch.spec === undefined ? {} : { spec: patch.spec }) },
    { type: 'merge', namespace: m.metadata.namespace ?? '' },
  );
}
