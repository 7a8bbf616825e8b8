// Machine preservation (the writes): the expiry on the machine, and on its node the autoscaler's
// scale-down-disabled annotations, the preserved taint and a drain for a preserved Failed machine
// (a taint, never a cordon, so a node a user cordoned stays cordoned when preservation ends), and
// the Preserved condition.

import {
  Annotation,
  CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE,
  Label,
  LabelValue,
  NodeConditionType,
  PreservedMessage,
  PreservedReason,
  TaintKey,
} from '../../api/constants.js';
import type { Machine } from '../../api/types.js';
import { describeBlockers } from '../../drain/drain.js';
import type { ReconcileResult } from '../../kube/controller.js';
import { isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node, NodeCondition, Taint } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import { drainId, endDrain } from './drains.js';
import { planPreservation, type PreservePlan } from './preserve.js';
import { resolveMachineClass } from './resolve.js';
import { drainTimeoutOf } from './settings.js';
import { patchMachine, patchMachineStatus } from './status.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

const PRESERVED_TAINT: Taint = { key: TaintKey.Preserved, effect: 'NoSchedule' };
const UNHEALTHY_FORCE_AFTER_MS = 5 * 60_000;

/** Whether anything about preservation can be at stake for this machine (the common case is no). */
export function preservationInPlay(m: AnyMachine, node: AnyNode | undefined): boolean {
  return (
    m.metadata.annotations?.[Annotation.Preserve] !== undefined ||
    m.metadata.annotations?.[Annotation.LastAppliedNodePreserveValue] !== undefined ||
    m.status?.currentStatus?.preserveExpiryTime !== undefined ||
    node?.metadata.annotations?.[Annotation.Preserve] !== undefined ||
    node?.status?.conditions?.some((c) => c.type === NodeConditionType.Preserved && c.status === 'True') ===
      true
  );
}

export async function reconcilePreservation(
  d: MachineDeps,
  cached: AnyMachine,
  node: AnyNode | undefined,
  log: Logger,
): Promise<ReconcileResult> {
  if (!preservationInPlay(cached, node)) return {};
  const now = d.clock.now();
  const plan = planPreservation(cached, node, now, d.settings);
  let m: AnyMachine = cached;
  if (plan.effective.invalid !== undefined) {
    d.recorder.event(
      m,
      'Warning',
      'InvalidPreserveValue',
      `${Annotation.Preserve}="${plan.effective.invalid}" on the ${plan.effective.source} is invalid and ignored (valid: now, when-failed, auto-preserved, false)${plan.effective.source === 'node' ? '; preservation is neither started nor stopped until it is fixed' : ''}`,
    );
    // On the node it changes nothing until it is fixed (the node's next change brings us back).
    if (plan.effective.source === 'node') return {};
  }
  const annotations: Record<string, string | null> = { ...(plan.effective.machineAnnotations ?? {}) };
  if (plan.removeAnnotation && plan.effective.source === 'machine') annotations[Annotation.Preserve] = null;
  if (Object.keys(annotations).length > 0) m = await patchMachine(d.client, m, { annotations });

  if (plan.action === 'start' && plan.expiry !== undefined) {
    m = await patchMachineStatus(d.client, m, { preserveExpiryTime: rfc3339(plan.expiry) }, now);
    log.info('machine preserved', { until: rfc3339(plan.expiry), by: plan.effective.source });
  } else if (plan.action === 'stop') {
    m = await patchMachineStatus(d.client, m, { preserveExpiryTime: null }, now);
    log.info('machine preservation ended');
  }

  let result: ReconcileResult = {};
  if (node !== undefined && d.target !== undefined && node.metadata.deletionTimestamp === undefined) {
    result = await syncPreservedNode(d, m, node, plan, now);
  } else {
    endDrain(d, drainId('preserve', objectKey(m)));
  }
  if (plan.action === 'start' || plan.action === 'keep') {
    const expiry = plan.expiry ?? Date.parse(m.status?.currentStatus?.preserveExpiryTime ?? '');
    if (!Number.isNaN(expiry)) {
      const untilExpiry = Math.max(1000, expiry - now);
      result = { requeueAfter: Math.min(result.requeueAfter ?? untilExpiry, untilExpiry) };
    }
  }
  return result;
}

function forcePreservedDrain(m: AnyMachine, now: number, startedAt: number, drainTimeoutMs: number): boolean {
  if (m.metadata.labels?.[Label.ForceDrain] === LabelValue.True) return true;
  if (now - startedAt >= drainTimeoutMs) return true;
  return (m.status?.conditions ?? []).some((c) => {
    const since = Date.parse(c.lastTransitionTime ?? '');
    return (
      c.type === 'Ready' &&
      c.status !== 'True' &&
      !Number.isNaN(since) &&
      now - since >= UNHEALTHY_FORCE_AFTER_MS
    );
  });
}

