// Spot prices, per availability zone and instance type, as EC2's DescribeSpotPriceHistory last
// gave them. Fetched in the background only: the autoscaler's price calls read what is here.
//
// A zone name means another physical zone in another account, so prices are kept per credentials
// and region (a "target"), for the instance types of the spot classes seen with them. The provider
// sees a class's credentials in the driver calls the manager makes anyway (CreateMachine,
// GetMachineStatus, and the orphan collection's ListMachines of every class, at start and then
// every --machine-safety-orphan-vms-period), so a class without machines is seen too.
//
// Each target is refreshed every REFRESH_MS; a new target or instance type soon after it is seen; a
// failure after a jittered backoff (the old prices stay meanwhile). These are reads: no leader
// fence applies. Records are filtered to Linux here: the emulator ignores the request's product
// descriptions and calls its records "Linux/UNIX (Amazon VPC)".

import type { _InstanceType, SpotPrice } from '@aws-sdk/client-ec2';
import { Counter, type Registry } from 'prom-client';

import type { Clock, TimerHandle } from '../../../kube/clock.js';
import type { Logger } from '../../../observability/logger.js';
import type { Ec2Api, Ec2ApiFactory } from '../client.js';
import { credentialsFingerprint, type AwsCredentials } from '../credentials.js';
import { toMachineError } from '../errors.js';

/** Between two successful refreshes of a target. */
const REFRESH_MS = 10 * 60_000;
/** After a new target or instance type is seen: one refresh for a burst of driver calls. */
const SOON_MS = 2_000;
/** The first pause after a failed refresh, doubled each time up to REFRESH_MS. */
const BACKOFF_MS = 30_000;
/** An instance type (and a class) no driver call mentioned for this long is no longer asked about. */
const FORGET_MS = 24 * 60 * 60_000;
/** Pages of one refresh, at most (EC2 gives up to 1000 records a page). */
const MAX_PAGES = 50;
const LINUX = ['Linux/UNIX', 'Linux/UNIX (Amazon VPC)'];
const LINUX_SET: ReadonlySet<string> = new Set(LINUX);

export type SpotLookup =
  | { kind: 'priced'; price: number; source: string }
  /** Nothing to answer from yet: no driver call for the class, or no successful refresh. */
  | { kind: 'pending'; why: string }
  /** The last successful refresh had no record for that type in that zone. */
  | { kind: 'no-record'; why: string };

interface SpotRecord {
  price: number;
  source: string;
}

interface Target {
  /** An opaque name for logs: the credentials never appear. */
  readonly name: string;
  readonly region: string;
  readonly credentials: AwsCredentials;
  /** Instance types to price, with when a driver call last mentioned each (monotonic ms). */
  readonly types: Map<string, number>;
  /** The classes seen with these credentials (for logs). */
  readonly classes: Set<string>;
  api: Ec2Api | undefined;
  /** By `<zone>/<type>`, from the last successful refresh; undefined before the first. */
  prices: ReadonlyMap<string, SpotRecord> | undefined;
  /** The types the last successful refresh asked for. */
  pricedTypes: ReadonlySet<string>;
  failures: number;
  timer: TimerHandle | undefined;
  /** When the timer fires (monotonic ms). */
  dueAt: number;
  running: boolean;
  /** A new type was seen while a refresh ran: another one follows soon. */
  dirty: boolean;
}

const refreshCounters = new WeakMap<Registry, Counter<'result'>>();

function refreshCounter(registry: Registry): Counter<'result'> {
  let c = refreshCounters.get(registry);
  if (c === undefined) {
    c = new Counter({
      name: 'mcm_autoscaler_price_aws_spot_refreshes_total',
      help: 'Background refreshes of AWS spot prices (DescribeSpotPriceHistory, per credentials and region), by result.',
      labelNames: ['result'],
      registers: [registry],
    });
    refreshCounters.set(registry, c);
  }
  return c;
}

export interface SpotPriceCacheOptions {
  ec2: Ec2ApiFactory;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Between two successful refreshes (default 10 min, jittered ±20%). */
  refreshMs?: number;
  /** From a new target or type to its refresh (default 2 s). */
  soonMs?: number;
  /** The first pause after a failure (default 30 s), doubled up to refreshMs, jittered ±20%. */
  backoffMs?: number;
  /** [0, 1) for the jitter (default Math.random). */
  random?: () => number;
}

