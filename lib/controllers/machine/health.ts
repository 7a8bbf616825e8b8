// Health of a machine with a node (pure): conditions mirrored from the node, and the phase
// transitions Pending → Running | Failed, Running → Unknown, Unknown → Running | Failed, with the
// creation and health timeouts (MCM's reconcileMachineHealth); Pending → Failed at once when the
// driver reports the VM of a machine without node gone (see vmprobe.ts) or its provider reported
// the VM failed (a failed launch); a joined machine → Failed, within the replacement budget,
// when its provider reported its VM failed (vm-failure: stopped, terminated, impaired); and the
// in-place update phases: InPlaceUpdating → InPlaceUpdateSuccessful | InPlaceUpdateFailed (from
// the node's update-result label, or the in-place timeout), InPlaceUpdateFailed → Failed after
// the health timeout, and InPlaceUpdateSuccessful → Running once the node is healthy.

import {
  Annotation,
  Label,
  LabelValue,
  MachineOperationType,
  MachinePhase,
  MachineState,
  NodeConditionType,
  TaintKey,
} from '../../api/constants.js';
import { formatGoDuration } from '../../api/duration.js';
import type { LastOperation, Machine } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node, NodeCondition } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';
import { interruptionDeadlineOf, phaseOf, vmFailureOf } from '../machines.js';
import {
  creationTimeoutOf,
  healthTimeoutOf,
  inPlaceUpdateTimeoutOf,
  nodeConditionsOf,
  type MachineControllerSettings,
} from './settings.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

export type HealthTransitionReason =
  | 'joined'
  | 'rejoined'
  | 'unhealthy'
  | 'join-timeout'
  | 'vm-not-found'
  | 'launch-failed'
  | 'vm-failed'
  | 'health-timeout'
  | 'inplace-successful'
  | 'inplace-failed'
  | 'inplace-timeout';

export interface HealthDecision {
  /** The node's conditions, when they differ from the machine's (undefined: keep). */
  conditions?: NodeCondition[] | undefined;
  transition?:
    | {
        phase: MachinePhase;
        lastOperation: LastOperation;
        reason: HealthTransitionReason;
        /** Unknown (or InPlaceUpdateFailed) → Failed only happens within the deployment's replacement budget. */
        needsBudget: boolean;
        /** For joined: ms from creation to Running. */
        joinDurationMs?: number;
      }
    | undefined;
  /** Look again after this long: a timeout runs out then. */
  recheckAfterMs?: number | undefined;
}

/**
 * Joined phases in which a failure the provider reported (vm-failure) marks the machine Failed,
 * within the replacement budget, without waiting for the health timeout.
 */
const JOINED_FAILABLE: ReadonlySet<MachinePhase> = new Set<MachinePhase>([
  MachinePhase.Running,
  MachinePhase.Unknown,
  MachinePhase.InPlaceUpdating,
  MachinePhase.InPlaceUpdateFailed,
  MachinePhase.InPlaceUpdateSuccessful,
]);

