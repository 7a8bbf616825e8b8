import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

import { Gauge, type Registry } from 'prom-client';

import type { Lease } from './types.js';
import type { Logger } from '../observability/logger.js';
import type { KubeApi } from './client.js';
import { RealClock, type Clock } from './clock.js';
import { isAlreadyExists, isConflict, isNotFound } from './errors.js';
import type { EventRecorder } from './events.js';
import type { LeaseFence } from './fence.js';
import { CoreResources } from './resources.js';
import { linkSignals } from './signals.js';

export interface LeaderElectionOptions {
  client: KubeApi;
  namespace: string;
  /** Lease name, e.g. "machine-controller-manager". */
  name: string;
  /** Unique per process; defaults to "<hostname>_<uuid>". */
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Give the Lease up when run() is cancelled, so another candidate takes over at once. */
  releaseOnCancel?: boolean;
  /**
   * Granted for the renew deadline after each successful acquisition or renewal (from when it was
   * sent, on the monotonic clock), revoked (for good) when leadership ends: the process's writers
   * check it.
   */
  fence?: LeaseFence | undefined;
  clock?: Clock;
  logger: Logger;
  registry?: Registry;
  recorder?: EventRecorder;
  /** Called once leadership is acquired; the signal aborts when it is lost or given up. */
  onStartedLeading: (signal: AbortSignal) => void;
  /** Called when leadership ends (lost, or released on cancel). */
  onStoppedLeading: () => void;
  /** Called whenever the observed leader changes (including to ourselves). */
  onNewLeader?: (identity: string) => void;
  /**
   * Whether this candidate may take the Lease now (default: always). While it may not, it only
   * observes the Lease, so that once it may, a holder that stopped renewing long ago is replaced
   * at once instead of after a lease duration of observing; nudge() ends the wait between attempts.
   */
  mayAcquire?: () => boolean;
}

/** Defaults of gardener MCM (and client-go components). */
export const DEFAULT_LEASE_DURATION_MS = 15_000;
export const DEFAULT_RENEW_DEADLINE_MS = 10_000;
export const DEFAULT_RETRY_PERIOD_MS = 2_000;

export function defaultIdentity(): string {
  return `${hostname()}_${randomUUID()}`;
}

/** RFC 3339 with microseconds, the MicroTime format Lease times use. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, '000Z');
}

const statusByRegistry = new WeakMap<Registry, Gauge<'name'>>();

/**
 * Lease-based leader election with client-go's algorithm: a candidate takes the Lease when it is
 * free or its holder has not renewed it for leaseDuration (measured on the local monotonic clock
 * from when the record last changed, so neither clock skew between nodes nor a step of the local
 * wall clock matters); the leader renews every retryPeriod and gives up when it could not renew for
 * renewDeadline. Every duration is monotonic, as the leader's fence is; the wall clock only fills
 * the Lease's time fields. Every write is conditional on the Lease's resourceVersion.
 */
export class LeaderElector {
  readonly identity: string;
  private readonly clock: Clock;
  private readonly leaseDuration: number;
  private readonly renewDeadline: number;
  private readonly retryPeriod: number;
  private readonly log: Logger;
  private readonly status: Gauge<'name'> | undefined;
  /** The Lease as last read, and when (monotonic) its record was first seen in this form. */
  private observed: { record: string; at: number; lease: Lease } | undefined;
  private leading = false;
  private lastLeader = '';
  /** Monotonic time at which the last successful acquisition or renewal was sent. */
  private provedAt = 0;
  /** Ends the current wait between two attempts to acquire (see nudge()). */
  private wake: AbortController | undefined;

  constructor(private readonly opts: LeaderElectionOptions) {
    this.identity = opts.identity ?? defaultIdentity();
    this.clock = opts.clock ?? new RealClock();
    this.leaseDuration = opts.leaseDurationMs ?? DEFAULT_LEASE_DURATION_MS;
    this.renewDeadline = opts.renewDeadlineMs ?? DEFAULT_RENEW_DEADLINE_MS;
    this.retryPeriod = opts.retryPeriodMs ?? DEFAULT_RETRY_PERIOD_MS;
    if (this.leaseDuration <= this.renewDeadline) {
      throw new Error('leader election: lease duration must be greater than the renew deadline');
    }
    if (this.renewDeadline <= this.retryPeriod * 1.2) {
      throw new Error('leader election: renew deadline must be greater than 1.2 x the retry period');
    }
    this.log = opts.logger.child({ lease: `${opts.namespace}/${opts.name}`, identity: this.identity });
    if (opts.registry !== undefined) {
      let g = statusByRegistry.get(opts.registry);
      if (g === undefined) {
        g = new Gauge({
          name: 'leader_election_master_status',
          help: '1 while this process holds the leader Lease, else 0.',
          labelNames: ['name'],
          registers: [opts.registry],
        });
        statusByRegistry.set(opts.registry, g);
      }
      this.status = g;
      g.set({ name: opts.name }, 0);
    }
  }