export class SpotPriceCache {
  private readonly targets = new Map<string, Target>();
  /** The target of each spot class (`namespace/name`) as its last driver call showed it. */
  private readonly classes = new Map<string, { target: Target; seenAt: number }>();
  private readonly running = new Set<Promise<void>>();
  private readonly abort = new AbortController();
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly refreshes: Counter<'result'>;
  private readonly refreshMs: number;
  private readonly soonMs: number;
  private readonly backoffMs: number;
  private readonly random: () => number;
  private started = false;
  private stopped = false;
  private named = 0;

  constructor(private readonly opts: SpotPriceCacheOptions) {
    this.clock = opts.clock;
    this.log = opts.logger;
    this.refreshes = refreshCounter(opts.registry);
    this.refreshMs = opts.refreshMs ?? REFRESH_MS;
    this.soonMs = opts.soonMs ?? SOON_MS;
    this.backoffMs = opts.backoffMs ?? BACKOFF_MS;
    this.random = opts.random ?? Math.random;
  }

  /**
   * A driver call for a spot class: its instance type is to be priced with these credentials in
   * this region. Cheap (no call made here); a new target or type is refreshed soon.
   */
  observe(classKey: string, region: string, credentials: AwsCredentials, instanceType: string): void {
    if (this.stopped || region === '' || instanceType === '') return;
    const key = credentialsFingerprint(region, credentials);
    let t = this.targets.get(key);
    if (t === undefined) {
      t = {
        name: `credentials #${++this.named} in ${region}`,
        region,
        credentials,
        types: new Map(),
        classes: new Set(),
        api: undefined,
        prices: undefined,
        pricedTypes: new Set(),
        failures: 0,
        timer: undefined,
        dueAt: Infinity,
        running: false,
        dirty: false,
      };
      this.targets.set(key, t);
    }
    const now = this.clock.monotonic();
    const fresh = !t.types.has(instanceType);
    t.types.set(instanceType, now);
    const before = this.classes.get(classKey);
    if (before !== undefined && before.target !== t) before.target.classes.delete(classKey);
    t.classes.add(classKey);
    this.classes.set(classKey, { target: t, seenAt: now });
    if (fresh) this.expedite(t);
  }

