// What a notice about a machine's VM asks for (pure; handler.ts writes it): the record on the
// machine that makes the rest happen, or why nothing is to be recorded.
//
// - An interruption (the VM goes soon): the machine is marked replacing with the VM's deadline;
//   its MachineSet creates the replacement and deletes the machine at once, and the deletion's
//   drain is forced at the deadline. A machine no MachineSet owns has nothing to replace it and is
//   deleted. A machine already being deleted only gets the deadline, which bounds its drain.
// - A rebalance recommendation: the node's RebalanceRecommended condition and an event; opted in,
//   a replacement as for an interruption without deadline (surge first: the machine goes once its
//   replacement is available, as expiry does).
// - A stop or termination of a machine that is not being deleted (the manager did not ask for
//   it): the machine is marked Failed at once, without the health timeout, and replaced as any
//   Failed machine is; the deadline (the notice's time) forces its drain, since its pods are gone.
// - An impaired VM (the cloud's own health checks failed for longer than the provider's timeout):
//   the same. Its drain is forced too: the check that fails is reachability, so the kubelet cannot
//   act on evictions either; an eviction drain would wait for the drain timeout (2 h by default)
//   while pods that no longer serve still count as available for their budgets and Services.
//
// A record already there makes the notice a duplicate: what is recorded on the machine, not
// memory, decides, so a notice delivered again after a restart, or twice, is acted on once.

import {
  ExtensionAnnotation,
  MachineOperationType,
  MachinePhase,
  MachineState,
  NodeConditionType,
} from '../../api/constants.js';
import type { LastOperation } from '../../api/types.js';
import { VmNoticeKind, type VmNotice } from '../../driver/notices.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { EventType } from '../../kube/events.js';
import type { Node, NodeCondition } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';
import {
  controllerRefOf,
  interruptionDeadlineOf,
  isTerminating,
  phaseOf,
  type AnyMachine,
} from '../machines.js';

/** The replacing annotation's value on a machine whose VM is interrupted. */
export const REPLACING_INTERRUPTED = 'interrupted';
/** The replacing annotation's value on a machine replaced after a rebalance recommendation (opted in). */
export const REPLACING_REBALANCE = 'rebalance-recommended';

export interface NoticeEvent {
  type: EventType;
  reason: string;
  message: string;
}

export type NoticePlan =
  | { outcome: 'duplicate' | 'ignored'; why: string }
  | {
      outcome: 'acted';
      /** Machine annotations to set. */
      annotations?: Record<string, string>;
      /** The machine's status becomes Failed with this last operation. */
      fail?: LastOperation;
      /** The machine is deleted (nothing else would replace it). */
      deleteMachine?: boolean;
      /** The node's condition to set. */
      nodeCondition?: NodeCondition;
      event: NoticeEvent;
    };

const iso = (ms: number): string => new Date(ms).toISOString();

/** The deadline a new one leaves: the earlier of the two (a later notice never extends one). */
function earlier(recorded: number | undefined, wanted: number): number {
  return recorded === undefined ? wanted : Math.min(recorded, wanted);
}

/** Whether a MachineSet controls the machine (and so replaces it when it goes). */
function ownedBySet(m: AnyMachine): boolean {
  return controllerRefOf(m)?.kind === 'MachineSet';
}

/**
 * What to record for `notice` on machine `m` (read fresh from the API) at `now`; `node` is the
 * machine's node, when it has one.
 */
export function planNotice(
  m: AnyMachine,
  notice: VmNotice,
  now: number,
  node: Node | DeepReadonly<Node> | undefined,
): NoticePlan {
  switch (notice.kind) {
    case VmNoticeKind.Interruption:
      return planReplacement(m, notice, notice.deadline, REPLACING_INTERRUPTED);
    case VmNoticeKind.Rebalance:
      if (notice.replace === true && ownedBySet(m))
        return planReplacement(m, notice, undefined, REPLACING_REBALANCE);
      return planAdvice(m, notice, now, node);
    case VmNoticeKind.Stopped:
    case VmNoticeKind.Terminated:
      return planFailure(m, notice, now, ', which the machine controller did not ask for');
    case VmNoticeKind.Impaired:
      return planFailure(m, notice, now, '');
  }
}

