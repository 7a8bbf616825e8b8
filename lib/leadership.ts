import type { Clock } from './kube/clock.js';
import type { LeaseFence } from './kube/fence.js';
import {
  DEFAULT_LEASE_DURATION_MS,
  DEFAULT_RETRY_PERIOD_MS,
  LeaderElector,
  defaultIdentity,
  type LeaderElectionOptions,
} from './kube/leaderelection.js';

/** What both Leases share: the client, namespace, timing, logger, metrics and events. */
export type LeaseSettings = Omit<
  LeaderElectionOptions,
  | 'name'
  | 'identity'
  | 'fence'
  | 'clock'
  | 'onStartedLeading'
  | 'onStoppedLeading'
  | 'onNewLeader'
  | 'mayAcquire'
  | 'releaseOnCancel'
>;

export interface LeadershipOptions {
  lease: LeaseSettings;
  clock: Clock;
  /** The leader Lease (--leader-elect-resource-name). */
  leaseName: string;
  /**
   * A second Lease the leader holds before it leads (gardener's provider machine-controller's,
   * --machine-controller-lease-name); undefined: none.
   */
  guardLeaseName?: string | undefined;
  /** Granted by the leader Lease's renewals, revoked for good when leadership ends. */
  fence?: LeaseFence | undefined;
  /** Both Leases use it; defaults to "<hostname>_<uuid>". */
  identity?: string;
  /** While true, losing a Lease is part of stopping, not a loss. */
  isStopping: () => boolean;
  /** Every Lease is held: run the controllers. */
  onLead: () => void;
  /**
   * A Lease was lost while leading (not while stopping); called once. Both elections have ended by
   * then: the replica exits, or stands by for good.
   */
  onLost: (why: string) => void;
}

/**
 * The leader Lease and, when configured, a second Lease held beside it (the guard): gardener's
 * provider machine-controller (a sidecar left from a switch, or the old pod of a chart upgrade from
 * the sidecar split) campaigns for its own Lease, not ours, so the leader holds that one too before
 * its controllers run and the two never manage the Machines at once. Every replica observes the
 * guard from the start and takes it only once it leads: after a crashed leader's Lease has expired,
 * the one it held beside it has too, and the new leader takes it at once.
 *
 * Losing either Lease ends both elections for good, the same way: the fence is revoked (and stays
 * closed), the other Lease is released if it is still ours (so another replica leads without
 * waiting for it to expire), and this replica never campaigns again.
 */
export class Leadership {
  private readonly mainAbort = new AbortController();
  private readonly guardAbort = new AbortController();
  private main: Promise<void> | undefined;
  private guard: Promise<void> | undefined;
  private leading = false;
  /** A Lease was lost: neither is renewed or taken again in this process. */
  private ended = false;

  constructor(private readonly opts: LeadershipOptions) {}

  /** Whether this replica holds the leader Lease (false for good once it lost a Lease). */
  isLeading(): boolean {
    return this.leading;
  }

  start(): void {
    const { opts } = this;
    const identity = opts.identity ?? defaultIdentity();
    const settings = { ...opts.lease, clock: opts.clock, identity };
    const guard = opts.guardLeaseName;
    let guardElector: LeaderElector | undefined;
    if (guard !== undefined) {
      guardElector = new LeaderElector({
        ...settings,
        name: guard,
        mayAcquire: () => this.leading && !opts.isStopping(),
        onStartedLeading: () => {
          if (!this.leading || opts.isStopping()) return;
          opts.onLead();
        },
        onStoppedLeading: () => {
          if (opts.isStopping() || !this.leading) return;
          this.end(`the ${guard} Lease was lost`);
        },
      });
      this.guard = guardElector.run(this.guardAbort.signal);
    }
    const elector = new LeaderElector({
      ...settings,
      fence: opts.fence,
      name: opts.leaseName,
      onStartedLeading: () => {
        this.leading = true;
        if (guardElector === undefined) {
          opts.onLead();
          return;
        }
        guardElector.nudge();
        this.warnWhileGuardHeldElsewhere(guardElector);
      },
      onStoppedLeading: () => {
        this.leading = false;
        this.guardAbort.abort();
        if (opts.isStopping()) return;
        this.end('leadership lost');
      },
    });
    this.main = elector.run(this.mainAbort.signal);
  }

  /**
   * A Lease was lost. The fence closes first and for good: the leader Lease's elector may still
   * grant it (a renewal in flight), and without this its next renewals would too, during the
   * wind-down. Then both elections end: cancelled, each elector releases its Lease if it still
   * holds it (a conditional update, so never one another replica has taken meanwhile).
   */
  /** Ends leadership from the outside (the leader cannot run what it leads for): as on a loss. */
  resign(why: string): void {
    this.end(why);
  }

  private end(why: string): void {
    if (this.ended) return;
    this.ended = true;
    this.leading = false;
    this.opts.fence?.revoke(why);
    this.guardAbort.abort();
    this.mainAbort.abort();
    this.opts.onLost(why);
  }

  /** Gives both Leases up (releasing them), the guard first. */
  async stop(): Promise<void> {
    this.guardAbort.abort();
    await this.guard;
    this.mainAbort.abort();
    await this.main;
  }

  /** Still waiting after a lease duration and a retry: someone else holds the guard and renews. */
  private warnWhileGuardHeldElsewhere(guardElector: LeaderElector): void {
    const { opts } = this;
    const waitMs =
      (opts.lease.leaseDurationMs ?? DEFAULT_LEASE_DURATION_MS) +
      2 * (opts.lease.retryPeriodMs ?? DEFAULT_RETRY_PERIOD_MS);
    void opts.clock.sleep(waitMs, this.mainAbort.signal).then(
      () => {
        if (this.leading && !opts.isStopping() && !guardElector.isLeader()) {
          opts.lease.logger.warn(
            'another machine-controller holds its Lease (gardener’s provider machine-controller?): the controllers wait until it lets go',
            { lease: `${opts.lease.namespace}/${opts.guardLeaseName ?? ''}`, holder: guardElector.holder() },
          );
        }
      },
      () => undefined,
    );
  }
}
