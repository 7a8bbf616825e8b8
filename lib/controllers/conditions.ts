import type { ConditionStatus } from '../api/constants.js';

/** The shape shared by MachineSet and MachineDeployment conditions. */
export interface Condition {
  type: string;
  status: ConditionStatus;
  lastTransitionTime?: string;
  lastUpdateTime?: string;
  reason?: string;
  message?: string;
}

export function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function findCondition<C extends { type: string }>(
  conds: readonly C[] | undefined,
  type: string,
): C | undefined {
  return conds?.find((c) => c.type === type);
}

/**
 * Returns conds with `next` set: lastTransitionTime moves only when the status changes;
 * lastUpdateTime (when the condition kind has one) moves on any change of status, reason or
 * message. An identical condition leaves the list untouched, so unchanged status is not written.
 */
export function setCondition<C extends Condition>(
  conds: readonly C[] | undefined,
  next: Omit<C, 'lastTransitionTime' | 'lastUpdateTime'>,
  now: number,
  opts: { withUpdateTime?: boolean } = {},
): C[] {
  const list = [...(conds ?? [])];
  const i = list.findIndex((c) => c.type === next.type);
  const existing = i >= 0 ? list[i] : undefined;
  if (
    existing?.status === next.status &&
    existing.reason === next.reason &&
    existing.message === next.message
  ) {
    return list;
  }
  const stamp = rfc3339(now);
  const merged = { ...next } as C;
  merged.lastTransitionTime =
    existing?.status === next.status && existing.lastTransitionTime !== undefined
      ? existing.lastTransitionTime
      : stamp;
  if (opts.withUpdateTime === true) merged.lastUpdateTime = stamp;
  if (i >= 0) list[i] = merged;
  else list.push(merged);
  return list;
}

export function removeCondition<C extends { type: string }>(
  conds: readonly C[] | undefined,
  type: string,
): C[] {
  return (conds ?? []).filter((c) => c.type !== type);
}
