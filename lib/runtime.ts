// V8 settings the manager process gives itself at start.
//
// On a machine with several GiB of memory V8 lets its old generation grow to up to four times
// the live data before the next full collection. An informer cache turns its objects over on
// every update (each new version outlives the young generation, the one it replaces becomes
// garbage there), so a scale-down of 1,000 machines piled up 60 MiB of dead objects before V8
// collected any. Capped at twice the live size (what Go's default GOGC=100 allows a Go
// controller), the peak RSS of the 1,000-machine benchmark fell by 10-20 % for about 10 % more
// CPU (docs/performance.md). A `--heap-growing-percent` given to node itself wins.

import { setFlagsFromString } from 'node:v8';

/** How far the old generation may grow past its live size before a full collection, in %. */
export const HEAP_GROWING_PERCENT = 100;

/**
 * The node flags the manager is started with (the image's ENTRYPOINT and the npm scripts carry
 * them: V8 sizes its young generation at start-up, so the process cannot set this on itself). Each
 * of the young generation's two semi-spaces grows to 4 MiB instead of V8's 16: the manager's
 * short-lived garbage (parsed responses and watch events, a reconcile's scratch) dies within a few
 * MiB of allocation, and the peak RSS of the 1,000-machine benchmark fell by about 20 MiB for a
 * few per cent more of the manager's CPU (docs/architecture.md, Design decisions).
 */
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

/** The V8 flags the manager sets on itself, given node's own command-line flags. */
export function runtimeFlags(execArgv: readonly string[]): string[] {
  const set = execArgv.some((a) => /^--heap[-_]growing[-_]percent(=|$)/.test(a));
  return set ? [] : [`--heap-growing-percent=${HEAP_GROWING_PERCENT}`];
}

/** Applies runtimeFlags to this process (before the first large allocation). */
export function tuneRuntime(execArgv: readonly string[] = process.execArgv): void {
  for (const flag of runtimeFlags(execArgv)) setFlagsFromString(flag);
}
