import type { Clock } from './clock.js';

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor?: number;
  /** Adds up to this fraction of the delay at random (0.5 = up to +50%). */
  jitter?: number;
  /** A backoff left unused this long starts again from initialMs. */
  resetAfterMs?: number;
  clock?: Clock;
  random?: () => number;
}

/** Exponential backoff with jitter, for reconnect loops (watch, leader election). */
export class Backoff {
  private current: number;
  private lastUsed = 0;

  constructor(private readonly opts: BackoffOptions) {
    this.current = opts.initialMs;
  }

  /** The next delay in milliseconds. */
  next(): number {
    const now = this.opts.clock?.now() ?? Date.now();
    if (
      this.opts.resetAfterMs !== undefined &&
      this.lastUsed !== 0 &&
      now - this.lastUsed > this.opts.resetAfterMs
    ) {
      this.current = this.opts.initialMs;
    }
    this.lastUsed = now;
    const base = this.current;
    this.current = Math.min(this.opts.maxMs, base * (this.opts.factor ?? 2));
    const jitter = this.opts.jitter ?? 0;
    const rnd = this.opts.random ?? Math.random;
    return Math.min(this.opts.maxMs * (1 + jitter), base + base * jitter * rnd());
  }

  reset(): void {
    this.current = this.opts.initialMs;
    this.lastUsed = 0;
  }
}
