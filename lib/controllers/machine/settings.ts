// Settings of the machine controller (gardener's provider machine-controller flags) and the
// effective per-machine values, where a machine's spec or annotations override a flag.

import { Annotation } from '../../api/constants.js';
import { tryParseGoDuration } from '../../api/duration.js';
import type { Machine } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';

export interface MachineControllerSettings {
  /** --machine-creation-timeout */
  creationTimeoutMs: number;
  /** --machine-health-timeout */
  healthTimeoutMs: number;
  /** --machine-drain-timeout */
  drainTimeoutMs: number;
  /** --machine-inplace-update-timeout */
  inPlaceUpdateTimeoutMs: number;
  /** --machine-max-evict-retries */
  maxEvictRetries: number;
  /** --machine-pv-detach-timeout */
  pvDetachTimeoutMs: number;
  /** --machine-pv-reattach-timeout */
  pvReattachTimeoutMs: number;
  /** --machine-preserve-timeout */
  preserveTimeoutMs: number;
  /** --node-conditions: condition types that make a node unhealthy when True. */
  nodeConditions: string[];
  /** --bootstrap-token-auth-extra-groups */
  bootstrapTokenAuthExtraGroups: string;
  /** --resource-exhausted-retry */
  resourceExhaustedRetryMs: number;
  /** --launch-failure-backoff: the first wait after a failed launch of a class (0: none). */
  launchFailureBackoffMs: number;
  /** --launch-failure-max-backoff: the longest such wait. */
  launchFailureMaxBackoffMs: number;
  /**
   * --max-unhealthy-replacements (addition): how many machines of one MachineDeployment may be in
   * replacement at once before another unhealthy machine is marked Failed; a count ("1") or a
   * percentage of the deployment's replicas ("10%"). MCM hard-codes 1.
   */
  maxUnhealthyReplacements: string;
}

export const DEFAULT_NODE_CONDITIONS = [
  'KernelDeadlock',
  'ReadonlyFilesystem',
  'DiskPressure',
  'NetworkUnavailable',
];

export const defaultMachineControllerSettings: MachineControllerSettings = {
  creationTimeoutMs: 20 * 60_000,
  healthTimeoutMs: 10 * 60_000,
  drainTimeoutMs: 2 * 3_600_000,
  inPlaceUpdateTimeoutMs: 20 * 60_000,
  maxEvictRetries: 360,
  pvDetachTimeoutMs: 2 * 60_000,
  pvReattachTimeoutMs: 90_000,
  preserveTimeoutMs: 96 * 3_600_000,
  nodeConditions: DEFAULT_NODE_CONDITIONS,
  bootstrapTokenAuthExtraGroups: '',
  resourceExhaustedRetryMs: 10 * 60_000,
  launchFailureBackoffMs: 30_000,
  launchFailureMaxBackoffMs: 5 * 60_000,
  maxUnhealthyReplacements: '1',
};

type AnyMachine = Machine | DeepReadonly<Machine>;

/** Creation timeout: the effective-creation-timeout annotation, else spec.creationTimeout, else the flag. */
export function creationTimeoutOf(m: AnyMachine, s: MachineControllerSettings): number {
  return (
    tryParseGoDuration(m.metadata.annotations?.[Annotation.EffectiveCreationTimeout]) ??
    tryParseGoDuration(m.spec?.creationTimeout) ??
    s.creationTimeoutMs
  );
}

export function healthTimeoutOf(m: AnyMachine, s: MachineControllerSettings): number {
  return tryParseGoDuration(m.spec?.healthTimeout) ?? s.healthTimeoutMs;
}

/** In-place update timeout: spec.inPlaceUpdateTimeout, else the flag. */
export function inPlaceUpdateTimeoutOf(m: AnyMachine, s: MachineControllerSettings): number {
  return tryParseGoDuration(m.spec?.inPlaceUpdateTimeout) ?? s.inPlaceUpdateTimeoutMs;
}

export function drainTimeoutOf(m: AnyMachine, s: MachineControllerSettings): number {
  return tryParseGoDuration(m.spec?.drainTimeout) ?? s.drainTimeoutMs;
}

/** Condition types that make the node unhealthy when True: spec.nodeConditions, else the flag. */
export function nodeConditionsOf(m: AnyMachine, s: MachineControllerSettings): string[] {
  const own = m.spec?.nodeConditions;
  if (own === undefined || own.trim() === '') return s.nodeConditions;
  return own
    .split(',')
    .map((c) => c.trim())
    .filter((c) => c !== '');
}

/**
 * The replacement budget of a deployment of `replicas` machines: a count, or a percentage of the
 * replicas rounded down; undefined when the value is neither.
 */
export function resolveBudget(value: string, replicas: number): number | undefined {
  const v = value.trim();
  const pct = /^(\d+)%$/.exec(v);
  if (pct?.[1] !== undefined) return Math.floor((Number(pct[1]) * replicas) / 100);
  if (/^\d+$/.test(v)) return Number(v);
  return undefined;
}
