import { RealClock, type Clock } from './clock.js';

/**
 * Decides how long an item waits before it is retried (client-go `workqueue.RateLimiter`).
 * Delays are in milliseconds.
 */
export interface RateLimiter<T> {
  /** Delay before the item may be processed again; counts as one more requeue of the item. */
  when(item: T): number;
  /** Stops tracking the item (its failures are over, e.g. it reconciled successfully). */
  forget(item: T): void;
  /** How many times the item has been requeued since it was last forgotten. */
  numRequeues(item: T): number;
}

/** Per-item exponential backoff: the n-th failure (from 0) waits baseMs * 2^n, capped at maxMs. */
export class ItemExponentialFailureRateLimiter<T> implements RateLimiter<T> {
  private readonly failures = new Map<T, number>();

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
  ) {
    if (!(baseMs >= 0) || !(maxMs >= 0)) throw new RangeError('backoff base and max must be >= 0');
  }

  when(item: T): number {
    const n = this.failures.get(item) ?? 0;
    this.failures.set(item, n + 1);
    // A zero base would make 0 * 2^n NaN once 2^n overflows to Infinity.
    if (this.baseMs === 0) return 0;
    const delay = this.baseMs * 2 ** n;
    return delay < this.maxMs ? delay : this.maxMs;
  }

  forget(item: T): void {
    this.failures.delete(item);
  }

  numRequeues(item: T): number {
    return this.failures.get(item) ?? 0;
  }
}

/**
 * A token bucket: holds up to `burst` tokens and refills at `qps` tokens per second. It starts full.
 * Reservations may drive the balance negative; a negative balance is the queue of callers already
 * promised a future token, so every reservation gets its own slot in time.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;
  /** Time at which the most recently reserved token becomes available. */
  private lastGrant: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly clock: Clock = new RealClock(),
  ) {
    if (!(qps > 0)) throw new RangeError(`token bucket qps must be > 0, got ${qps}`);
    if (!Number.isInteger(burst) || burst < 1) {
      throw new RangeError(`token bucket burst must be an integer >= 1, got ${burst}`);
    }
    this.tokens = burst;
    this.last = clock.now();
    this.lastGrant = this.last;
  }

  /**
   * Takes one token, possibly from the future, and returns how many milliseconds the caller must
   * wait before using it (0 when a token is available now).
   */
  reserve(): number {
    if (this.qps === Infinity) return 0;
    const now = this.refill();
    this.tokens -= 1;
    const delay = this.tokens >= 0 ? 0 : (-this.tokens * 1000) / this.qps;
    this.lastGrant = Math.max(this.lastGrant, now + delay);
    return delay;
  }

  /** Takes a token only if one is available now; never reserves a future one. */
  tryTake(): boolean {
    if (this.qps === Infinity) return true;
    this.refill();
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /**
   * Waits until a token is available. If the signal aborts first, the reservation is returned to
   * the bucket (as far as later reservations do not depend on it) and the promise rejects with the
   * signal's reason.
   */
  async take(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    const delay = this.reserve();
    if (delay <= 0) return;
    const grantAt = this.clock.now() + delay;
    try {
      await this.clock.sleep(delay, signal);
    } catch (err) {
      this.cancel(grantAt);
      throw err;
    }
  }

  private refill(): number {
    const now = this.clock.now();
    // Wall clocks can step backwards; never take tokens away because of that.
    const elapsed = Math.max(0, now - this.last);
    this.tokens = Math.min(this.burst, this.tokens + (elapsed * this.qps) / 1000);
    this.last = Math.max(this.last, now);
    return now;
  }

  /**
   * Gives back a reservation that will not be used. Reservations made after it were scheduled
   * behind it, so only the part of the token that none of them relies on is restored; restoring
   * all of it would let two later callers share one slot and exceed the rate.
   */
  private cancel(grantAt: number): void {
    const now = this.refill();
    if (grantAt <= now) return;
    const restore = Math.min(1, 1 - ((this.lastGrant - grantAt) * this.qps) / 1000);
    if (restore <= 0) return;
    this.tokens = Math.min(this.burst, this.tokens + restore);
    if (grantAt === this.lastGrant) this.lastGrant = Math.max(now, grantAt - 1000 / this.qps);
  }
}

/** Limits all items together to qps per second with the given burst; per-item state is not kept. */
export class BucketRateLimiter<T> implements RateLimiter<T> {
  private readonly bucket: TokenBucket;

  constructor(qps: number, burst: number, clock: Clock = new RealClock()) {
    this.bucket = new TokenBucket(qps, burst, clock);
  }

  when(_item: T): number {
    return this.bucket.reserve();
  }

  forget(_item: T): void {
    // The bucket is shared by all items; there is nothing per item to reset.
  }

  numRequeues(_item: T): number {
    return 0;
  }
}

/** Combines limiters: the longest delay wins and every limiter sees every call. */
export class MaxOfRateLimiter<T> implements RateLimiter<T> {
  private readonly limiters: readonly RateLimiter<T>[];

  constructor(...limiters: RateLimiter<T>[]) {
    if (limiters.length === 0) throw new RangeError('MaxOfRateLimiter needs at least one limiter');
    this.limiters = limiters;
  }

  when(item: T): number {
    let delay = 0;
    // Every limiter must record the call (failure counts, bucket reservations), so no short-circuit.
    for (const l of this.limiters) delay = Math.max(delay, l.when(item));
    return delay;
  }

  forget(item: T): void {
    for (const l of this.limiters) l.forget(item);
  }

  numRequeues(item: T): number {
    let n = 0;
    for (const l of this.limiters) n = Math.max(n, l.numRequeues(item));
    return n;
  }
}

/**
 * client-go's DefaultControllerRateLimiter: per-item backoff from 5 ms to 1000 s, and an overall
 * 10 qps / burst 100 bucket so that a mass failure cannot turn into a retry storm.
 */
export function defaultControllerRateLimiter<T>(clock: Clock = new RealClock()): RateLimiter<T> {
  return new MaxOfRateLimiter<T>(
    new ItemExponentialFailureRateLimiter<T>(5, 1000 * 1000),
    new BucketRateLimiter<T>(10, 100, clock),
  );
}
