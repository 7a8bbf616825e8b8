// The drains of a machine's node and what they keep outside the API: the Drainer's in-memory
// state (by drain id) and the drain metric series. A machine has up to three drains — for its
// deletion, for an in-place update, for its preservation while Failed — and every way one ends
// (done, no longer wanted, its node gone, its machine gone) ends it here, so that neither the
// state nor an alerting series outlives it.

import { InPlaceUpdateReason, MachinePhase, NodeConditionType } from '../../api/constants.js';
import type { Machine } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { phaseOf } from '../machines.js';
import type { MachineDeps } from './deps.js';
import { DRAINABLE_PHASES } from './inplace.js';
import { DeletionStep } from './status.js';

type AnyMachine = Machine | DeepReadonly<Machine>;

export type DrainKind = 'deletion' | 'inplace' | 'preserve';
const KINDS: readonly DrainKind[] = ['deletion', 'inplace', 'preserve'];

/** Machines whose node is being drained, all under one index value (see isDraining). */
export const MACHINE_DRAINING_INDEX = 'machineDraining';
const DRAINING = 'draining';

/** The id of one of a machine's drains in the Drainer and the metrics (machine key `namespace/name`). */
export function drainId(kind: DrainKind, key: string): string {
  return kind === 'deletion' ? key : `${kind}:${key}`;
}

/** A drain that runs no further round: its in-memory state and its metric series go. */
export function endDrain(d: Pick<MachineDeps, 'drainer' | 'drainMetrics'>, id: string): void {
  d.drainer?.forget(id);
  d.drainMetrics.end(id);
}

/** Ends every drain of the machine with key `key` (it is gone). */
export function endDrainsOf(d: Pick<MachineDeps, 'drainer' | 'drainMetrics'>, key: string): void {
  for (const kind of KINDS) endDrain(d, drainId(kind, key));
}

/**
 * Whether the machine's node is being drained, as far as the machine itself says: a deletion that
 * waits at its drain step, a node selected for an in-place update (the machine mirrors the node's
 * InPlaceUpdate condition before the drain starts), or a preserved Failed machine. A change that
 * may let such a drain go on (a PodDisruptionBudget, a pod) enqueues exactly these.
 */
export function isDraining(m: AnyMachine): boolean {
  if (m.metadata.deletionTimestamp !== undefined) return m.status?.deletionStep === DeletionStep.DrainNode;
  const phase = phaseOf(m);
  if (phase === MachinePhase.Failed) return m.status?.currentStatus?.preserveExpiryTime !== undefined;
  return (
    DRAINABLE_PHASES.includes(phase) &&
    (m.status?.conditions ?? []).some(
      (c) => c.type === NodeConditionType.InPlaceUpdate && c.reason === InPlaceUpdateReason.SelectedForUpdate,
    )
  );
}

export function drainingIndex(m: AnyMachine): string[] {
  return isDraining(m) ? [DRAINING] : [];
}

/** The machines whose node is being drained, from the index. */
export function drainingMachines(d: Pick<MachineDeps, 'informers'>): DeepReadonly<Machine>[] {
  return d.informers.machines.byIndex(MACHINE_DRAINING_INDEX, DRAINING);
}
