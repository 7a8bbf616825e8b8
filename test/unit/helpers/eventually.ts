/** Waits (yielding to the event loop, never sleeping on a timer) until cond() holds. */
export async function eventually(cond: () => boolean, what = 'condition', maxTurns = 2000): Promise<void> {
  for (let i = 0; i < maxTurns; i++) {
    if (cond()) return;
    await new Promise<void>((r) => setImmediate(r));
  }
  throw new Error(`${what} did not hold after ${maxTurns} event-loop turns`);
}
