// What NodeGroupNodes reports for one machine (pure): its instance id and state as the
// cluster-autoscaler understands them.

import { MachineOperationType, MachinePhase, MachineState } from '../api/constants.js';
import type { Machine } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { Node } from '../kube/types.js';
import { isTerminating, phaseOf } from '../controllers/machines.js';

/**
 * Instance id of a machine without a Node: stable until the Node appears, and resolved back to the
 * machine by NodeGroupForNode and NodeGroupDeleteNodes (the autoscaler sends fake nodes whose name
 * and providerID are this id). Same form as gardener's autoscaler.
 */
export const PLACEHOLDER_PREFIX = 'requested://';

export function placeholderId(machineName: string): string {
  return `${PLACEHOLDER_PREFIX}${machineName}`;
}

/** The machine name in a placeholder id, or undefined. */
export function machineOfPlaceholder(id: string): string | undefined {
  if (!id.startsWith(PLACEHOLDER_PREFIX)) return undefined;
  const name = id.slice(PLACEHOLDER_PREFIX.length);
  return name === '' || name.includes('/') ? undefined : name;
}

/** cluster-autoscaler's InstanceState values (externalgrpc enum names). */
export const InstanceState = {
  Running: 'instanceRunning',
  Creating: 'instanceCreating',
  Deleting: 'instanceDeleting',
} as const;
export type InstanceState = (typeof InstanceState)[keyof typeof InstanceState];

/** cluster-autoscaler's InstanceErrorClass values. */
export const InstanceErrorClass = { OutOfResources: 1, Other: 99 } as const;

export interface InstanceView {
  id: string;
  status: {
    instanceState: InstanceState;
    errorInfo?: { errorCode: string; errorMessage: string; instanceErrorClass: number };
  };
}

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

/**
 * One instance. `node` is the machine's Node when it exists; `marked` is true when the machine is
 * named in its deployment's trigger-deletion annotation by a mark that stands (it reports Deleting
 * at once, so the autoscaler does not count it as capacity while the controllers catch up).
 *
 * - A Node with a providerID: its providerID (what the autoscaler matches registered nodes by).
 * - No Node: the placeholder id, Creating; a creation that failed for good carries error info so
 *   the autoscaler backs the group off in one loop: out of capacity (lastOperation Create/Failed
 *   with ResourceExhausted, while it is retried too) is OutOfResources, phase Failed anything else
 *   Other. Other failed attempts being retried carry none.
 * - Being deleted or marked: Deleting.
 */
export function instanceOf(m: AnyMachine, node: AnyNode | undefined, marked: boolean): InstanceView {
  const providerID = node?.spec?.providerID;
  const registered = providerID !== undefined && providerID !== '';
  const id = registered ? providerID : placeholderId(m.metadata.name ?? '');
  if (isTerminating(m) || marked) return { id, status: { instanceState: InstanceState.Deleting } };
  if (registered) return { id, status: { instanceState: InstanceState.Running } };
  const op = m.status?.lastOperation;
  const failedCreate = op?.type === MachineOperationType.Create && op.state === MachineState.Failed;
  const code = failedCreate ? (op.errorCode ?? '') : '';
  const exhausted = code === 'ResourceExhausted';
  // Only a creation that will not succeed carries error info: the autoscaler takes such an
  // instance for a failed scale-up, deletes it and asks for capacity again. A failed attempt that
  // is being retried (the cloud unavailable for a moment, a VM not visible yet) stays Creating.
  if (phaseOf(m) === MachinePhase.Failed || exhausted) {
    return {
      id,
      status: {
        instanceState: InstanceState.Creating,
        errorInfo: {
          errorCode: code === '' ? 'MachineFailed' : code,
          errorMessage: op?.description ?? 'machine failed',
          instanceErrorClass: exhausted ? InstanceErrorClass.OutOfResources : InstanceErrorClass.Other,
        },
      },
    };
  }
  return { id, status: { instanceState: InstanceState.Creating } };
}
