import type { Logger } from '../observability/logger.js';
import type { Clock } from './clock.js';

export interface OutageLogOptions {
  /** What fails, for the log lines: "list/watch", "API requests". */
  what: string;
  log: Logger;
  clock: Clock;
  /** Consecutive failures that make an outage worth a warning (one failure is routine). */
  threshold?: number;
  /** While the outage lasts, the warning is repeated this often. */
  repeatMs?: number;
}

export const DEFAULT_OUTAGE_THRESHOLD = 2;
export const DEFAULT_OUTAGE_REPEAT_MS = 60_000;

/**
 * Turns a stream of successes and failures of one kind of call into log lines an operator can
 * act on: a warning once failures repeat (and again every repeatMs while they continue), one
 * info line when a call succeeds again (how long it failed, how many times). A single failure
 * followed by success, which watches and busy servers produce routinely, is left to the caller's
 * verbose logging.
 */
export class OutageLog {
  private failures = 0;
  private since = 0;
  private warnedAt: number | undefined;

  constructor(private readonly opts: OutageLogOptions) {}

  failure(err: unknown): void {
    const now = this.opts.clock.now();
    if (this.failures === 0) this.since = now;
    this.failures++;
    const threshold = this.opts.threshold ?? DEFAULT_OUTAGE_THRESHOLD;
    if (this.failures < threshold) return;
    const repeat = this.opts.repeatMs ?? DEFAULT_OUTAGE_REPEAT_MS;
    if (this.warnedAt !== undefined && now - this.warnedAt < repeat) return;
    this.warnedAt = now;
    this.opts.log.warn(`${this.opts.what} failing repeatedly`, {
      failures: this.failures,
      failingForMs: now - this.since,
      err,
    });
  }

  success(): void {
    if (this.failures === 0) return;
    if (this.warnedAt !== undefined) {
      this.opts.log.info(`${this.opts.what} recovered`, {
        failures: this.failures,
        outageMs: this.opts.clock.now() - this.since,
      });
    }
    this.failures = 0;
    this.warnedAt = undefined;
  }

  /** Whether failures are being reported as an outage right now. */
  inOutage(): boolean {
    return this.warnedAt !== undefined;
  }
}