async function syncPreservedNode(
  d: MachineDeps,
  m: AnyMachine,
  node: AnyNode,
  plan: PreservePlan,
  now: number,
): Promise<ReconcileResult> {
  const target = d.target;
  if (target === undefined) return {};
  const name = node.metadata.name ?? '';
  const on = plan.action === 'start' || plan.action === 'keep';
  const have = node.metadata.annotations ?? {};
  const nodeAnnotations: Record<string, string | null> = {};
  if (on && have[Annotation.ClusterAutoscalerScaleDownDisabled] === undefined) {
    nodeAnnotations[Annotation.ClusterAutoscalerScaleDownDisabled] =
      CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE;
    nodeAnnotations[Annotation.ClusterAutoscalerScaleDownDisabledByMCM] =
      CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE;
  }
  if (!on && have[Annotation.ClusterAutoscalerScaleDownDisabledByMCM] !== undefined) {
    // Only what we set: a user's own scale-down-disabled annotation has no by-mcm marker.
    nodeAnnotations[Annotation.ClusterAutoscalerScaleDownDisabled] = null;
    nodeAnnotations[Annotation.ClusterAutoscalerScaleDownDisabledByMCM] = null;
  }
  if (plan.removeAnnotation && plan.effective.source === 'node') nodeAnnotations[Annotation.Preserve] = null;
  const taints = [...(node.spec?.taints ?? [])].map((t) => ({ ...t }));
  const tainted = taints.some((t) => t.key === PRESERVED_TAINT.key && t.effect === PRESERVED_TAINT.effect);
  let newTaints: Taint[] | undefined;
  if (plan.drain && !tainted) newTaints = [...taints, { ...PRESERVED_TAINT }];
  if (!plan.drain && tainted) newTaints = taints.filter((t) => t.key !== PRESERVED_TAINT.key);
  try {
    if (Object.keys(nodeAnnotations).length > 0 || newTaints !== undefined) {
      await target.patch(
        CoreResources.nodes,
        name,
        {
          metadata: {
            ...(newTaints === undefined ? {} : { resourceVersion: node.metadata.resourceVersion }),
            ...(Object.keys(nodeAnnotations).length > 0 ? { annotations: nodeAnnotations } : {}),
          },
          ...(newTaints === undefined ? {} : { spec: { taints: newTaints.length === 0 ? null : newTaints } }),
        },
        { type: 'merge' },
      );
    }
  } catch (err) {
    if (isNotFound(err)) return {};
    throw err;
  }

  let result: ReconcileResult = {};
  let message: string;
  const expiry = plan.expiry ?? Date.parse(m.status?.currentStatus?.preserveExpiryTime ?? '');
  const until = Number.isNaN(expiry) ? '' : ` Preserved until ${rfc3339(expiry)}.`;
  const key = drainId('preserve', objectKey(m));
  if (plan.drain && d.drainer !== undefined) {
    const failedAt = Date.parse(m.status?.currentStatus?.lastUpdateTime ?? '');
    const startedAt = Number.isNaN(failedAt) ? now : failedAt;
    const r = resolveMachineClass(
      { machineClasses: d.informers.machineClasses, secrets: d.informers.secrets, providers: d.providers },
      m,
      { requireFinalizer: false, allowMissingSecrets: true },
    );
    const round = await d.drainer.round({
      id: key,
      nodeName: name,
      startedAt,
      now,
      force: forcePreservedDrain(m, now, startedAt, drainTimeoutOf(m, d.settings)),
      driver: r.ok ? r.driver : undefined,
    });
    if (round.done) {
      endDrain(d, key);
      message = `${PreservedMessage.DrainSuccessful}${until}`;
    } else {
      message = `${PreservedMessage.DrainUnsuccessful} Waiting for: ${describeBlockers(round.blockers)}.${until}`;
      result = { requeueAfter: round.requeueAfterMs };
    }
  } else {
    endDrain(d, key);
    message = on ? `Machine ${m.metadata.name ?? ''} is preserved.${until}` : 'Preservation stopped.';
  }
  const current = node.status?.conditions?.find((c) => c.type === NodeConditionType.Preserved);
  let condition: NodeCondition | undefined;
  if (on) {
    condition = { type: NodeConditionType.Preserved, status: 'True', reason: plan.reason, message };
  } else if (current?.status === 'True') {
    condition = {
      type: NodeConditionType.Preserved,
      status: 'False',
      reason: PreservedReason.Stopped,
      message: 'Preservation stopped.',
    };
  }
  if (
    condition !== undefined &&
    (current?.status !== condition.status ||
      current.reason !== condition.reason ||
      current.message !== condition.message)
  ) {
    const stamp = rfc3339(now);
    condition.lastHeartbeatTime = stamp;
    condition.lastTransitionTime =
      current?.status === condition.status ? (current.lastTransitionTime ?? stamp) : stamp;
    try {
      await target.patch(
        CoreResources.nodes,
        name,
        { status: { conditions: [condition] } },
        { type: 'strategic', subresource: 'status' },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (on && current?.status !== 'True') {
      d.recorder.event(
        m,
        'Normal',
        MachineEventReason.Preserved,
        `Machine preserved (${plan.reason})${until}`,
      );
    }
  }
  return result;
}