  isLeader(): boolean {
    return this.leading;
  }

  /** The holder of the Lease as last read ('' when free or not read yet). */
  holder(): string {
    return this.observedHolder();
  }

  /** Tries to acquire at once instead of after the current wait (mayAcquire() just turned true). */
  nudge(): void {
    this.wake?.abort();
  }

  /**
   * Campaigns until leader, leads until leadership is lost or the signal aborts, then returns.
   * Callers that must not run without leadership exit the process when this returns.
   */
  async run(signal: AbortSignal): Promise<void> {
    const acquired = await this.acquire(signal);
    if (!acquired) return;
    const leaderAbort = new AbortController();
    this.setLeading(true);
    this.log.info('acquired leadership');
    this.opts.recorder?.event(
      this.observed?.lease ?? this.leaseStub(),
      'Normal',
      'LeaderElection',
      `${this.identity} became leader`,
    );
    try {
      this.opts.onStartedLeading(leaderAbort.signal);
    } catch (err) {
      this.log.error('onStartedLeading failed', { err });
    }
    await this.renewLoop(signal);
    // No write may leave from here on, before another candidate can take the Lease.
    this.opts.fence?.revoke(signal.aborted ? 'leadership was given up' : 'leadership was lost');
    this.setLeading(false);
    leaderAbort.abort();
    if (signal.aborted && this.opts.releaseOnCancel !== false) await this.release();
    try {
      this.opts.onStoppedLeading();
    } catch (err) {
      this.log.error('onStoppedLeading failed', { err });
    }
  }

  private setLeading(v: boolean): void {
    this.leading = v;
    this.status?.set({ name: this.opts.name }, v ? 1 : 0);
  }

