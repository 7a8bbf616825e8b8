// Machine preservation (pure planning): keep a machine (and its node) for debugging instead of
// replacing it, on request through the `node.machine.sapcloud.io/preserve` annotation of the Node
// or the Machine (the node's value wins), for at most the preserve timeout.

import { Annotation, MachinePhase, PreserveValue, PreservedReason } from '../../api/constants.js';
import { tryParseGoDuration } from '../../api/duration.js';
import type { Machine } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node } from '../../kube/types.js';
import { phaseOf } from '../machines.js';
import type { MachineControllerSettings } from './settings.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

const VALID = new Set<string>([
  PreserveValue.Now,
  PreserveValue.WhenFailed,
  PreserveValue.AutoPreserved,
  PreserveValue.False,
]);

export interface EffectivePreserve {
  /** The governing value ('' when none); invalid values count as none. */
  value: string;
  source: 'node' | 'machine';
  /**
   * A value that is not one of now, when-failed, auto-preserved, false, the empty one included
   * (reported): on the machine it counts as none; on the node nothing changes until it is fixed.
   */
  invalid?: string;
  /** Bookkeeping on the machine when the node's value governs (null removes a key). */
  machineAnnotations?: Record<string, string | null>;
}

/**
 * Which preserve value governs (MCM's rule): the machine's when there is no node, or when the node
 * has none and none was applied from it before; otherwise the node's (even when it was removed,
 * which stops a preservation the node started). When the node's value governs it is recorded on
 * the machine (last-applied-node-preserve-value) and the machine's own value is dropped.
 */
export function effectivePreserve(m: AnyMachine, node: AnyNode | undefined): EffectivePreserve {
  const own = m.metadata.annotations?.[Annotation.Preserve];
  const lastApplied = m.metadata.annotations?.[Annotation.LastAppliedNodePreserveValue];
  const onNode = node?.metadata.annotations?.[Annotation.Preserve];
  let value: string;
  let source: 'node' | 'machine';
  const bookkeeping: Record<string, string | null> = {};
  if (node === undefined || (onNode === undefined && (lastApplied === undefined || lastApplied === ''))) {
    value = own ?? '';
    source = 'machine';
  } else {
    value = onNode ?? '';
    source = 'node';
    if ((lastApplied ?? '') !== value)
      bookkeeping[Annotation.LastAppliedNodePreserveValue] = value === '' ? null : value;
    if (own !== undefined && value !== '') bookkeeping[Annotation.Preserve] = null;
  }
  const out: EffectivePreserve = { value: VALID.has(value) ? value : '', source };
  // A value that is there but not one of the four (the empty one included, as on gardener's master)
  // is invalid; a node value that was removed is not (it stops what the node started).
  const present = source === 'node' ? onNode !== undefined : own !== undefined;
  if (present && !VALID.has(value)) out.invalid = value;
  if (Object.keys(bookkeeping).length > 0) out.machineAnnotations = bookkeeping;
  return out;
}

export function preserveTimeoutOf(m: AnyMachine, s: MachineControllerSettings): number {
  return tryParseGoDuration(m.spec?.machinePreserveTimeout) ?? s.preserveTimeoutMs;
}

/** Whether the value asks for preservation of a machine in this phase. */
export function wantsPreservation(value: string, phase: string): boolean {
  if (value === PreserveValue.Now) return true;
  return (
    (value === PreserveValue.WhenFailed || value === PreserveValue.AutoPreserved) &&
    phase === MachinePhase.Failed
  );
}

export type PreserveAction = 'none' | 'start' | 'keep' | 'stop';

export interface PreservePlan {
  effective: EffectivePreserve;
  action: PreserveAction;
  /** For start: the expiry to set (ms). */
  expiry?: number;
  /** Remove the governing preserve annotation (expired, or an auto-preservation that recovered). */
  removeAnnotation: boolean;
  reason: PreservedReason;
  /** A preserved Failed machine: its node is tainted and drained. */
  drain: boolean;
}

/** What preservation should do for a machine now (the machine is not being deleted). */
export function planPreservation(
  m: AnyMachine,
  node: AnyNode | undefined,
  now: number,
  settings: MachineControllerSettings,
): PreservePlan {
  const effective = effectivePreserve(m, node);
  // An invalid value on the node neither starts nor stops anything (gardener's master).
  if (effective.invalid !== undefined && effective.source === 'node') {
    const { machineAnnotations: _ignored, ...reported } = effective;
    return {
      effective: reported,
      action: 'none',
      removeAnnotation: false,
      reason: PreservedReason.ByUser,
      drain: false,
    };
  }
  const phase = phaseOf(m);
  const expiryRaw = Date.parse(m.status?.currentStatus?.preserveExpiryTime ?? '');
  const expiry = Number.isNaN(expiryRaw) ? undefined : expiryRaw;
  const active = expiry !== undefined && expiry > now;
  const expired = expiry !== undefined && expiry <= now;
  const wants = wantsPreservation(effective.value, phase);
  const reason =
    effective.value === PreserveValue.AutoPreserved ? PreservedReason.ByMCM : PreservedReason.ByUser;
  const failed = phase === MachinePhase.Failed;
  if (expired)
    return { effective, action: 'stop', removeAnnotation: effective.value !== '', reason, drain: false };
  if (wants && !active) {
    return {
      effective,
      action: 'start',
      expiry: now + preserveTimeoutOf(m, settings),
      removeAnnotation: false,
      reason,
      drain: failed,
    };
  }
  if (!wants && active) {
    return {
      effective,
      action: 'stop',
      removeAnnotation: effective.value === PreserveValue.AutoPreserved,
      reason,
      drain: false,
    };
  }
  if (wants && active) return { effective, action: 'keep', removeAnnotation: false, reason, drain: failed };
  return { effective, action: 'none', removeAnnotation: false, reason, drain: false };
}
