// Kubernetes resource quantities ("4", "16Gi", "500m", "1e3") as exact integers, to compare them.

import type { Quantity } from './types.js';

/** Kubernetes resource quantity syntax ("4", "16Gi", "500m", "1e3"). */
export const QUANTITY_PATTERN =
  '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$';
export const QUANTITY_MESSAGE = 'must be a resource quantity such as "4", "16Gi" or "500m"';

const QUANTITY_PARTS = /^([+-]?)(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:([KMGTPE])i|([numkMGTPE])|[eE]([+-]?\d+))?$/;

const BINARY_POWER: Record<string, number> = { K: 1, M: 2, G: 3, T: 4, P: 5, E: 6 };
const DECIMAL_EXPONENT: Record<string, number> = {
  n: -9,
  u: -6,
  m: -3,
  k: 3,
  M: 6,
  G: 9,
  T: 12,
  P: 15,
  E: 18,
};

/**
 * The quantity in nano-units (1 = 1e-9 of the unit), rounded up as Kubernetes rounds values finer
 * than that; undefined when it is not a quantity this parser reads (fractional exponents are
 * accepted by the quantity pattern but not here).
 */
export function quantityNanos(q: Quantity): bigint | undefined {
  const m = QUANTITY_PARTS.exec(String(q).trim());
  if (m === null) return undefined;
  const [, sign, whole, fraction, bareFraction, binary, decimal, exponent] = m;
  const fractionDigits = fraction ?? bareFraction ?? '';
  let value = BigInt(`${whole ?? ''}${fractionDigits}` || '0');
  if (binary !== undefined) value *= 2n ** BigInt(10 * (BINARY_POWER[binary] ?? 0));
  const power =
    9 -
    fractionDigits.length +
    (decimal === undefined ? 0 : (DECIMAL_EXPONENT[decimal] ?? 0)) +
    (exponent === undefined ? 0 : Number(exponent));
  if (power >= 0) value *= 10n ** BigInt(power);
  else {
    const divisor = 10n ** BigInt(-power);
    value = (value + divisor - 1n) / divisor;
  }
  return sign === '-' ? -value : value;
}
