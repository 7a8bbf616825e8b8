// Client-side pacing of RunInstances per account and region. EC2 throttles per account and region
// (RequestLimitExceeded), and a burst of machines that all retry on their own keeps the bucket
// empty for every other client of the account. After a throttled launch the EC2 client of those
// credentials and that region spaces its launches: the rate starts at EC2's documented refill of
// the RunInstances bucket (2 per second), halves on every further throttle and grows back with
// each launch that goes through, until launches are no longer limited at all (AIMD, as TCP and the
// SDK's adaptive mode do). Before the first throttle nothing is delayed.

import type { Clock } from '../../kube/clock.js';

export interface PacerOptions {
  /** Launches per second right after the first throttle. */
  initialRate: number;
  /** The slowest pace. */
  minRate: number;
  /** Above this pace launches are no longer limited. */
  maxRate: number;
  /** Launches per second added by each launch that went through. */
  increase: number;
}

export const DEFAULT_PACER_OPTIONS: PacerOptions = {
  initialRate: 2,
  minRate: 0.2,
  maxRate: 20,
  increase: 0.1,
};

export class LaunchPacer {
  /** Launches per second; undefined while launches are not limited. */
  private rate: number | undefined;
  /** Monotonic time at which the next launch may go. */
  private next = 0;

  constructor(
    private readonly clock: Clock,
    private readonly opts: PacerOptions = DEFAULT_PACER_OPTIONS,
  ) {}

  /** The current pace in launches per second (undefined: not limited). */
  get pace(): number | undefined {
    return this.rate;
  }

  /** Waits for this launch's turn (at once while not limited); rejects when the signal aborts. */
  async turn(signal?: AbortSignal): Promise<void> {
    if (this.rate === undefined) return;
    const now = this.clock.monotonic();
    const at = Math.max(now, this.next);
    this.next = at + 1000 / this.rate;
    if (at > now) await this.clock.sleep(at - now, signal);
  }

  /** EC2 throttled a launch. */
  throttled(): void {
    this.rate = this.rate === undefined ? this.opts.initialRate : Math.max(this.opts.minRate, this.rate / 2);
  }

  /** A launch went through. */
  succeeded(): void {
    if (this.rate === undefined) return;
    this.rate += this.opts.increase;
    if (this.rate >= this.opts.maxRate) {
      this.rate = undefined;
      this.next = 0;
    }
  }
}
