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
  /** Granted by the leader Lease's renewals, revoked when leadership ends. */
  fence?: LeaseFence | undefined;
  /** Both Leases use it; defaults to "<hostname>_<uuid>". */
  identity?: string;
  /** While true, losing a Lease is part of stopping, not a loss. */
  isStopping: () => boolean;
  /** Every Lease is held: run the controllers. */
  onLead: () => void;
  /** A Lease was lost while leading (not while stopping). */
  onLost: (why: string) => void;
}

/**
 * The leader Lease and, when configured, a second Lease held beside it (the guard): gardener's
 * provider machine-controller (a sidecar left from a switch, or the old pod of a chart upgrade from
 * the sidecar split) campaigns for its own Lease, not ours, so the leader holds that one too before
 * its controllers run and the two never manage the Machines at once. Every replica observes the
 * guard from the start and takes it only once it leads: after a crashed leader's Lease has expired,
 * the one it held beside it has too, and the new leader takes it at once.
 */
export class Leadership {
  private readonly mainAbort = new AbortController();
  private readonly guardAbort = new AbortController();
  private main: Promise<void> | undefined;
  private guard: Promise<void> | undefined;
  private leading = false;

  constructor(private readonly opts: LeadershipOptions) {}

  /** Whether this replica holds the leader Lease (and has not lost a Lease since). */
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
          opts.fence?.revoke(`the ${guard} Lease was lost`);
          this.leading = false;
          opts.onLost(`the ${guard} Lease was lost`);
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
        opts.onLost('leadership lost');
      },
    });
    this.main = elector.run(this.mainAbort.signal);
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
