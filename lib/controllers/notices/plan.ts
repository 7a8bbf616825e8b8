// What a notice about a machine's VM asks for (pure; handler.ts writes it): the record on the
// machine that makes the rest happen, or why nothing is to be recorded. A notice only records
// facts; the controllers act on them within the limits they apply to their own decisions, so a
// cloud event that hits a whole zone or pool at once cannot take more than those limits allow.
//
// - An interruption (the VM goes soon, whatever we do): the machine is marked replacing with the
//   VM's deadline; its MachineSet creates the replacement at once, one for one, and deletes the
//   machine once the replacement is available or when the deadline is near, whichever comes first
//   (its node is tainted at once, so no new pod lands there). A machine no MachineSet owns has
//   nothing to replace it and is deleted. A machine already being deleted only gets the deadline,
//   which bounds its drain.
// - A rebalance recommendation: the node's RebalanceRecommended condition and an event; opted in,
//   the machine is marked rebalance-recommended, and its MachineDeployment replaces it as voluntary
//   disruption (surge first, within its disruption budget, maxSurge and autoscaler maximum).
// - A stop, termination or impairment of a machine that is not being deleted (the manager did
//   not ask for it): the machine is marked with the failure (vm-failure). A joined machine is
//   then marked Failed by the machine controller within its deployment's replacement budget, and
//   replaced as any Failed machine is; one still being created is a failed launch, Failed at once,
//   and its class's launches back off. A stopped or terminated VM is gone with its pods: the
//   deadline (the notice's time) forces its node's drain. An impaired VM may still run its pods:
//   its node is drained with evictions while it is Ready, forced only once it is not.
// - A recovery (the health checks of a VM reported impaired pass again): the failure record is
//   withdrawn while the machine has not been failed for it (it waited for its deployment's
//   replacement budget, say, while a zone's VMs recovered); once Failed, it is replaced all the same.
//
// A record already there makes the notice a duplicate: what is recorded on the machine, not
// memory, decides, so a notice delivered again after a restart, or twice, is acted on once.

import { ExtensionAnnotation, MachinePhase, NodeConditionType } from '../../api/constants.js';
import { VmNoticeKind, type VmNotice } from '../../driver/notices.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { EventType } from '../../kube/events.js';
import type { Node, NodeCondition } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';
import {
  controllerRefOf,
  hasJoined,
  interruptionDeadlineOf,
  isReplacing,
  isTerminating,
  phaseOf,
  vmFailureOf,
  type AnyMachine,
} from '../machines.js';

/** The replacing annotation's value on a machine whose VM is interrupted. */
export const REPLACING_INTERRUPTED = 'interrupted';

export interface NoticeEvent {
  type: EventType;
  reason: string;
  message: string;
}

export type NoticePlan =
  | { outcome: 'duplicate' | 'ignored'; why: string }
  | {
      outcome: 'acted';
      /** Machine annotations to set (null: to remove). */
      annotations?: Record<string, string | null>;
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
      return planAdvice(m, notice, now, node, notice.replace === true && ownedBySet(m));
    case VmNoticeKind.Stopped:
    case VmNoticeKind.Terminated:
      return planFailure(m, notice, {
        vmGone: true,
        aside: ', which the machine controller did not ask for',
      });
    case VmNoticeKind.Impaired:
      return planFailure(m, notice, { vmGone: false, aside: '' });
    case VmNoticeKind.Recovered:
      return planRecovery(m, notice);
  }
}