  /** The spot price of a type in a zone for a class, from memory. */
  price(classKey: string, zone: string, instanceType: string): SpotLookup {
    const c = this.classes.get(classKey);
    if (c === undefined) {
      return { kind: 'pending', why: `no driver call for class ${classKey} has shown its credentials yet` };
    }
    const t = c.target;
    if (t.prices === undefined) {
      return { kind: 'pending', why: 'no DescribeSpotPriceHistory answer yet' };
    }
    if (!t.pricedTypes.has(instanceType)) {
      return { kind: 'pending', why: `${instanceType} was not asked of DescribeSpotPriceHistory yet` };
    }
    const r = t.prices.get(`${zone}/${instanceType}`);
    if (r === undefined) {
      return {
        kind: 'no-record',
        why: `DescribeSpotPriceHistory has no Linux price of ${instanceType} in ${zone}`,
      };
    }
    return { kind: 'priced', price: r.price, source: r.source };
  }

  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    for (const t of this.targets.values()) this.schedule(t, this.soonMs);
  }

  /** Stops the refreshes: cancels the timers, aborts the calls under way and waits for them. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort(new Error('the spot price cache is stopped'));
    for (const t of this.targets.values()) t.timer?.cancel();
    await Promise.allSettled([...this.running]);
    for (const t of this.targets.values()) t.api?.destroy();
    this.targets.clear();
    this.classes.clear();
  }

  /** A new type or target: refreshed soon, unless a backoff runs (its refresh will include it). */
  private expedite(t: Target): void {
    if (!this.started || t.failures > 0) return;
    if (t.running) {
      t.dirty = true;
      return;
    }
    if (t.dueAt > this.clock.monotonic() + this.soonMs) this.schedule(t, this.soonMs);
  }

  private schedule(t: Target, ms: number): void {
    if (this.stopped) return;
    t.timer?.cancel();
    t.dueAt = this.clock.monotonic() + ms;
    t.timer = this.clock.setTimeout(() => {
      t.timer = undefined;
      t.dueAt = Infinity;
      if (this.stopped) return;
      // From here on a new type needs another refresh after this one.
      t.dirty = false;
      const run = this.refresh(t).catch((err: unknown) => {
        this.log.error('refreshing AWS spot prices failed unexpectedly', { target: t.name, err });
      });
      this.running.add(run);
      void run.then(() => this.running.delete(run));
    }, ms);
  }

  private jittered(ms: number): number {
    return Math.round(ms * (0.8 + 0.4 * this.random()));
  }

  /** Drops the types and classes no driver call mentioned for FORGET_MS; false when none is left. */
  private prune(t: Target): boolean {
    const now = this.clock.monotonic();
    for (const [type, seenAt] of t.types) if (now - seenAt > FORGET_MS) t.types.delete(type);
    for (const [key, c] of this.classes) {
      if (now - c.seenAt > FORGET_MS) {
        this.classes.delete(key);
        c.target.classes.delete(key);
      }
    }
    if (t.types.size > 0) return true;
    for (const [key, other] of this.targets) if (other === t) this.targets.delete(key);
    for (const [key, c] of this.classes) if (c.target === t) this.classes.delete(key);
    t.api?.destroy();
    return false;
  }

  private async refresh(t: Target): Promise<void> {
    if (!this.prune(t)) return;
    const types = [...t.types.keys()].sort();
    t.running = true;
    try {
      const prices = await this.fetch(t, types);
      t.prices = prices;
      t.pricedTypes = new Set(types);
      if (t.failures > 0) {
        this.log.info('AWS spot prices refreshed again', {
          target: t.name,
          failuresBefore: t.failures,
          classes: [...t.classes],
        });
      } else {
        this.log.verbose('AWS spot prices refreshed', {
          target: t.name,
          types: types.length,
          records: prices.size,
        });
      }
      t.failures = 0;
      this.refreshes.inc({ result: 'success' });
      this.schedule(t, t.dirty ? this.soonMs : this.jittered(this.refreshMs));
    } catch (err) {
      if (this.stopped) return;
      t.failures++;
      this.refreshes.inc({ result: 'failure' });
      const retryMs = this.jittered(Math.min(this.refreshMs, this.backoffMs * 2 ** (t.failures - 1)));
      const secrets =
        t.credentials.kind === 'static' ? [t.credentials.accessKeyId, t.credentials.secretAccessKey] : [];
      this.log.warn(
        t.prices === undefined
          ? 'refreshing AWS spot prices failed; spot nodes are priced at the on-demand price meanwhile'
          : 'refreshing AWS spot prices failed; the last prices stay',
        {
          target: t.name,
          classes: [...t.classes],
          failures: t.failures,
          retryInSeconds: Math.round(retryMs / 1000),
          error: toMachineError(err, 'DescribeSpotPriceHistory', secrets).detail,
        },
      );
      this.schedule(t, retryMs);
    } finally {
      t.running = false;
    }
  }

  /** The latest Linux price of each (zone, type) of the types, every page. */
  private async fetch(t: Target, types: string[]): Promise<Map<string, SpotRecord>> {
    t.api ??= this.opts.ec2(t.region, t.credentials);
    const api = t.api;
    const asked = new Date(this.clock.now());
    const fetched = asked.toISOString().replace(/\.\d{3}Z$/, 'Z');
    const latest = new Map<string, SpotPrice>();
    let NextToken: string | undefined;
    let pages = 0;
    do {
      const page = await api.describeSpotPriceHistory(
        {
          InstanceTypes: types as _InstanceType[],
          ProductDescriptions: LINUX,
          // The price in effect now (and any change since): the latest record of each zone and type.
          StartTime: asked,
          MaxResults: 1000,
          ...(NextToken === undefined ? {} : { NextToken }),
        },
        this.abort.signal,
      );
      for (const r of page.SpotPriceHistory ?? []) {
        if (!LINUX_SET.has(r.ProductDescription ?? '')) continue;
        const key = `${r.AvailabilityZone ?? ''}/${r.InstanceType ?? ''}`;
        const before = latest.get(key);
        if (before === undefined || (r.Timestamp?.getTime() ?? 0) > (before.Timestamp?.getTime() ?? 0)) {
          latest.set(key, r);
        }
      }
      NextToken = page.NextToken === '' ? undefined : page.NextToken;
    } while (NextToken !== undefined && ++pages < MAX_PAGES);
    const out = new Map<string, SpotRecord>();
    for (const [key, r] of latest) {
      const price = Number(r.SpotPrice);
      if (!Number.isFinite(price) || price <= 0 || (r.AvailabilityZone ?? '') === '') continue;
      const at = r.Timestamp?.getTime() ?? 0;
      const since = at === 0 ? '' : `, since ${new Date(at).toISOString().replace(/\.\d{3}Z$/, 'Z')}`;
      out.set(key, {
        price,
        source: `aws spot price ${r.AvailabilityZone ?? ''} (DescribeSpotPriceHistory ${fetched}${since})`,
      });
    }
    return out;
  }
}
