import { isNotFound } from '../../../lib/kube/errors.js';

/**
 * Polls fn until it returns a value other than undefined/false and returns that value. Tests use
 * it to wait for an observable outcome with a deadline instead of sleeping a fixed time. An error
 * fn throws is taken as "not yet" (a read that failed) and named if time runs out, except an
 * assertion error (chai's expect, expect.fail): that is a violation, thrown at once, never
 * swallowed by a later success.
 */
export async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      if (err instanceof Error && err.name === 'AssertionError') throw err;
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last instanceof Error ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * What a read returns, or undefined when the object does not exist (NotFound). Any other error is
 * thrown: an unreachable API server or a bad request must not read as "gone".
 */
export async function unlessNotFound<T>(read: Promise<T>): Promise<T | undefined> {
  try {
    return await read;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}
