/**
 * How many signals AbortSignal.any() still has registered with `signal` (Node keeps them in an
 * internal set until `signal` aborts); 0 where this Node keeps no such set.
 */
export function dependantsOf(signal: AbortSignal): number {
  const key = Object.getOwnPropertySymbols(signal).find((s) => s.description === 'kDependantSignals');
  const set = key === undefined ? undefined : (signal as unknown as Record<symbol, unknown>)[key];
  // Node's internal SafeSet: a Set by shape, not by instanceof.
  const size = (set as { size?: unknown } | undefined)?.size;
  return typeof size === 'number' ? size : 0;
}
