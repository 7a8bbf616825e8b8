/**
 * Time as a seam: production code takes a Clock so that tests drive timers with a FakeClock
 * instead of sleeping.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a monotonic clock (arbitrary origin): never jumps with wall-clock changes and
   * keeps counting while the process is stopped, so "how long since" questions about leadership
   * are answered from it.
   */
  monotonic(): number;
  /** Runs fn once after ms milliseconds unless cancelled. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  /** Resolves after ms milliseconds, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error('aborted');
}

export class RealClock implements Clock {
  now(): number {
    return Date.now();
  }

  monotonic(): number {
    return performance.now();
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const t = setTimeout(fn, Math.max(0, ms));
    return {
      cancel: () => {
        clearTimeout(t);
      },
    };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepWith(this, ms, signal);
  }
}

function sleepWith(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = (): void => {
      handle.cancel();
      reject(abortReason(signal as AbortSignal));
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

interface FakeTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/**
 * A manually advanced clock for tests. Timers fire in due order when advance() passes their time;
 * advance() lets pending promise callbacks run between timers so async code observes each step.
 */
export class FakeClock implements Clock {
  private current: number;
  /** How far the wall clock was stepped away from the monotonic one (stepWall). */
  private wallOffset = 0;
  private seq = 0;
  private timers: FakeTimer[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.current = start;
  }

  now(): number {
    return this.current + this.wallOffset;
  }

  /** Moves with now() through advance() and stall(); stepWall() moves now() alone. */
  monotonic(): number {
    return this.current;
  }

  /** Steps the wall clock (NTP, an operator) by ms, forward or back; monotonic time does not move. */
  stepWall(ms: number): void {
    this.wallOffset += ms;
  }

  /**
   * Time passes without any timer firing: a process frozen (SIGSTOP, a long GC pause) that has
   * just resumed, before its overdue timers run. The next advance() fires them.
   */
  stall(ms: number): void {
    this.current += ms;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer: FakeTimer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.timers.push(timer);
    return {
      cancel: () => {
        timer.cancelled = true;
      },
    };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepWith(this, ms, signal);
  }

  /** Number of timers that have not fired or been cancelled. */
  pendingTimers(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** Moves time forward by ms, firing every timer that falls due, in order. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    for (;;) {
      await flushMicrotasks();
      const next = this.nextDue(target);
      if (next === undefined) break;
      this.current = Math.max(this.current, next.at);
      this.timers = this.timers.filter((t) => t !== next);
      next.fn();
    }
    this.current = target;
    await flushMicrotasks();
  }

  private nextDue(target: number): FakeTimer | undefined {
    let best: FakeTimer | undefined;
    for (const t of this.timers) {
      if (t.cancelled || t.at > target) continue;
      if (best === undefined || t.at < best.at || (t.at === best.at && t.seq < best.seq)) best = t;
    }
    this.timers = this.timers.filter((t) => !t.cancelled);
    return best;
  }
}

/** Lets queued promise continuations run (several turns, for chains of awaits). */
export async function flushMicrotasks(turns = 20): Promise<void> {
  for (let i = 0; i < turns; i++) {
    await Promise.resolve();
  }
  await new Promise<void>((resolve) => setImmediate(resolve));
}
