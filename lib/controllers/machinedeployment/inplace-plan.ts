// InPlaceUpdate (pure planning): which old nodes become candidates, which are selected for an
// update, which updated machines move to the new MachineSet, and how the sets are sized around
// that. Machines are never replaced by this strategy: an old machine whose node reports a
// successful update is handed over to the new set (labels and controller reference), and the
// sets' replicas follow the hand-over. The writes live in inplace.ts.

import { InPlaceUpdateReason, LabelValue, MachinePhase } from '../../api/constants.js';
import { compareStatesByAge, occupied, type SetState } from './sets.js';

/** What an in-place pass needs to know about one machine and its node. */
export interface InPlaceMachine {
  name: string;
  /** The machine's node (label `node`), when it has one and the node cache holds it. */
  node?:
    | {
        name: string;
        candidate: boolean;
        selected: boolean;
        /** Label update-result (successful | failed), set by the node's update agent. */
        updateResult: string | undefined;
        /** Reason of the node's InPlaceUpdate condition. */
        conditionReason: string | undefined;
      }
    | undefined;
  /** Reason of the InPlaceUpdate condition the machine mirrors from its node. */
  conditionReason: string | undefined;
  phase: MachinePhase;
  terminating: boolean;
  /** Running (or Available) and not being deleted. */
  available: boolean;
  /** The machine carries update-result=successful: handed over, not yet counted by its new set. */
  transferLabel: boolean;
}

export interface InPlaceSet {
  state: SetState;
  machines: readonly InPlaceMachine[];
  /** Labelled scale-up-disabled: it never creates machines again. */
  scaleUpDisabled: boolean;
}

export interface InPlaceInput {
  replicas: number;
  /** Fresh machines the new set may add above replicas (0 for Manual orchestration). */
  maxSurge: number;
  maxUnavailable: number;
  manual: boolean;
  /**
   * The deployment's disruption budget and windows, when it sets them (expire.ts reads the same
   * annotations): Auto orchestration selects nodes only inside a window and while fewer than
   * `allowed` are being updated. Undefined: only maxUnavailable bounds it.
   */
  disruption?: { allowed: number; open: boolean; why: string; recheckAt: number | undefined } | undefined;
  newSet: InPlaceSet;
  oldSets: readonly InPlaceSet[];
}

/** The node reports a finished, successful update (condition and label agree). */
export function updateSucceeded(m: InPlaceMachine): boolean {
  return (
    m.node?.conditionReason === InPlaceUpdateReason.UpdateSuccessful &&
    m.node.updateResult === LabelValue.UpdateSuccessful
  );
}

/**
 * Ready to be handed over to the new set: the machine's own (mirrored) condition and its node's
 * label both say the update succeeded, and it is not still updating or being deleted.
 */
export function transferable(m: InPlaceMachine): boolean {
  return (
    !m.terminating &&
    m.phase !== MachinePhase.InPlaceUpdating &&
    m.conditionReason === InPlaceUpdateReason.UpdateSuccessful &&
    m.node?.updateResult === LabelValue.UpdateSuccessful
  );
}

/** Machines of a set that still need work (not being deleted). */
function active(s: InPlaceSet): InPlaceMachine[] {
  return s.machines.filter((m) => !m.terminating);
}

/** Old sets that still hold or want machines. */
export function activeOldSets(oldSets: readonly InPlaceSet[]): InPlaceSet[] {
  return oldSets.filter((s) => s.state.replicas > 0 || s.machines.length > 0);
}

/** Old sets that must be labelled scale-up-disabled before any machine leaves them. */
export function setsToDisable(oldSets: readonly InPlaceSet[]): string[] {
  return activeOldSets(oldSets)
    .filter((s) => !s.scaleUpDisabled)
    .map((s) => s.state.name);
}

/** Nodes of old machines that are not yet labelled candidate-for-update. */
export function nodesToMarkCandidate(oldSets: readonly InPlaceSet[]): string[] {
  return oldSets.flatMap((s) =>
    active(s)
      .filter((m) => m.node !== undefined && !m.node.candidate)
      .map((m) => m.node?.name ?? ''),
  );
}

/** Book-keeping after hand-overs (gardener MCM's syncMachineSets), in the order it must happen. */
export interface InPlaceSync {
  /** The new set holds more machines than it asks for because some were handed over: grow it. */
  newSetTo?: number | undefined;
  /** Handed-over machines the new set now counts: drop their update-result label. */
  unlabelMachines: string[];
  /** Nodes of the new set whose update succeeded: clear the protocol labels, uncordon, untaint. */
  finishNodes: string[];
  /** Old sets asking for more machines than they hold (hand-overs left them): shrink to what they hold. */
  shrinkOld: { name: string; to: number }[];
}

export function planSync(input: InPlaceInput): InPlaceSync {
  const newMachines = active(input.newSet);
  const labelled = newMachines.filter((m) => m.transferLabel);
  const sync: InPlaceSync = { unlabelMachines: [], finishNodes: [], shrinkOld: [] };
  const newReplicas = input.newSet.state.replicas;
  let counted = newReplicas;
  if (newMachines.length > newReplicas && labelled.length > 0) {
    counted = newReplicas + Math.min(labelled.length, newMachines.length - newReplicas);
    sync.newSetTo = counted;
  }
  // Only once the set's replicas cover them: until then the label keeps them from being removed
  // as surplus.
  if (counted >= newMachines.length) sync.unlabelMachines = labelled.map((m) => m.name);
  sync.finishNodes = newMachines
    .filter(
      (m) =>
        updateSucceeded(m) &&
        m.node !== undefined &&
        (m.node.candidate || m.node.selected || m.node.updateResult !== undefined),
    )
    .map((m) => m.node?.name ?? '');
  for (const s of input.oldSets) {
    const held = s.machines.length;
    if (held < s.state.replicas) sync.shrinkOld.push({ name: s.state.name, to: held });
  }
  return sync;
}

