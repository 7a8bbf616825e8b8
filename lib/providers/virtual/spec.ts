// The virtual provider's providerSpec: every option, its default, and validation with messages
// that name the option. Unknown options are errors, so a typo never silently means "default".

import { parseGoDuration } from '../../api/duration.js';
import { nodeTemplateResources } from '../../api/nodetemplate.js';
import type { MachineClass } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';

export interface VirtualFailureModes {
  /** Initialisation never finishes: the machine goes CrashLoopBackOff, then Failed at its creation timeout. */
  bootNeverCompletes: boolean;
  /** The node turns NotReady this long after it became Ready (undefined: never). */
  notReadyAfterMs: number | undefined;
}

/** The simulated node update agent, for machines updated in place to a class with these options. */
export interface VirtualInPlaceUpdate {
  /** From the node's ReadyForUpdate until the agent reports its result. */
  durationMs: number;
  /** The update fails (update-result=failed) instead of succeeding. */
  fail: boolean;
  /** The update-failed-reason the agent reports when it fails. */
  failureReason: string;
}

export const DEFAULT_IN_PLACE_UPDATE: VirtualInPlaceUpdate = {
  durationMs: 5_000,
  fail: false,
  failureReason: 'simulated in-place update failure',
};

export interface VirtualProviderSpec {
  /** From CreateMachine until the node is Ready. */
  bootDelayMs: number;
  /** Added to every driver call, as a slow cloud API would. */
  apiLatencyMs: number;
  /** Fraction (0..1) of machine calls that fail with Unavailable. */
  errorRate: number;
  /** Maximum VMs per zone; a zone not listed is unlimited. Exhaustion fails with ResourceExhausted. */
  zoneCapacity: Record<string, number>;
  failure: VirtualFailureModes;
  inPlaceUpdate: VirtualInPlaceUpdate;
  /** What one VM of the class costs per hour (for the autoscaler's price expander); none: unpriced. */
  pricePerHour: number | undefined;
}

/** What a VM of a class looks like (from the class's nodeTemplate, else these defaults). */
export interface VirtualVmShape {
  instanceType: string;
  region: string;
  zone: string;
  architecture: string;
  /** Quantity strings, `pods` always present. */
  capacity: Record<string, string>;
  /** What the node offers to pods (the same as the autoscaler's template node says). */
  allocatable: Record<string, string>;
}

export const DEFAULT_SHAPE: VirtualVmShape = {
  instanceType: 'virtual-small',
  region: 'virtual-region',
  zone: 'virtual-zone-a',
  architecture: 'amd64',
  capacity: { cpu: '2', memory: '4Gi', pods: '110', 'ephemeral-storage': '50Gi' },
  allocatable: { cpu: '2', memory: '4Gi', pods: '110', 'ephemeral-storage': '50Gi' },
};

const KNOWN_OPTIONS = [
  'bootDelay',
  'apiLatency',
  'errorRate',
  'zoneCapacity',
  'failure',
  'inPlaceUpdate',
  'pricePerHour',
];
const KNOWN_FAILURE_OPTIONS = ['bootNeverCompletes', 'notReadyAfter'];
const KNOWN_IN_PLACE_OPTIONS = ['duration', 'fail', 'failureReason'];

export type SpecResult = { ok: true; spec: VirtualProviderSpec } | { ok: false; problems: string[] };

