import { RealClock, type Clock } from './clock.js';
import { isConflict } from './errors.js';

export interface RetryOptions {
  /** Attempts in total, the first included. */
  steps?: number;
  initialMs?: number;
  factor?: number;
  jitter?: number;
  maxMs?: number;
  clock?: Clock;
  /** Which errors are retried; conflicts by default. */
  retriable?: (err: unknown) => boolean;
}

/**
 * Runs fn until it succeeds, retrying errors the predicate accepts (409 Conflict by default) with
 * exponential backoff. fn must re-read the object it writes on every attempt, so each retry applies
 * the change to the latest version.
 */
export async function retryOnConflict<T>(
  fn: (attempt: number) => Promise<T>,
  opts: RetryOptions = {},
): Promise<T> {
  const steps = opts.steps ?? 8;
  const clock = opts.clock ?? new RealClock();
  const retriable = opts.retriable ?? isConflict;
  let delay = opts.initialMs ?? 10;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (attempt >= steps || !retriable(err)) throw err;
      const jittered = delay + delay * (opts.jitter ?? 0.5) * Math.random();
      await clock.sleep(jittered);
      delay = Math.min(opts.maxMs ?? 2000, delay * (opts.factor ?? 2));
    }
  }
}
