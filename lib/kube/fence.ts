// Fencing of writes by leadership. A leader's right to write is proved, not remembered: it holds
// for the renew deadline after the start of the last successful Lease renewal, measured on a
// monotonic clock. Other candidates take the Lease only after observing it unrenewed for the
// (longer) lease duration, measured on their own monotonic clocks, so a process that checks the
// fence before every write never writes while another leader may.
//
// What that covers: a process that was stopped (SIGSTOP, a long GC pause, CPU starvation) or cut
// off from the API server finds the fence closed the moment it resumes, before any backlog is
// sent, because the monotonic clock (CLOCK_MONOTONIC, Node's performance.now()) kept counting. What
// it does not cover: a whole machine suspended to memory or disk, or a VM whose guest clock the
// hypervisor stopped while pausing it; CLOCK_MONOTONIC does not advance across a suspend, so such a
// leader resumes believing little time has passed and keeps writing for up to the renew deadline
// while another may lead. Kubernetes writes are still conditional (resourceVersion) there; cloud
// writes are not. Do not run the manager on machines that suspend.

import type { Clock, TimerHandle } from './clock.js';
import { FencedError } from './errors.js';

/** What every writer checks before a write leaves the process. */
export interface WriteFence {
  /** Whether a write may leave the process now. */
  allowed(): boolean;
  /** Throws FencedError (naming `what` and why) unless a write may leave the process now. */
  check(what: string): void;
  /**
   * Aborts when writes stop being allowed: requests waiting for a token or in flight are
   * cancelled with it. A fresh signal after each new grant.
   */
  readonly signal: AbortSignal;
}

/**
 * A fence driven by leader election: granted on each successful renewal, revoked for good when
 * leadership ends. A window that lapsed reopens with the next grant (a late renewal).
 */
export class LeaseFence implements WriteFence {
  /** Monotonic time until which writes are allowed (-Infinity: never granted or revoked). */
  private until = Number.NEGATIVE_INFINITY;
  /** Leadership ended in this process: no grant reopens the fence (see revoke()). */
  private revoked = false;
  private controller = new AbortController();
  private expiry: TimerHandle | undefined;
  private reason = 'this process has not acquired the leader Lease';

  constructor(private readonly clock: Clock) {
    // Nothing is allowed before the first grant: the signal starts aborted.
    this.controller.abort(new FencedError(this.reason, 0, 'Fenced'));
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  allowed(): boolean {
    return this.clock.monotonic() < this.until;
  }

  check(what: string): void {
    if (this.allowed()) return;
    // A deadline that passed while the process was frozen: timers may not have run yet.
    if (this.until !== Number.NEGATIVE_INFINITY)
      this.close('the leader Lease was not renewed within the renew deadline');
    throw new FencedError(`${what}: refused, ${this.reason}`, 0, 'Fenced');
  }

  /**
   * Leadership was proved by a renewal sent at `provedAt` (monotonic): writes are allowed until
   * provedAt + windowMs (the renew deadline).
   */
  grant(provedAt: number, windowMs: number): void {
    if (this.revoked) return;
    const until = provedAt + windowMs;
    if (until <= this.clock.monotonic()) return;
    if (this.controller.signal.aborted) this.controller = new AbortController();
    this.until = Math.max(this.until, until);
    this.expiry?.cancel();
    this.expiry = this.clock.setTimeout(() => {
      if (!this.allowed()) this.close('the leader Lease was not renewed within the renew deadline');
    }, this.until - this.clock.monotonic());
  }

  /**
   * Leadership ended (lost, released or the process is stopping): no write leaves from now on, for
   * good. A process leads at most once (on a loss it exits or stands by), and a grant may still
   * come after the end: a renewal answered after the loss was decided, or the leader Lease renewed
   * once more after the Lease held beside it was lost. Reopening then would let the controllers'
   * wind-down write while another process may already lead.
   */
  revoke(reason: string): void {
    this.revoked = true;
    this.close(reason);
  }

  private close(reason: string): void {
    this.until = Number.NEGATIVE_INFINITY;
    this.expiry?.cancel();
    this.expiry = undefined;
    if (this.controller.signal.aborted) return;
    this.reason = reason;
    this.controller.abort(new FencedError(reason, 0, 'Fenced'));
  }
}