function duration(value: unknown, path: string, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') {
    problems.push(`${path}: must be a duration string such as "30s" or "2m", got ${JSON.stringify(value)}`);
    return undefined;
  }
  try {
    const ms = parseGoDuration(value);
    if (ms < 0) {
      problems.push(`${path}: must not be negative, got "${value}"`);
      return undefined;
    }
    return ms;
  } catch {
    problems.push(`${path}: must be a duration such as "30s" or "2m", got "${value}"`);
    return undefined;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses and validates a class's providerSpec; every problem is reported, not just the first. */
export function parseProviderSpec(raw: unknown): SpecResult {
  const problems: string[] = [];
  const spec: VirtualProviderSpec = {
    bootDelayMs: 0,
    apiLatencyMs: 0,
    errorRate: 0,
    zoneCapacity: {},
    failure: { bootNeverCompletes: false, notReadyAfterMs: undefined },
    inPlaceUpdate: { ...DEFAULT_IN_PLACE_UPDATE },
    pricePerHour: undefined,
  };
  if (raw === undefined || raw === null) return { ok: true, spec };
  if (!isObject(raw)) return { ok: false, problems: ['providerSpec: must be an object'] };
  for (const key of Object.keys(raw)) {
    if (!KNOWN_OPTIONS.includes(key)) {
      problems.push(`providerSpec.${key}: unknown option (known: ${KNOWN_OPTIONS.join(', ')})`);
    }
  }
  spec.bootDelayMs = duration(raw.bootDelay, 'providerSpec.bootDelay', problems) ?? 0;
  spec.apiLatencyMs = duration(raw.apiLatency, 'providerSpec.apiLatency', problems) ?? 0;
  if (raw.errorRate !== undefined) {
    const r = raw.errorRate;
    if (typeof r !== 'number' || !Number.isFinite(r) || r < 0 || r > 1) {
      problems.push(`providerSpec.errorRate: must be a number from 0 to 1, got ${JSON.stringify(r)}`);
    } else {
      spec.errorRate = r;
    }
  }
  if (raw.zoneCapacity !== undefined) {
    if (!isObject(raw.zoneCapacity)) {
      problems.push('providerSpec.zoneCapacity: must map zone names to VM counts, e.g. {"zone-a": 10}');
    } else {
      for (const [zone, n] of Object.entries(raw.zoneCapacity)) {
        if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
          problems.push(
            `providerSpec.zoneCapacity.${zone}: must be a whole number >= 0, got ${JSON.stringify(n)}`,
          );
        } else {
          spec.zoneCapacity[zone] = n;
        }
      }
    }
  }
  if (raw.failure !== undefined) {
    if (!isObject(raw.failure)) {
      problems.push('providerSpec.failure: must be an object');
    } else {
      for (const key of Object.keys(raw.failure)) {
        if (!KNOWN_FAILURE_OPTIONS.includes(key)) {
          problems.push(
            `providerSpec.failure.${key}: unknown option (known: ${KNOWN_FAILURE_OPTIONS.join(', ')})`,
          );
        }
      }
      const never = raw.failure.bootNeverCompletes;
      if (never !== undefined && typeof never !== 'boolean') {
        problems.push(
          `providerSpec.failure.bootNeverCompletes: must be true or false, got ${JSON.stringify(never)}`,
        );
      } else {
        spec.failure.bootNeverCompletes = never === true;
      }
      spec.failure.notReadyAfterMs = duration(
        raw.failure.notReadyAfter,
        'providerSpec.failure.notReadyAfter',
        problems,
      );
    }
  }
  if (raw.pricePerHour !== undefined) {
    const p = raw.pricePerHour;
    if (typeof p !== 'number' || !Number.isFinite(p) || p < 0) {
      problems.push(`providerSpec.pricePerHour: must be a number >= 0 (e.g. 0.5), got ${JSON.stringify(p)}`);
    } else {
      spec.pricePerHour = p;
    }
  }
  if (raw.inPlaceUpdate !== undefined) parseInPlaceUpdate(raw.inPlaceUpdate, spec.inPlaceUpdate, problems);
  return problems.length > 0 ? { ok: false, problems } : { ok: true, spec };
}

function parseInPlaceUpdate(raw: unknown, out: VirtualInPlaceUpdate, problems: string[]): void {
  if (!isObject(raw)) {
    problems.push('providerSpec.inPlaceUpdate: must be an object');
    return;
  }
  for (const key of Object.keys(raw)) {
    if (!KNOWN_IN_PLACE_OPTIONS.includes(key)) {
      problems.push(
        `providerSpec.inPlaceUpdate.${key}: unknown option (known: ${KNOWN_IN_PLACE_OPTIONS.join(', ')})`,
      );
    }
  }
  out.durationMs =
    duration(raw.duration, 'providerSpec.inPlaceUpdate.duration', problems) ??
    DEFAULT_IN_PLACE_UPDATE.durationMs;
  if (raw.fail !== undefined) {
    if (typeof raw.fail !== 'boolean') {
      problems.push(
        `providerSpec.inPlaceUpdate.fail: must be true or false, got ${JSON.stringify(raw.fail)}`,
      );
    } else {
      out.fail = raw.fail;
    }
  }
  if (raw.failureReason !== undefined) {
    if (typeof raw.failureReason !== 'string' || raw.failureReason.trim() === '') {
      problems.push(
        `providerSpec.inPlaceUpdate.failureReason: must be a non-empty string, got ${JSON.stringify(raw.failureReason)}`,
      );
    } else {
      out.failureReason = raw.failureReason;
    }
  }
}

/**
 * The VM shape of a class: its nodeTemplate or the defaults. Capacity and allocatable are those of
 * the autoscaler's template node (nodeTemplateResources), less the virtual capacity, which the
 * machine controller adds to the Node itself.
 */
export function vmShapeOf(cls: MachineClass | DeepReadonly<MachineClass>): VirtualVmShape {
  const t = cls.nodeTemplate;
  if (t === undefined) {
    return {
      ...DEFAULT_SHAPE,
      capacity: { ...DEFAULT_SHAPE.capacity },
      allocatable: { ...DEFAULT_SHAPE.allocatable },
    };
  }
  const { capacity, allocatable } = nodeTemplateResources(t, { virtualCapacity: false });
  return {
    instanceType: t.instanceType,
    region: t.region,
    zone: t.zone,
    architecture: t.architecture ?? DEFAULT_SHAPE.architecture,
    capacity,
    allocatable,
  };
}
