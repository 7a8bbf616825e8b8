// In-place updates, the machine controller's side (the writes): the node's InPlaceUpdate
// condition, the cordon and drain of a selected node, and the machine's move to InPlaceUpdating.
// The phases after that follow from the node's update-result label (see health.ts).

import {
  InPlaceUpdateReason,
  MachineOperationType,
  MachinePhase,
  MachineState,
  NodeConditionType,
} from '../../api/constants.js';
import { formatGoDuration } from '../../api/duration.js';
import type { Machine } from '../../api/types.js';
import { describeBlockers } from '../../drain/drain.js';
import type { ReconcileResult } from '../../kube/controller.js';
import { isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node, NodeCondition } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import { drainId } from './drains.js';
import { lastOp } from './health.js';
import { InPlaceMessage, planInPlace, type InPlaceStep } from './inplace.js';
import { resolveMachineClass } from './resolve.js';
import { drainTimeoutOf } from './settings.js';
import { isNoop, patchMachineStatus, type StatusChange } from './status.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

export interface InPlaceOutcome {
  result: ReconcileResult;
  machine: AnyMachine;
  /** A drain for the update ran a round and is not done: it goes on in a later pass. */
  draining?: boolean;
}

/**
 * The next in-place step. The caller ends the update's drain (its state and series) whenever a
 * pass leaves it without `draining`: the node was deselected, the machine left Running, the node
 * went away.
 */
export async function reconcileInPlace(
  d: MachineDeps,
  m: AnyMachine,
  node: AnyNode,
  log: Logger,
): Promise<InPlaceOutcome> {
  if (d.target === undefined || node.metadata.deletionTimestamp !== undefined)
    return { result: {}, machine: m };
  const now = d.clock.now();
  const step = planInPlace(m, node, d.settings, now);
  switch (step.kind) {
    case 'none':
      if (step.why !== undefined) log.verbose('in-place update waits', { why: step.why });
      return {
        result: step.recheckAfterMs === undefined ? {} : { requeueAfter: step.recheckAfterMs },
        machine: m,
      };
    case 'condition':
      await setInPlaceCondition(d, node, step.reason, step.message, now);
      log.info('in-place update', { node: node.metadata.name, reason: step.reason });
      return { result: {}, machine: m };
    case 'drain':
      return drainForUpdate(d, m, node, step, now, log);
  }
}

/**
 * Writes the node's InPlaceUpdate condition with a new reason; its lastTransitionTime marks when
 * that step began. The write is conditional on the node the decision was read from, so a label
 * that changed meanwhile is looked at again instead of being answered with a stale reason.
 */
async function setInPlaceCondition(
  d: MachineDeps,
  node: AnyNode,
  reason: InPlaceUpdateReason,
  message: string,
  now: number,
): Promise<void> {
  const target = d.target;
  if (target === undefined) return;
  const stamp = rfc3339(now);
  const condition: NodeCondition = {
    type: NodeConditionType.InPlaceUpdate,
    status: 'True',
    reason,
    message,
    lastHeartbeatTime: stamp,
    lastTransitionTime: stamp,
  };
  try {
    await target.patch(
      CoreResources.nodes,
      node.metadata.name ?? '',
      { metadata: { resourceVersion: node.metadata.resourceVersion }, status: { conditions: [condition] } },
      { type: 'strategic', subresource: 'status' },
    );
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** One drain round for the update; once the node is empty the machine goes InPlaceUpdating. */
async function drainForUpdate(
  d: MachineDeps,
  cached: AnyMachine,
  node: AnyNode,
  step: Extract<InPlaceStep, { kind: 'drain' }>,
  now: number,
  log: Logger,
): Promise<InPlaceOutcome> {
  const target = d.target;
  const drainer = d.drainer;
  let m = cached;
  const nodeName = node.metadata.name ?? '';
  const name = m.metadata.name ?? '';
  const namespace = m.metadata.namespace ?? '';
  if (target === undefined || drainer === undefined) return { result: {}, machine: m };
  // Unlike a preserved node's, an updating node is cordoned: the update's end uncordons it.
  let current: AnyNode = node;
  if (node.spec?.unschedulable !== true) {
    try {
      current = await target.patch<Node>(
        CoreResources.nodes,
        nodeName,
        { spec: { unschedulable: true } },
        { type: 'merge' },
      );
    } catch (err) {
      if (isNotFound(err)) return { result: {}, machine: m };
      throw err;
    }
  }
  const r = resolveMachineClass(
    { machineClasses: d.informers.machineClasses, secrets: d.informers.secrets, providers: d.providers },
    m,
    { requireFinalizer: false, allowMissingSecrets: true },
  );
  const id = drainId('inplace', objectKey(m));
  const round = await drainer.round({
    id,
    nodeName,
    startedAt: step.selectedAt,
    now,
    force: step.force !== undefined,
    driver: r.ok ? r.driver : undefined,
  });
  if (!round.done) {
    d.drainMetrics.blocked(id, namespace, name, round.blockers, (step.forceAt - now) / 1000);
    const what = describeBlockers(round.blockers);
    const timeout = drainTimeoutOf(m, d.settings);
    const description =
      step.force !== undefined
        ? `Forced drain of node ${nodeName} for its in-place update (${step.force}) is finishing: ${what}`
        : `Drain of node ${nodeName} for its in-place update waits: ${what}. Pods still there at ${rfc3339(step.forceAt)} (drain timeout ${formatGoDuration(timeout)}) are deleted without eviction`;
    if (step.force === undefined && round.blockers.some((b) => b.reason === 'pdb' || b.reason === 'error')) {
      d.recorder.event(
        m,
        'Warning',
        MachineEventReason.DrainBlocked,
        `Drain of node ${nodeName} for its in-place update waits: ${what}`,
      );
    }
    const change: StatusChange = {
      lastOperation: lastOp(MachineOperationType.InPlaceUpdate, MachineState.Processing, description, now),
    };
    if (!isNoop(m, change)) m = await patchMachineStatus(d.client, m, change, now);
    const untilForce = step.force === undefined ? Math.max(1000, step.forceAt - now) : round.requeueAfterMs;
    return {
      result: { requeueAfter: Math.min(round.requeueAfterMs, untilForce) },
      machine: m,
      draining: true,
    };
  }
  drainer.forget(id);
  d.drainMetrics.finished(id, namespace, m.metadata.labels?.name ?? '', (now - step.selectedAt) / 1000);
  if (step.force !== undefined) {
    d.recorder.event(
      m,
      'Warning',
      MachineEventReason.DrainForced,
      `Node ${nodeName} was drained by force for its in-place update: ${step.force}`,
    );
  }
  // The phase first: its lastUpdateTime starts the in-place timeout, and a crash before the
  // condition is written only repeats an (empty) drain.
  const change: StatusChange = {
    phase: MachinePhase.InPlaceUpdating,
    lastOperation: lastOp(
      MachineOperationType.InPlaceUpdate,
      MachineState.Processing,
      `Machine ${name} is undergoing an in-place update`,
      now,
    ),
  };
  if (!isNoop(m, change)) {
    m = await patchMachineStatus(d.client, m, change, now);
    d.recorder.event(
      m,
      'Normal',
      MachineEventReason.InPlaceUpdating,
      `Node ${nodeName} is drained; its in-place update may begin`,
    );
    log.info('machine is undergoing an in-place update', { node: nodeName });
  }
  await setInPlaceCondition(
    d,
    current,
    InPlaceUpdateReason.DrainSuccessful,
    InPlaceMessage.DrainSuccessful,
    now,
  );
  return { result: {}, machine: m };
}
