// Int-or-percent values (maxSurge, maxUnavailable) with the semantics of Kubernetes'
// apimachinery intstr package, which MCM uses: an integer is absolute, a string must be a
// percentage ("25%"), and a percentage is scaled against a total with explicit rounding.

import type { IntOrString } from './types.js';

export interface ParsedIntOrPercent {
  value: number;
  isPercent: boolean;
}

export class IntOrStringError extends Error {
  override readonly name = 'IntOrStringError';
}

// strconv.Atoi accepts an optional sign followed by decimal digits; nothing else.
const PERCENT = /^([+-]?[0-9]+)%$/;

/**
 * Splits an int-or-percent into its number and kind. Throws IntOrStringError for values
 * Kubernetes rejects: non-integer numbers, strings without a trailing '%' (so "5" is invalid,
 * as in intstr's safe parser), or a non-numeric percentage.
 */
export function parseIntOrPercent(value: IntOrString): ParsedIntOrPercent {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) throw new IntOrStringError(`invalid value ${value}: not an integer`);
    return { value, isPercent: false };
  }
  if (!value.endsWith('%')) {
    throw new IntOrStringError(`invalid value "${value}": string is not a percentage`);
  }
  const match = PERCENT.exec(value);
  const digits = match?.[1];
  const parsed = digits === undefined ? Number.NaN : Number(digits);
  if (!Number.isSafeInteger(parsed)) {
    throw new IntOrStringError(`invalid value "${value}": not an integer percentage`);
  }
  return { value: parsed, isPercent: true };
}

export function isValidIntOrPercent(value: IntOrString): boolean {
  try {
    parseIntOrPercent(value);
    return true;
  } catch {
    return false;
  }
}

/** True for 0, "0%" (and "00%"): values that allow no surge or no unavailability at all. */
export function isZeroIntOrPercent(value: IntOrString): boolean {
  try {
    return parseIntOrPercent(value).value === 0;
  } catch {
    return false;
  }
}

/**
 * Resolves an int-or-percent against `total`. Percentages are scaled and rounded up or down as
 * asked ("25%" of 10 is 3 rounded up, 2 rounded down); integers are returned unchanged. A missing
 * value is an error, as in Kubernetes, because callers must decide what absence means.
 */
export function scaledValue(value: IntOrString | undefined, total: number, roundUp: boolean): number {
  if (value === undefined) throw new IntOrStringError('nil value for IntOrString');
  const parsed = parseIntOrPercent(value);
  if (!parsed.isPercent) return parsed.value;
  const exact = (parsed.value * total) / 100;
  const rounded = roundUp ? Math.ceil(exact) : Math.floor(exact);
  // Math.ceil(-0.4) is -0; normalise so results compare and print like Go ints.
  return rounded === 0 ? 0 : rounded;
}

export interface Fenceposts {
  maxSurge: number;
  maxUnavailable: number;
}

/**
 * MCM's rolling-update bounds for `desired` replicas: maxSurge rounds up, maxUnavailable rounds
 * down, and when both come out as zero maxUnavailable becomes 1 so a rollout can still make
 * progress. Throws IntOrStringError when either value is missing or malformed.
 */
export function resolveFenceposts(
  maxSurge: IntOrString | undefined,
  maxUnavailable: IntOrString | undefined,
  desired: number,
): Fenceposts {
  const surge = scaledValue(maxSurge, desired, true);
  const unavailable = scaledValue(maxUnavailable, desired, false);
  if (surge === 0 && unavailable === 0) return { maxSurge: 0, maxUnavailable: 1 };
  return { maxSurge: surge, maxUnavailable: unavailable };
}