/** Withdraws the failure record `notice.withdraws` while nothing has been done about it yet. */
function planRecovery(m: AnyMachine, notice: VmNotice): NoticePlan {
  const name = m.metadata.name ?? '';
  const failure = vmFailureOf(m);
  if (failure === undefined || failure !== notice.withdraws)
    return { outcome: 'duplicate', why: `machine ${name} has no ${notice.withdraws ?? ''} failure recorded` };
  if (isTerminating(m)) return { outcome: 'ignored', why: `machine ${name} is being deleted` };
  if (phaseOf(m) === MachinePhase.Failed)
    return { outcome: 'ignored', why: `machine ${name} was marked Failed already; it is replaced` };
  // A deadline beside the failure: a later notice said the VM stopped or ended.
  if (interruptionDeadlineOf(m) !== undefined)
    return { outcome: 'ignored', why: `machine ${name}'s VM is gone or going` };
  return {
    outcome: 'acted',
    annotations: { [ExtensionAnnotation.VmFailure]: null },
    event: {
      type: 'Normal',
      reason: notice.reason,
      message: `${notice.message}: the failure recorded for machine ${name} (${failure}) is withdrawn before it was failed for it; it stays`,
    },
  };
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
      : `its node takes no new pods; its MachineSet creates a replacement and deletes it once the replacement is available or when the deadline is near, its node drained${by}`;
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
  replace: boolean,
): NoticePlan {
  const name = m.metadata.name ?? '';
  if (isTerminating(m)) return { outcome: 'ignored', why: `machine ${name} is being deleted` };
  const current = node?.status?.conditions?.find((c) => c.type === NodeConditionType.RebalanceRecommended);
  const wantCondition = node !== undefined && current?.status !== 'True';
  // Opted in: recorded on the machine for its deployment's voluntary replacement (once; a machine
  // being replaced already needs nothing more).
  const recorded = (m.metadata.annotations?.[ExtensionAnnotation.RebalanceRecommended] ?? '') !== '';
  const wantMark = replace && !recorded && !isReplacing(m);
  if (!wantCondition && !wantMark) {
    if (node !== undefined || replace)
      return { outcome: 'duplicate', why: `the recommendation for machine ${name} is recorded already` };
  }
  const at = rfc3339(now);
  const message = wantMark
    ? `${notice.message}: recorded for replacement; a MachineDeployment replaces its machines surge first, within its disruption budget, maxSurge and autoscaler maximum`
    : notice.message;
  return {
    outcome: 'acted',
    ...(wantMark ? { annotations: { [ExtensionAnnotation.RebalanceRecommended]: iso(notice.sentAt) } } : {}),
    ...(wantCondition
      ? {
          nodeCondition: {
            type: NodeConditionType.RebalanceRecommended,
            status: 'True',
            reason: notice.reason,
            message: notice.message,
            lastHeartbeatTime: at,
            lastTransitionTime: at,
          },
        }
      : {}),
    event: { type: 'Normal', reason: notice.reason, message },
  };
}

/**
 * Records the VM's failure (vm-failure, and for a VM that is gone the deadline that forces its
 * node's drain); the machine controller marks the machine Failed. `aside` follows the notice's
 * message in the event.
 */
function planFailure(
  m: AnyMachine,
  notice: VmNotice,
  { vmGone, aside }: { vmGone: boolean; aside: string },
): NoticePlan {
  const name = m.metadata.name ?? '';
  // The manager stops nothing, and terminates the VMs of the machines it deletes: a machine being
  // deleted caused the notice (or no longer cares; its deletion replaces the VM anyway).
  if (isTerminating(m)) return { outcome: 'ignored', why: `machine ${name} is being deleted` };
  const joined = hasJoined(m);
  const annotations: Record<string, string> = {};
  if (vmFailureOf(m) === undefined) annotations[ExtensionAnnotation.VmFailure] = notice.reason;
  // A joined machine's node may still show pods that are gone with the VM: the deadline forces
  // their deletion instead of evictions nobody answers. A launch has no pods to drain.
  if (vmGone && joined) {
    const recorded = interruptionDeadlineOf(m);
    const deadline = earlier(recorded, notice.sentAt);
    if (deadline !== recorded) annotations[ExtensionAnnotation.InterruptionDeadline] = iso(deadline);
  }
  if (Object.keys(annotations).length === 0)
    return { outcome: 'duplicate', why: `the failure of machine ${name}'s VM is recorded already` };
  const what = joined
    ? `machine ${name} is marked Failed to be replaced, within its deployment's replacement budget`
    : `the launch of machine ${name} failed; it is replaced, and its class's launches back off`;
  return {
    outcome: 'acted',
    annotations,
    event: { type: 'Warning', reason: notice.reason, message: `${notice.message}${aside}: ${what}` },
  };
}