  private leaseStub(): Lease {
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: this.opts.name, namespace: this.opts.namespace },
    };
  }

  private async sleep(ms: number, signal: AbortSignal): Promise<boolean> {
    try {
      await this.clock.sleep(ms, signal);
      return true;
    } catch {
      return false;
    }
  }

  private async acquire(signal: AbortSignal): Promise<boolean> {
    this.log.info('attempting to acquire leader lease');
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew(signal)) {
        this.opts.fence?.grant(this.provedAt, this.renewDeadline);
        return true;
      }
      // Retry every (jittered) retry period, but wake up right when the current holder's lease
      // runs out so that a crashed leader is replaced without an extra period of waiting.
      let delay = this.retryPeriod * (1 + 0.2 * Math.random());
      const expiresIn = this.expiresInMs();
      if (expiresIn !== undefined && expiresIn >= 0 && expiresIn < delay) delay = expiresIn + 10;
      this.wake = new AbortController();
      const linked = linkSignals(signal, this.wake.signal);
      await this.sleep(delay, linked.signal);
      linked.dispose();
      this.wake = undefined;
    }
    return false;
  }

  private async renewLoop(signal: AbortSignal): Promise<void> {
    // Measured on the monotonic clock, like the fence: a wall-clock jump neither ends nor extends it.
    let lastRenew = this.provedAt;
    while (!signal.aborted) {
      if (!(await this.sleep(this.retryPeriod, signal))) return;
      let ok = false;
      try {
        // A renew that hangs must not outlive the deadline.
        const linked = linkSignals(signal, AbortSignal.timeout(this.renewDeadline));
        ok = await this.tryAcquireOrRenew(linked.signal).finally(linked.dispose);
      } catch (err) {
        this.log.warn('renewing the lease failed', { err });
      }
      const now = this.clock.monotonic();
      if (ok) {
        lastRenew = this.provedAt;
        this.opts.fence?.grant(this.provedAt, this.renewDeadline);
      } else if (now - lastRenew >= this.renewDeadline || this.observedHolder() !== this.identity) {
        this.log.error('leadership lost', {
          lastRenewMsAgo: Math.round(now - lastRenew),
          holder: this.observedHolder(),
        });
        return;
      }
    }
  }

  /** Milliseconds until the observed holder's lease expires (undefined when nobody holds it). */
  private expiresInMs(): number | undefined {
    const o = this.observed;
    const holder = o?.lease.spec?.holderIdentity ?? '';
    if (o === undefined || holder === '') return undefined;
    const duration = (o.lease.spec?.leaseDurationSeconds ?? this.leaseDuration / 1000) * 1000;
    return o.at + duration - this.clock.monotonic();
  }

  private observedHolder(): string {
    return this.observed?.lease.spec?.holderIdentity ?? '';
  }

  private observe(lease: Lease): void {
    const spec = lease.spec ?? {};
    const record = JSON.stringify([spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds]);
    if (this.observed?.record !== record) {
      this.observed = { record, at: this.clock.monotonic(), lease };
    } else {
      this.observed = { ...this.observed, lease };
    }
    const holder = spec.holderIdentity ?? '';
    if (holder !== this.lastLeader && holder !== '') {
      this.lastLeader = holder;
      this.log.info('new leader observed', { leader: holder });
      this.opts.onNewLeader?.(holder);
    }
  }

  /** One attempt; true when we hold the Lease afterwards. Errors count as "not acquired". */
  private async tryAcquireOrRenew(signal?: AbortSignal): Promise<boolean> {
    // Leadership is proved from when the attempt started: the Lease it writes can only look fresher
    // to the other candidates, who time it from when they observe the change.
    const startedAt = this.clock.monotonic();
    const now = this.clock.now();
    const leaseSeconds = Math.ceil(this.leaseDuration / 1000);
    let current: Lease;
    try {
      current = await this.opts.client.get<Lease>(
        CoreResources.leases,
        this.opts.name,
        this.opts.namespace,
        signal,
      );
    } catch (err) {
      if (!isNotFound(err)) {
        this.log.debug('reading the lease failed', { err });
        return false;
      }
      if (this.opts.mayAcquire?.() === false) return false;
      const lease: Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.opts.name, namespace: this.opts.namespace },
        spec: {
          holderIdentity: this.identity,
          leaseDurationSeconds: leaseSeconds,
          acquireTime: microTime(now),
          renewTime: microTime(now),
          leaseTransitions: 0,
        },
      };
      try {
        const created = await this.opts.client.create(CoreResources.leases, lease, signal ? { signal } : {});
        this.observe(created);
        this.provedAt = startedAt;
        return true;
      } catch (createErr) {
        if (!isAlreadyExists(createErr)) this.log.debug('creating the lease failed', { err: createErr });
        return false;
      }
    }
    this.observe(current);
    const spec = current.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const heldByOther = holder !== '' && holder !== this.identity;
    const duration = (spec.leaseDurationSeconds ?? leaseSeconds) * 1000;
    const observedAt = this.observed?.at ?? this.clock.monotonic();
    if (heldByOther && observedAt + duration > this.clock.monotonic()) return false;
    if (holder !== this.identity && this.opts.mayAcquire?.() === false) return false;

    const next: Lease = structuredClone(current);
    const transitions = spec.leaseTransitions ?? 0;
    next.spec = {
      holderIdentity: this.identity,
      leaseDurationSeconds: leaseSeconds,
      renewTime: microTime(now),
      acquireTime: holder === this.identity ? (spec.acquireTime ?? microTime(now)) : microTime(now),
      leaseTransitions: holder === this.identity ? transitions : transitions + 1,
    };
    try {
      const updated = await this.opts.client.update(CoreResources.leases, next, signal ? { signal } : {});
      this.observe(updated);
      this.provedAt = startedAt;
      return true;
    } catch (err) {
      if (!isConflict(err)) this.log.debug('updating the lease failed', { err });
      return false;
    }
  }

  /** Empties the holder so the next candidate does not have to wait for the lease to expire. */
  private async release(): Promise<void> {
    const lease = this.observed?.lease;
    if (lease?.spec?.holderIdentity !== this.identity) return;
    const next: Lease = structuredClone(lease);
    const now = microTime(this.clock.now());
    next.spec = {
      holderIdentity: '',
      leaseDurationSeconds: 1,
      acquireTime: now,
      renewTime: now,
      leaseTransitions: lease.spec.leaseTransitions ?? 0,
    };
    try {
      await this.opts.client.update(CoreResources.leases, next);
      this.log.info('released leader lease');
    } catch (err) {
      this.log.warn('releasing the lease failed; it expires on its own', { err });
    }
  }
}