function planReplacement(
  m: AnyMachine,
  notice: VmNotice,
  deadline: number | undefined,
  replacingValue: string,
): NoticePlan {
  const name = m.metadata.name ?? '';
  const annotations = m.metadata.annotations ?? {};
  const recorded = interruptionDeadlineOf(m);
  const wantDeadline = deadline === undefined ? undefined : earlier(recorded, deadline);
  const deadlineChange =
    wantDeadline !== undefined && wantDeadline !== recorded
      ? { [ExtensionAnnotation.InterruptionDeadline]: iso(wantDeadline) }
      : {};
  const by = wantDeadline === undefined ? '' : ` by ${iso(wantDeadline)}`;
  if (isTerminating(m)) {
    if (Object.keys(deadlineChange).length === 0)
      return { outcome: 'duplicate', why: `machine ${name} is being deleted already` };
    return {
      outcome: 'acted',
      annotations: deadlineChange,
      event: {
        type: 'Warning',
        reason: notice.reason,
        message: `${notice.message}: the machine is being deleted; its node's drain ends${by}`,
      },
    };
  }
  const replacingChange =
    (annotations[ExtensionAnnotation.Replacing] ?? '') === ''
      ? { [ExtensionAnnotation.Replacing]: replacingValue }
      : {};
  const changes = { ...replacingChange, ...deadlineChange };
  if (!ownedBySet(m)) {
    return {
      outcome: 'acted',
      ...(Object.keys(changes).length === 0 ? {} : { annotations: changes }),
      deleteMachine: true,
      event: {
        type: 'Warning',
        reason: notice.reason,
        message: `${notice.message}: no MachineSet replaces this machine; it is deleted, its node drained${by}`,
      },
    };
  }
  if (Object.keys(changes).length === 0)
    return { outcome: 'duplicate', why: `machine ${name} is being replaced already` };
  const how =
    wantDeadline === undefined
      ? 'its MachineSet creates a replacement and deletes it once the replacement is available'
      : `its MachineSet creates a replacement and deletes it now, its node drained${by}`;
  return {
    outcome: 'acted',
    annotations: changes,
    event: { type: 'Warning', reason: notice.reason, message: `${notice.message}: ${how}` },
  };
}

function planAdvice(
  m: AnyMachine,
  notice: VmNotice,
  now: number,
  node: Node | DeepReadonly<Node> | undefined,
): NoticePlan {
  const name = m.metadata.name ?? '';
  if (isTerminating(m)) return { outcome: 'ignored', why: `machine ${name} is being deleted` };
  const event: NoticeEvent = { type: 'Normal', reason: notice.reason, message: notice.message };
  if (node === undefined) return { outcome: 'acted', event };
  const current = node.status?.conditions?.find((c) => c.type === NodeConditionType.RebalanceRecommended);
  if (current?.status === 'True')
    return { outcome: 'duplicate', why: `node ${node.metadata.name ?? ''} has the condition already` };
  const at = rfc3339(now);
  return {
    outcome: 'acted',
    nodeCondition: {
      type: NodeConditionType.RebalanceRecommended,
      status: 'True',
      reason: notice.reason,
      message: notice.message,
      lastHeartbeatTime: at,
      lastTransitionTime: at,
    },
    event,
  };
}

/** Fails the machine at once; `aside` follows the notice's message in the description. */
function planFailure(m: AnyMachine, notice: VmNotice, now: number, aside: string): NoticePlan {
  const name = m.metadata.name ?? '';
  // The manager stops nothing, and terminates the VMs of the machines it deletes: a machine being
  // deleted caused the notice (or no longer cares; its deletion replaces the VM anyway).
  if (isTerminating(m)) return { outcome: 'ignored', why: `machine ${name} is being deleted` };
  const recorded = interruptionDeadlineOf(m);
  const deadline = earlier(recorded, notice.sentAt);
  const failed = phaseOf(m) === MachinePhase.Failed;
  if (failed && recorded !== undefined)
    return { outcome: 'duplicate', why: `machine ${name} is marked Failed already` };
  const description = `${notice.message}${aside}: machine ${name} is marked Failed to be replaced`;
  return {
    outcome: 'acted',
    ...(deadline === recorded
      ? {}
      : { annotations: { [ExtensionAnnotation.InterruptionDeadline]: iso(deadline) } }),
    ...(failed
      ? {}
      : {
          fail: {
            type: MachineOperationType.HealthCheck,
            state: MachineState.Failed,
            description,
            lastUpdateTime: rfc3339(now),
          },
        }),
    event: { type: 'Warning', reason: notice.reason, message: description },
  };
}
