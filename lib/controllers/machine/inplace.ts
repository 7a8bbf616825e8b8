// In-place updates, the machine controller's side (pure planning). The node's `InPlaceUpdate`
// condition records how far its update has come: the MachineDeployment (or a user, with Manual
// orchestration) labels the node a candidate, then selects it; the machine controller answers
// each label with the next reason, drains the selected node (the machine goes InPlaceUpdating),
// then says ReadyForUpdate, and an agent on the node applies the update and reports the result in
// the node's update-result label, which becomes the reason UpdateSuccessful or UpdateFailed.

import {
  Annotation,
  InPlaceUpdateReason,
  Label,
  LabelValue,
  MachinePhase,
  NodeConditionType,
} from '../../api/constants.js';
import type { Machine } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node } from '../../kube/types.js';
import { phaseOf } from '../machines.js';
import { drainTimeoutOf, type MachineControllerSettings } from './settings.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

/** How often a node that is ready for its update is looked at again (MCM's medium retry). */
export const READY_FOR_UPDATE_RECHECK_MS = 3 * 60_000;
/** A node that has not been Ready this long cannot hand its pods over: its drain is forced. */
const UNHEALTHY_FORCE_AFTER_MS = 5 * 60_000;

export const InPlaceMessage = {
  CandidateForUpdate: 'Node is a candidate for in-place update',
  SelectedForUpdate: 'Node is selected for in-place update',
  DrainSuccessful: 'Node draining successful',
  ReadyForUpdate: 'Node is ready for in-place update',
  UpdateSuccessful: 'Node in-place update successful',
  UpdateFailed: 'Node in-place update failed',
} as const;

/** Phases in which a selected node is drained and its machine moves to InPlaceUpdating. */
export const DRAINABLE_PHASES: readonly string[] = [MachinePhase.Running, MachinePhase.InPlaceUpdating];

export type InPlaceStep =
  /** Nothing to do now (no update in progress, or the next step is someone else's). */
  | { kind: 'none'; recheckAfterMs?: number; why?: string }
  /** Set the node's InPlaceUpdate condition to this reason (a new step: a new transition time). */
  | { kind: 'condition'; reason: InPlaceUpdateReason; message: string }
  /** Cordon and drain the selected node; when done, the machine goes InPlaceUpdating. */
  | {
      kind: 'drain';
      /** When the node was selected: the drain timeout counts from here. */
      selectedAt: number;
      /** Why the drain is forced (pods deleted without eviction), or undefined. */
      force: string | undefined;
      /** When a graceful drain turns forced. */
      forceAt: number;
    };

function time(s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

/**
 * Why an in-place drain is forced, or undefined: the machine's `force-drain=True` label, the drain
 * timeout counted from the node's selection, or a node that has not been Ready (or has had a
 * read-only filesystem) for five minutes.
 */
export function inPlaceForceReason(
  m: AnyMachine,
  selectedAt: number,
  now: number,
  drainTimeoutMs: number,
): string | undefined {
  if (m.metadata.labels?.[Label.ForceDrain] === LabelValue.True)
    return `the machine has the ${Label.ForceDrain}=${LabelValue.True} label`;
  if (now - selectedAt >= drainTimeoutMs) return 'the drain timeout passed since the node was selected';
  for (const c of m.status?.conditions ?? []) {
    const since = time(c.lastTransitionTime);
    if (since === undefined || now - since < UNHEALTHY_FORCE_AFTER_MS) continue;
    if (c.type === 'Ready' && c.status !== 'True') return 'the node has not been Ready for 5 minutes';
    if (c.type === 'ReadonlyFilesystem' && c.status !== 'False')
      return 'the node has had a read-only filesystem for 5 minutes';
  }
  return undefined;
}

/**
 * The reason the node's labels call for, or undefined when they call for none. Only nodes labelled
 * candidate-for-update take part. A node whose last update succeeded and whose update-result label
 * is gone starts a new rollout.
 */
function reasonFromLabels(
  node: AnyNode,
): { reason: InPlaceUpdateReason; message: string } | 'drain' | undefined {
  const labels = node.metadata.labels ?? {};
  if (labels[Label.CandidateForUpdate] === undefined) return undefined;
  const current = node.status?.conditions?.find((c) => c.type === NodeConditionType.InPlaceUpdate)?.reason;
  const result = labels[Label.UpdateResult];
  if (current === undefined || (current === InPlaceUpdateReason.UpdateSuccessful && result === undefined)) {
    return { reason: InPlaceUpdateReason.CandidateForUpdate, message: InPlaceMessage.CandidateForUpdate };
  }
  if (labels[Label.SelectedForUpdate] !== undefined) {
    if (current === InPlaceUpdateReason.CandidateForUpdate)
      return { reason: InPlaceUpdateReason.SelectedForUpdate, message: InPlaceMessage.SelectedForUpdate };
    if (current === InPlaceUpdateReason.SelectedForUpdate) return 'drain';
  }
  if (result === LabelValue.UpdateSuccessful && current !== InPlaceUpdateReason.UpdateSuccessful)
    return { reason: InPlaceUpdateReason.UpdateSuccessful, message: InPlaceMessage.UpdateSuccessful };
  if (result === LabelValue.UpdateFailed && current !== InPlaceUpdateReason.UpdateFailed) {
    const why = node.metadata.annotations?.[Annotation.UpdateFailedReason] ?? 'no reason given';
    return { reason: InPlaceUpdateReason.UpdateFailed, message: `${InPlaceMessage.UpdateFailed}: ${why}` };
  }
  return undefined;
}

/** The next in-place step for a machine and its node (the machine is not being deleted). */
export function planInPlace(
  m: AnyMachine,
  node: AnyNode,
  settings: MachineControllerSettings,
  now: number,
): InPlaceStep {
  const fromLabels = reasonFromLabels(node);
  if (fromLabels !== undefined && fromLabels !== 'drain') return { kind: 'condition', ...fromLabels };
  const cond = node.status?.conditions?.find((c) => c.type === NodeConditionType.InPlaceUpdate);
  if (cond === undefined) return { kind: 'none' };
  switch (cond.reason ?? '') {
    case InPlaceUpdateReason.SelectedForUpdate: {
      const phase = phaseOf(m);
      if (!DRAINABLE_PHASES.includes(phase)) {
        // An unhealthy or failed machine is not updated: it recovers first, or is replaced.
        return { kind: 'none', why: `the machine is ${phase || 'not created'}, not Running` };
      }
      const selectedAt = time(cond.lastTransitionTime) ?? now;
      const timeout = drainTimeoutOf(m, settings);
      return {
        kind: 'drain',
        selectedAt,
        force: inPlaceForceReason(m, selectedAt, now, timeout),
        forceAt: selectedAt + timeout,
      };
    }
    case InPlaceUpdateReason.DrainSuccessful:
      return {
        kind: 'condition',
        reason: InPlaceUpdateReason.ReadyForUpdate,
        message: InPlaceMessage.ReadyForUpdate,
      };
    case InPlaceUpdateReason.ReadyForUpdate:
      // The node's update agent acts now; its result label re-enqueues the machine.
      return { kind: 'none', recheckAfterMs: READY_FOR_UPDATE_RECHECK_MS };
    default:
      return { kind: 'none' };
  }
}
