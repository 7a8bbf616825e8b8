// The virtual cloud's node update agent: what runs on a real node during an in-place update (for
// instance an OS updater). Once the machine controller has drained a VM's node and marked it
// ReadyForUpdate, the agent "applies" the update of the class the machine is being updated to and
// reports the result in the node's update-result label (and, on failure, the update-failed-reason
// annotation). How long that takes and whether it fails are options of that target class
// (providerSpec.inPlaceUpdate). The time is counted from the condition's transition, so an
// update under way survives our restarts.

import {
  Annotation,
  InPlaceUpdateReason,
  Label,
  LabelValue,
  NodeConditionType,
} from '../../api/constants.js';
import { MachineDeploymentResource, MachineSetResource } from '../../api/types.js';
import type { ControlCaches } from '../../driver/registry.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node, ObjectMeta } from '../../kube/types.js';
import { DEFAULT_IN_PLACE_UPDATE, parseProviderSpec, type VirtualInPlaceUpdate } from './spec.js';
import { isVmNode } from './store.js';
import { VIRTUAL_PROVIDER, VirtualKey } from './vm.js';

type AnyNode = Node | DeepReadonly<Node>;

/** The update a VM's node receives. */
export interface UpdateTarget {
  /** The MachineClass the machine is updated to ('' when it cannot be told). */
  className: string;
  update: VirtualInPlaceUpdate;
  /** Why the update cannot be applied (the agent reports it as the failure reason). */
  problem?: string;
}

export type AgentStep =
  | { kind: 'none'; recheckAfterMs?: number }
  | { kind: 'report'; result: typeof LabelValue.UpdateSuccessful; className: string }
  | { kind: 'report'; result: typeof LabelValue.UpdateFailed; reason: string };

/** When the node became ready for its update, if the agent has an update to apply now. */
export function updatePendingSince(node: AnyNode, now: number): number | undefined {
  if (!isVmNode(node) || node.metadata.deletionTimestamp !== undefined) return undefined;
  if (node.metadata.labels?.[Label.UpdateResult] !== undefined) return undefined;
  const cond = node.status?.conditions?.find((c) => c.type === NodeConditionType.InPlaceUpdate);
  if (cond?.reason !== InPlaceUpdateReason.ReadyForUpdate) return undefined;
  const t = Date.parse(cond.lastTransitionTime ?? '');
  return Number.isNaN(t) ? now : t;
}

/** What the agent does now for a node (pure; target is only asked for when there is an update). */
export function planUpdateAgent(node: AnyNode, target: () => UpdateTarget, now: number): AgentStep {
  const since = updatePendingSince(node, now);
  if (since === undefined) return { kind: 'none' };
  const t = target();
  if (t.problem !== undefined) return { kind: 'report', result: LabelValue.UpdateFailed, reason: t.problem };
  const doneAt = since + t.update.durationMs;
  if (now < doneAt) return { kind: 'none', recheckAfterMs: doneAt - now };
  return t.update.fail
    ? { kind: 'report', result: LabelValue.UpdateFailed, reason: t.update.failureReason }
    : { kind: 'report', result: LabelValue.UpdateSuccessful, className: t.className };
}

function controllerName(
  obj: { metadata: DeepReadonly<ObjectMeta> } | undefined,
  kind: string,
): { name: string; uid: string } | undefined {
  const ref = obj?.metadata.ownerReferences?.find((r) => r.controller === true);
  return ref?.kind === kind ? { name: ref.name, uid: ref.uid } : undefined;
}

/**
 * The class a VM's node is updated to: the class its machine's MachineDeployment now names, else
 * (a machine without a deployment) the machine's own class, else the class the VM was made from.
 */
export function resolveUpdateTarget(
  caches: ControlCaches | undefined,
  node: AnyNode,
  namespace: string,
): UpdateTarget {
  const made = node.metadata.annotations?.[VirtualKey.MachineClass] ?? '';
  if (caches === undefined) return { className: made, update: { ...DEFAULT_IN_PLACE_UPDATE } };
  const key = node.metadata.annotations?.[VirtualKey.Machine] ?? `${namespace}/${node.metadata.name ?? ''}`;
  const machine = caches.machines.getByKey(key);
  const ns = machine?.metadata.namespace ?? namespace;
  let className = machine?.spec?.class?.name ?? made;
  const msRef = controllerName(machine, MachineSetResource.kind);
  const ms = msRef === undefined ? undefined : caches.machineSets.get(ns, msRef.name);
  const mcdRef =
    ms?.metadata.uid === msRef?.uid ? controllerName(ms, MachineDeploymentResource.kind) : undefined;
  const mcd = mcdRef === undefined ? undefined : caches.machineDeployments.get(ns, mcdRef.name);
  if (mcd !== undefined && mcd.metadata.uid === mcdRef?.uid) {
    className = mcd.spec?.template.spec?.class?.name ?? className;
  }
  const update = { ...DEFAULT_IN_PLACE_UPDATE };
  const cls = caches.machineClasses.get(ns, className);
  if (cls === undefined) return { className, update, problem: `MachineClass ${ns}/${className} not found` };
  if (cls.provider !== VIRTUAL_PROVIDER) {
    return {
      className,
      update,
      problem: `MachineClass ${ns}/${className} is of provider ${cls.provider ?? '(none)'}, not ${VIRTUAL_PROVIDER}`,
    };
  }
  const parsed = parseProviderSpec(cls.providerSpec);
  if (!parsed.ok) {
    return {
      className,
      update,
      problem: `invalid providerSpec of MachineClass ${ns}/${className}: ${parsed.problems.join('; ')}`,
    };
  }
  return { className, update: parsed.spec.inPlaceUpdate };
}

/** The node metadata patch that reports the agent's result. */
export function reportPatch(
  node: AnyNode,
  step: Extract<AgentStep, { kind: 'report' }>,
): Record<string, unknown> {
  const annotations: Record<string, string | null> =
    step.result === LabelValue.UpdateSuccessful
      ? { [VirtualKey.UpdatedTo]: step.className, [Annotation.UpdateFailedReason]: null }
      : { [Annotation.UpdateFailedReason]: step.reason };
  return {
    metadata: {
      resourceVersion: node.metadata.resourceVersion,
      labels: { [Label.UpdateResult]: step.result },
      annotations,
    },
  };
}
