// What NodeGroupNodes reports for one machine (pure): its instance id and state as the
// cluster-autoscaler understands them.

import { MachineOperationType, MachinePhase, MachineState } from '../api/constants.js';
import type { Machine } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { Node } from '../kube/types.js';
import { hasJoined, isTerminating, phaseOf } from '../controllers/machines.js';

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

/** Whether node labels carry every label of the machine's node template (with its value). */
export function carriesTemplate(
  labels: Readonly<Record<string, string>> | undefined,
  m: AnyMachine,
): boolean {
  const want = m.spec?.nodeTemplate?.metadata?.labels;
  if (want === undefined) return true;
  for (const [k, v] of Object.entries(want)) if (labels?.[k] !== v) return false;
  return true;
}

/**
 * Whether the autoscaler is to see the machine's node as registered capacity of its group: the
 * node has a providerID, the machine has joined (see hasJoined) and the node carries the labels
 * of the machine's node template; in a group that answers per-group options (holdJustReadyAt: the
 * time now), also not a node that just turned Ready with a not-ready taint still on it
 * (justReady). A node may be Ready before the machine controller applied the
 * template (a kubelet does not know it; the controller applies it before the machine reads
 * Running); counted as the group's then, it is capacity the pending pods cannot use (they select
 * the template's labels), and the autoscaler scales up once more for them. So until then the
 * machine is an unregistered instance (placeholder id) and its node belongs to no group
 * (NodeGroupForNode checks the labels of the node as the autoscaler sent it), and the autoscaler
 * keeps counting the group's template node for it.
 */
export function isRegistered(m: AnyMachine, node: AnyNode | undefined, holdJustReadyAt?: number): boolean {
  return (
    (node?.spec?.providerID ?? '') !== '' &&
    hasJoined(m) &&
    carriesTemplate(node?.metadata.labels, m) &&
    (holdJustReadyAt === undefined || !justReady(node, holdJustReadyAt, joinedAt(m)))
  );
}

/**
 * When the machine controller saw the machine join (its Create operation recorded Successful, in
 * the manager's own clock); undefined when the machine records no such operation.
 */
export function joinedAt(m: AnyMachine): number | undefined {
  const op = m.status?.lastOperation;
  if (op?.type !== MachineOperationType.Create || op.state !== MachineState.Successful) return undefined;
  const t = Date.parse(op.lastUpdateTime ?? '');
  return Number.isNaN(t) ? undefined : t;
}

/**
 * Taints under which cluster-autoscaler counts a node as not ready, whatever its Ready condition
 * says (utils/kubernetes GetNodeReadiness).
 */
const NOT_READY_TAINTS: ReadonlySet<string> = new Set([
  'node.kubernetes.io/not-ready',
  'node.kubernetes.io/disk-pressure',
  'node.kubernetes.io/network-unavailable',
]);

/**
 * How long after its Ready condition turned True a node that still carries a not-ready taint
 * stays out of its group. The node lifecycle controller lifts the taint on its next pass (every
 * 5 s by default); a taint that outlives this is a problem of its own, and the node counts again
 * (the autoscaler then sees it unready, as it is).
 */
export const JUST_READY_GRACE_MS = 60_000;

/**
 * A node that turned Ready moments ago but still carries a not-ready taint (the API server's
 * TaintNodesByCondition puts one on every new Node; the node lifecycle controller lifts it after
 * Ready): the autoscaler counts it unready, and in a group that answers per-group options
 * (MaxNodeStartupTime 0, kubernetes/autoscaler#10245) at once Unready rather than starting. There,
 * until the taint goes (at most JUST_READY_GRACE_MS), it is reported as not registered yet, as
 * while it booted. Other groups count it as it is (not started yet, for the autoscaler).
 *
 * "Moments ago" is the later of the Ready condition's lastTransitionTime and `joined`, when the
 * machine controller saw the machine join: the condition's time is the kubelet's claim, and a
 * kubelet whose clock is off (or kwok, which writes the node's creation time there when it
 * initializes a node) can date it a minute back while the node only just turned Ready.
 */
export function justReady(node: AnyNode | undefined, now: number, joined?: number): boolean {
  if (node?.spec?.taints?.some((t) => NOT_READY_TAINTS.has(t.key)) !== true) return false;
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  if (ready?.status !== 'True') return false;
  const transition = Date.parse(ready.lastTransitionTime ?? '');
  if (Number.isNaN(transition) && joined === undefined) return true;
  const since = Math.max(Number.isNaN(transition) ? -Infinity : transition, joined ?? -Infinity);
  return now - since < JUST_READY_GRACE_MS;
}

/**
 * One instance. `node` is the machine's Node when it exists; `marked` is true when the machine is
 * named in its deployment's trigger-deletion annotation by a mark that stands (it reports Deleting
 * at once, so the autoscaler does not count it as capacity while the controllers catch up).
 *
 * - Registered (isRegistered): its Node's providerID (what the autoscaler matches nodes by).
 * - Not registered: the placeholder id, Creating; a creation that failed for good carries error
 *   info so the autoscaler backs the group off in one loop: out of capacity (lastOperation
 *   Create/Failed with ResourceExhausted, while it is retried too) is OutOfResources; phase Failed,
 *   or a launch held because its class's launches keep failing (Create/Failed with
 *   FailedPrecondition), is Other. Other failed attempts being retried carry none.
 * - Being deleted or marked: Deleting.
 */
export function instanceOf(
  m: AnyMachine,
  node: AnyNode | undefined,
  marked: boolean,
  holdJustReadyAt?: number,
): InstanceView {
  const registered = isRegistered(m, node, holdJustReadyAt);
  const id = registered ? (node?.spec?.providerID ?? '') : placeholderId(m.metadata.name ?? '');
  if (isTerminating(m) || marked) return { id, status: { instanceState: InstanceState.Deleting } };
  if (registered) return { id, status: { instanceState: InstanceState.Running } };
  const op = m.status?.lastOperation;
  const failedCreate = op?.type === MachineOperationType.Create && op.state === MachineState.Failed;
  const code = failedCreate ? (op.errorCode ?? '') : '';
  const exhausted = code === 'ResourceExhausted';
  // Only a creation that will not succeed carries error info: the autoscaler takes such an
  // instance for a failed scale-up, deletes it and asks for capacity again. A failed attempt that
  // is being retried (the cloud unavailable for a moment, a VM not visible yet) stays Creating.
  // FailedPrecondition: the launches of its class back off after failing (a bad image, an
  // unusable key): not a lack of capacity, but not worth waiting for either.
  if (phaseOf(m) === MachinePhase.Failed || exhausted || code === 'FailedPrecondition') {
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