function time(s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

/** Healthy: it has conditions, Ready is True, and no configured problem condition is other than False. */
export function isNodeHealthy(
  conditions: readonly DeepReadonly<NodeCondition>[],
  problemTypes: readonly string[],
): boolean {
  if (conditions.length === 0) return false;
  let ready = false;
  for (const c of conditions) {
    if (c.type === 'Ready') ready = c.status === 'True';
    else if (problemTypes.includes(c.type) && c.status !== 'False') return false;
  }
  return ready;
}

/** Whether the machine's stored conditions still mirror the node's (type and status; reason for in-place updates). */
export function conditionsInSync(
  machine: readonly DeepReadonly<NodeCondition>[] | undefined,
  node: readonly DeepReadonly<NodeCondition>[] | undefined,
): boolean {
  const m = machine ?? [];
  const n = node ?? [];
  if (m.length !== n.length) return false;
  return n.every((nc) => {
    const mc = m.find((c) => c.type === nc.type);
    if (mc?.status !== nc.status) return false;
    return nc.type !== NodeConditionType.InPlaceUpdate || mc.reason === nc.reason;
  });
}

function describeConditions(conds: readonly DeepReadonly<NodeCondition>[]): string {
  return conds.length === 0 ? 'none' : conds.map((c) => `${c.type}=${c.status}`).join(', ');
}

export function lastOp(
  type: MachineOperationType,
  state: MachineState,
  description: string,
  now: number,
  errorCode?: string,
): LastOperation {
  return {
    type,
    state,
    description,
    lastUpdateTime: rfc3339(now),
    ...(errorCode === undefined ? {} : { errorCode }),
  };
}

/**
 * What the node says about the machine now. `node` undefined means no Node of that name exists
 * (the caller only asks once its node cache is synced). `vmGone`: the driver just answered
 * NotFound for the recorded VM of a machine without node.
 */
export function planHealth(
  m: AnyMachine,
  node: AnyNode | undefined,
  settings: MachineControllerSettings,
  now: number,
  { vmGone = false }: { vmGone?: boolean } = {},
): HealthDecision {
  const name = m.metadata.name ?? '';
  const nodeConds = node?.status?.conditions ?? [];
  const decision: HealthDecision = {};
  if (node !== undefined && !conditionsInSync(m.status?.conditions, nodeConds)) {
    decision.conditions = nodeConds.map((c) => structuredClone(c) as NodeCondition);
  }
  const healthy = node !== undefined && isNodeHealthy(nodeConds, nodeConditionsOf(m, settings));
  const phase = phaseOf(m);
  const vmFailure = vmFailureOf(m);
  if (vmFailure !== undefined && JOINED_FAILABLE.has(phase) && m.spec?.disableHealthTimeout !== true) {
    decision.transition = {
      phase: MachinePhase.Failed,
      lastOperation: lastOp(
        MachineOperationType.HealthCheck,
        MachineState.Failed,
        `Machine ${name}: its provider reported its VM ${m.spec?.providerID ?? ''} failed (${vmFailure}); marked Failed to be replaced`,
        now,
      ),
      reason: 'vm-failed',
      needsBudget: true,
    };
    return decision;
  }
  switch (phase) {
    case MachinePhase.Pending: {
      if (vmFailure !== undefined) {
        decision.transition = {
          phase: MachinePhase.Failed,
          lastOperation: lastOp(
            MachineOperationType.Create,
            MachineState.Failed,
            `The launch of machine ${name} failed: its provider reported its VM ${m.spec?.providerID ?? ''} failed (${vmFailure}) before its node joined; the machine is marked Failed to be replaced`,
            now,
          ),
          reason: 'launch-failed',
          needsBudget: false,
        };
        return decision;
      }
      const created = time(m.metadata.creationTimestamp) ?? now;
      const critical =
        node?.spec?.taints?.some((t) => t.key === TaintKey.CriticalComponentsNotReady) ?? false;
      if (healthy && !critical) {
        const joinDurationMs = Math.max(0, now - created);
        decision.transition = {
          phase: MachinePhase.Running,
          lastOperation: lastOp(
            MachineOperationType.Create,
            MachineState.Successful,
            `Machine ${name} successfully joined the cluster in ${formatGoDuration(joinDurationMs)}`,
            now,
          ),
          reason: 'joined',
          needsBudget: false,
          joinDurationMs,
        };
        return decision;
      }
      if (vmGone) {
        decision.transition = {
          phase: MachinePhase.Failed,
          lastOperation: lastOp(
            MachineOperationType.Create,
            MachineState.Failed,
            `VM ${m.spec?.providerID ?? ''} of machine ${name} no longer exists (the provider answers NotFound) and its node never joined; the machine is marked Failed to be replaced`,
            now,
            'NotFound',
          ),
          reason: 'vm-not-found',
          needsBudget: false,
        };
        return decision;
      }
      const timeout = creationTimeoutOf(m, settings);
      const deadline = created + timeout;
      if (now >= deadline) {
        const why =
          node === undefined
            ? 'its node never registered'
            : `node conditions: ${describeConditions(nodeConds)}`;
        decision.transition = {
          phase: MachinePhase.Failed,
          lastOperation: lastOp(
            MachineOperationType.Create,
            MachineState.Failed,
            `Machine ${name} did not join the cluster within the creation timeout of ${formatGoDuration(timeout)} (${why})`,
            now,
          ),
          reason: 'join-timeout',
          needsBudget: false,
        };
      } else {
        decision.recheckAfterMs = deadline - now;
      }
      return decision;
    }
    case MachinePhase.Running: {
      const lostNode = node === undefined && (m.status?.conditions?.length ?? 0) > 0;
      if (!healthy && (node !== undefined || lostNode)) {
        const detail =
          node === undefined ? 'its node is gone' : `node conditions: ${describeConditions(nodeConds)}`;
        decision.transition = {
          phase: MachinePhase.Unknown,
          lastOperation: lastOp(
            MachineOperationType.HealthCheck,
            MachineState.Processing,
            `Machine ${name} is unhealthy - changing MachineState to Unknown (${detail})`,
            now,
          ),
          reason: 'unhealthy',
          needsBudget: false,
        };
      }
      return decision;
    }
    case MachinePhase.Unknown:
    case MachinePhase.Failed: {
      // A node whose in-place update failed may well be Ready, but it does not run what it should:
      // its machine stays Failed (to be replaced) while the node says so.
      const updateFailed = node?.metadata.labels?.[Label.UpdateResult] === LabelValue.UpdateFailed;
      // Nor does one whose VM the cloud reported stopped, going (an interruption deadline) or failed:
      // its node may read Ready for a while after, until the node lifecycle notices.
      const vmGoing = interruptionDeadlineOf(m) !== undefined || vmFailure !== undefined;
      if (healthy && !(phase === MachinePhase.Failed && (updateFailed || vmGoing))) {
        decision.transition = rejoined(name, now);
        return decision;
      }
      if (phase === MachinePhase.Failed || m.spec?.disableHealthTimeout === true) return decision;
      const since = time(m.status?.currentStatus?.lastUpdateTime) ?? now;
      const timeout = healthTimeoutOf(m, settings);
      if (now - since >= timeout) {
        const detail =
          node === undefined ? 'its node is gone' : `node conditions: ${describeConditions(nodeConds)}`;
        decision.transition = {
          phase: MachinePhase.Failed,
          lastOperation: lastOp(
            MachineOperationType.HealthCheck,
            MachineState.Failed,
            `Machine ${name} has been unhealthy for longer than the health timeout of ${formatGoDuration(timeout)} (${detail}); marked Failed`,
            now,
          ),
          reason: 'health-timeout',
          needsBudget: true,
        };
      } else {
        decision.recheckAfterMs = since + timeout - now;
      }
      return decision;
    }
    case MachinePhase.InPlaceUpdateSuccessful: {
      if (healthy) decision.transition = rejoined(name, now);
      return decision;
    }
    case MachinePhase.InPlaceUpdating:
    case MachinePhase.InPlaceUpdateFailed: {
      // Whether the node is healthy says little while (or after) its update fails: health is not
      // judged in these phases, only the agent's verdict and the timeouts.
      const result = inPlaceResult(m, node, phase, now);
      if (result !== undefined) {
        decision.transition = result;
        return decision;
      }
      const since = time(m.status?.currentStatus?.lastUpdateTime) ?? now;
      if (phase === MachinePhase.InPlaceUpdating) {
        const timeout = inPlaceUpdateTimeoutOf(m, settings);
        if (now - since >= timeout) {
          decision.transition = {
            phase: MachinePhase.InPlaceUpdateFailed,
            lastOperation: lastOp(
              MachineOperationType.InPlaceUpdate,
              MachineState.Failed,
              `Machine ${name} did not finish its in-place update within the in-place update timeout of ${formatGoDuration(timeout)}`,
              now,
            ),
            reason: 'inplace-timeout',
            needsBudget: false,
          };
        } else {
          decision.recheckAfterMs = since + timeout - now;
        }
        return decision;
      }
      if (m.spec?.disableHealthTimeout === true) return decision;
      const timeout = healthTimeoutOf(m, settings);
      if (now - since >= timeout) {
        decision.transition = {
          phase: MachinePhase.Failed,
          lastOperation: lastOp(
            MachineOperationType.InPlaceUpdate,
            MachineState.Failed,
            `Machine ${name} failed its in-place update (${failedUpdateDetail(node)}) and was not updated within the health timeout of ${formatGoDuration(timeout)}; marked Failed`,
            now,
          ),
          reason: 'health-timeout',
          needsBudget: true,
        };
      } else {
        decision.recheckAfterMs = since + timeout - now;
      }
      return decision;
    }
    case MachinePhase.Creating:
    case MachinePhase.Available:
    case MachinePhase.CrashLoopBackOff:
    case MachinePhase.Terminating:
      return decision;
  }
}

function rejoined(name: string, now: number): NonNullable<HealthDecision['transition']> {
  return {
    phase: MachinePhase.Running,
    lastOperation: lastOp(
      MachineOperationType.HealthCheck,
      MachineState.Successful,
      `Machine ${name} successfully re-joined the cluster`,
      now,
    ),
    reason: 'rejoined',
    needsBudget: false,
  };
}

function failedUpdateDetail(node: AnyNode | undefined): string {
  if (node?.metadata.labels?.[Label.UpdateResult] !== LabelValue.UpdateFailed)
    return 'the update did not finish in time';
  return node.metadata.annotations?.[Annotation.UpdateFailedReason] ?? 'no reason given';
}

/** The update agent's verdict (the node's update-result label), when it moves the phase. */
function inPlaceResult(
  m: AnyMachine,
  node: AnyNode | undefined,
  phase: MachinePhase,
  now: number,
): HealthDecision['transition'] {
  const name = m.metadata.name ?? '';
  const result = node?.metadata.labels?.[Label.UpdateResult];
  if (result === LabelValue.UpdateSuccessful && phase !== MachinePhase.InPlaceUpdateSuccessful) {
    return {
      phase: MachinePhase.InPlaceUpdateSuccessful,
      lastOperation: lastOp(
        MachineOperationType.InPlaceUpdate,
        MachineState.Successful,
        `Machine ${name} successfully updated in place`,
        now,
      ),
      reason: 'inplace-successful',
      needsBudget: false,
    };
  }
  if (result === LabelValue.UpdateFailed && phase !== MachinePhase.InPlaceUpdateFailed) {
    const why = node?.metadata.annotations?.[Annotation.UpdateFailedReason] ?? 'no reason given';
    return {
      phase: MachinePhase.InPlaceUpdateFailed,
      lastOperation: lastOp(
        MachineOperationType.InPlaceUpdate,
        MachineState.Failed,
        `Machine ${name} failed its in-place update: ${why}`,
        now,
      ),
      reason: 'inplace-failed',
      needsBudget: false,
    };
  }
  return undefined;
}
