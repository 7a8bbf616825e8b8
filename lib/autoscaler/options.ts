// Per-group autoscaling options (pure): the annotations of gardener's autoscaler fork on a
// MachineDeployment, read with the fork's names and units, and merged over the defaults the
// autoscaler sends with every NodeGroupGetOptions call.

import { parseGoDuration } from '../api/duration.js';

/** gardener's autoscaler fork reads these on MachineDeployments (same names, same units). */
export const OptionAnnotation = {
  /** A ratio, e.g. "0.5": below it a node's CPU and memory use make it a scale-down candidate. */
  ScaleDownUtilizationThreshold: 'autoscaler.gardener.cloud/scale-down-utilization-threshold',
  /** A ratio, the same for nodes with GPUs (GPU use). */
  ScaleDownGpuUtilizationThreshold: 'autoscaler.gardener.cloud/scale-down-gpu-utilization-threshold',
  /** A Go duration, e.g. "10m": how long a node must be unneeded before it is removed. */
  ScaleDownUnneededTime: 'autoscaler.gardener.cloud/scale-down-unneeded-time',
  /** A Go duration: how long an unready node must be unneeded before it is removed. */
  ScaleDownUnreadyTime: 'autoscaler.gardener.cloud/scale-down-unready-time',
  /** A Go duration: how long the autoscaler waits for a new node to register. */
  MaxNodeProvisionTime: 'autoscaler.gardener.cloud/max-node-provision-time',
} as const;

/** The options a group's annotations set; an absent field keeps the autoscaler's default. */
export interface OptionOverrides {
  scaleDownUtilizationThreshold?: number;
  scaleDownGpuUtilizationThreshold?: number;
  scaleDownUnneededMs?: number;
  scaleDownUnreadyMs?: number;
  maxNodeProvisionMs?: number;
}

/** The options as the autoscaler sends and reads them (durations in nanoseconds). */
export interface WireOptions {
  scaleDownUtilizationThreshold: number;
  scaleDownGpuUtilizationThreshold: number;
  zeroOrMaxNodeScaling: boolean;
  ignoreDaemonSetsUtilization: boolean;
  scaleDownUnneededNs: number;
  scaleDownUnreadyNs: number;
  maxNodeProvisionNs: number;
}

export interface ParsedOptions {
  overrides: OptionOverrides;
  /** One line per annotation whose value was refused; that option keeps its default. */
  problems: string[];
}

function ratio(key: string, raw: string, problems: string[]): number | undefined {
  const v = Number(raw.trim());
  if (raw.trim() === '' || !Number.isFinite(v) || v < 0 || v > 1) {
    problems.push(
      `${key}: "${raw}" is not a ratio from 0 to 1 (e.g. "0.5"); the autoscaler's default applies`,
    );
    return undefined;
  }
  return v;
}

function duration(key: string, raw: string, problems: string[]): number | undefined {
  let ms: number;
  try {
    ms = parseGoDuration(raw);
  } catch {
    problems.push(
      `${key}: "${raw}" is not a Go duration (e.g. "10m", "90s"); the autoscaler's default applies`,
    );
    return undefined;
  }
  if (ms < 0) {
    problems.push(`${key}: "${raw}" is negative; the autoscaler's default applies`);
    return undefined;
  }
  return ms;
}

/**
 * The overrides a deployment's annotations set. An empty value means "not set" (gardener writes
 * every key, empty for the pool options it does not set); a value that does not parse is reported
 * and left out, so the group answers as if it were unset.
 */
export function parseOptionAnnotations(
  annotations: Readonly<Record<string, string>> | undefined,
): ParsedOptions {
  const overrides: OptionOverrides = {};
  const problems: string[] = [];
  const a = annotations ?? {};
  const get = (key: string): string | undefined => {
    const v = a[key];
    return v === undefined || v === '' ? undefined : v;
  };
  let raw = get(OptionAnnotation.ScaleDownUtilizationThreshold);
  if (raw !== undefined) {
    const v = ratio(OptionAnnotation.ScaleDownUtilizationThreshold, raw, problems);
    if (v !== undefined) overrides.scaleDownUtilizationThreshold = v;
  }
  raw = get(OptionAnnotation.ScaleDownGpuUtilizationThreshold);
  if (raw !== undefined) {
    const v = ratio(OptionAnnotation.ScaleDownGpuUtilizationThreshold, raw, problems);
    if (v !== undefined) overrides.scaleDownGpuUtilizationThreshold = v;
  }
  raw = get(OptionAnnotation.ScaleDownUnneededTime);
  if (raw !== undefined) {
    const v = duration(OptionAnnotation.ScaleDownUnneededTime, raw, problems);
    if (v !== undefined) overrides.scaleDownUnneededMs = v;
  }
  raw = get(OptionAnnotation.ScaleDownUnreadyTime);
  if (raw !== undefined) {
    const v = duration(OptionAnnotation.ScaleDownUnreadyTime, raw, problems);
    if (v !== undefined) overrides.scaleDownUnreadyMs = v;
  }
  raw = get(OptionAnnotation.MaxNodeProvisionTime);
  if (raw !== undefined) {
    const v = duration(OptionAnnotation.MaxNodeProvisionTime, raw, problems);
    if (v !== undefined) overrides.maxNodeProvisionMs = v;
  }
  return { overrides, problems };
}

export function hasOverrides(o: OptionOverrides): boolean {
  return Object.keys(o).length > 0;
}

const msToNs = (ms: number): number => Math.round(ms * 1e6);

/** The defaults with the group's overrides applied; every other option is echoed unchanged. */
export function mergeOptions(defaults: WireOptions, o: OptionOverrides): WireOptions {
  return {
    ...defaults,
    ...(o.scaleDownUtilizationThreshold === undefined
      ? {}
      : { scaleDownUtilizationThreshold: o.scaleDownUtilizationThreshold }),
    ...(o.scaleDownGpuUtilizationThreshold === undefined
      ? {}
      : { scaleDownGpuUtilizationThreshold: o.scaleDownGpuUtilizationThreshold }),
    ...(o.scaleDownUnneededMs === undefined ? {} : { scaleDownUnneededNs: msToNs(o.scaleDownUnneededMs) }),
    ...(o.scaleDownUnreadyMs === undefined ? {} : { scaleDownUnreadyNs: msToNs(o.scaleDownUnreadyMs) }),
    ...(o.maxNodeProvisionMs === undefined ? {} : { maxNodeProvisionNs: msToNs(o.maxNodeProvisionMs) }),
  };
}