export type NewSetStep =
  | { kind: 'none' }
  | { kind: 'scale'; to: number }
  /** Hand these machines over, then move their count from their old sets to the new one. */
  | { kind: 'transfer'; machines: { name: string; from: string }[] };

/**
 * The new set's step (gardener MCM's reconcileNewMachineSetInPlace, plus filling lost capacity):
 * - above replicas: shrink to replicas;
 * - no old machines asked for: all replicas;
 * - old machines whose update succeeded: hand them over;
 * - otherwise grow by fresh machines while all sets together stay within replicas + maxSurge
 *   (the surge of Auto orchestration, and the replacement of old machines that were lost, e.g.
 *   deleted after a failed update, since old sets never create machines again).
 */
export function planNewSet(input: InPlaceInput): NewSetStep {
  const { replicas, newSet } = input;
  const current = newSet.state.replicas;
  if (current > replicas) return { kind: 'scale', to: replicas };
  if (current === replicas) return { kind: 'none' };
  const oldReplicas = input.oldSets.reduce((n, s) => n + s.state.replicas, 0);
  if (oldReplicas === 0) return { kind: 'scale', to: replicas };
  const moving = input.oldSets.flatMap((s) =>
    s.machines.filter(transferable).map((m) => ({ name: m.name, from: s.state.name })),
  );
  if (moving.length > 0) return { kind: 'transfer', machines: moving.slice(0, replicas - current) };
  const total = [newSet, ...input.oldSets].reduce((n, s) => n + occupied(s.state), 0);
  const room = Math.min(replicas + input.maxSurge - total, replicas - current);
  return room > 0 ? { kind: 'scale', to: current + room } : { kind: 'none' };
}

export type OldSetsStep =
  | { kind: 'none'; reason: string; recheckAt?: number | undefined }
  | { kind: 'scale'; changes: { name: string; to: number }[] }
  | { kind: 'select'; nodes: string[] };

/**
 * The old sets' step (gardener MCM's reconcileOldMachineSetsInPlace):
 * - the new set has all replicas (fresh surge machines took the place of old ones): old sets to 0;
 * - old sets ask for more than replicas + maxSurge allow next to the new set (the deployment was
 *   scaled down mid-rollout): shrink them, oldest first;
 * - Manual orchestration: nothing; users pick the nodes;
 * - Auto: select candidate nodes for the update, oldest set first, as many as availability
 *   allows: machines out of service (not available, or selected and still being drained or
 *   updated) never exceed maxUnavailable, and no more are selected than old machines remain to
 *   be updated.
 */
export function planOldSets(input: InPlaceInput): OldSetsStep {
  const { replicas, newSet } = input;
  const olds = [...input.oldSets].sort((a, b) => compareStatesByAge(a.state, b.state));
  const oldReplicas = olds.reduce((n, s) => n + s.state.replicas, 0);
  if (oldReplicas === 0) return { kind: 'none', reason: 'no old machines left' };
  if (newSet.state.replicas >= replicas) {
    return {
      kind: 'scale',
      changes: olds.filter((s) => s.state.replicas > 0).map((s) => ({ name: s.state.name, to: 0 })),
    };
  }
  const excess = oldReplicas + newSet.state.replicas - (replicas + input.maxSurge);
  if (excess > 0) {
    let left = excess;
    const changes: { name: string; to: number }[] = [];
    for (const s of olds) {
      if (left <= 0) break;
      const cut = Math.min(left, s.state.replicas);
      if (cut === 0) continue;
      changes.push({ name: s.state.name, to: s.state.replicas - cut });
      left -= cut;
    }
    return { kind: 'scale', changes };
  }
  if (input.manual) return { kind: 'none', reason: 'Manual orchestration: nodes are selected by the user' };

  const all = [newSet, ...olds].flatMap(active);
  const inProgress = olds.flatMap(active).filter((m) => m.node?.selected === true).length;
  const inService = all.filter((m) => m.available && m.node?.selected !== true).length;
  const minAvailable = replicas - input.maxUnavailable;
  const byAvailability = inService - minAvailable;
  const toUpdate = replicas - newSet.state.replicas - inProgress;
  const d = input.disruption;
  if (d !== undefined && !d.open) return { kind: 'none', reason: d.why, recheckAt: d.recheckAt };
  const byBudget = d === undefined ? Number.POSITIVE_INFINITY : d.allowed - inProgress;
  if (byBudget <= 0 && byAvailability > 0 && toUpdate > 0) {
    return {
      kind: 'none',
      reason: `the disruption budget (${d?.allowed ?? 0}) is in use by ${inProgress} updating machines`,
    };
  }
  const budget = Math.min(byAvailability, toUpdate, byBudget);
  if (budget <= 0) {
    return {
      kind: 'none',
      reason:
        byAvailability <= 0
          ? `${inService} machines in service, ${minAvailable} required (maxUnavailable ${input.maxUnavailable})`
          : `${inProgress} machines are being updated`,
    };
  }
  const nodes: string[] = [];
  for (const s of olds) {
    const candidates = active(s)
      .filter((m) => m.available && m.node?.candidate === true && !m.node.selected)
      .sort((a, b) => a.name.localeCompare(b.name));
    for (const m of candidates) {
      if (nodes.length >= budget) break;
      nodes.push(m.node?.name ?? '');
    }
  }
  return nodes.length > 0
    ? { kind: 'select', nodes }
    : { kind: 'none', reason: 'no candidate node is ready to be selected' };
}
