// Offerings EC2 has just shown it cannot fill: a (market, instance type, subnet) after a Spot
// interruption of one of its instances or a capacity error from RunInstances. For a while
// (--aws-unavailable-offering-ttl, 3 minutes by default) a launch of that offering is refused
// without calling EC2, with ResourceExhausted: the machine's creation fails at once, the
// autoscaler sees its instance as OutOfResources and backs the group off, and scales another
// group (an on-demand one ranked below the spot one, say) instead of waiting on this one. A new
// mark while one stands extends it. Marks live in memory: a restarted manager tries EC2 again,
// and EC2's answer marks the offering again if it still cannot fill it.
//
// A subnet names its zone, so the subnet stands for the zone in the key (a class launches into the
// subnet of its first network interface).

import type { Instance } from '@aws-sdk/client-ec2';
import { Counter, Gauge, type Registry } from 'prom-client';

import type { Clock } from '../../kube/clock.js';
import type { AwsProviderSpec } from './spec.js';

/** What a launch asks EC2 for, as far as capacity goes. */
export interface Offering {
  /** spot, on-demand, capacity-block, … (how the instance is bought). */
  market: string;
  instanceType: string;
  subnetID: string;
}

/**
 * The RunInstances error codes that say EC2 cannot fill this offering now (another offering, or
 * this one a little later, may succeed). Account limits (VcpuLimitExceeded, InstanceLimitExceeded)
 * are not the offering's and do not mark it.
 */
export const OFFERING_CAPACITY_CODES: ReadonlySet<string> = new Set([
  'InsufficientInstanceCapacity',
  'InsufficientCapacity',
  'InsufficientFreeAddressesInSubnet',
  'SpotMaxPriceTooLow',
  'MaxSpotInstanceCountExceeded',
  'UnfulfillableCapacity',
]);

/** Why an offering was marked (the cause label). */
export const UnavailableCause = {
  Interruption: 'interruption',
  CapacityError: 'capacity-error',
} as const;
export type UnavailableCause = (typeof UnavailableCause)[keyof typeof UnavailableCause];

export interface UnavailableMark {
  /** When the mark ends (ms since the epoch). */
  until: number;
  /** What marked it, for people: "EC2 answered InsufficientInstanceCapacity", "Spot interruption of i-…". */
  reason: string;
}

/** The offering a class's launches ask for: its market as launch.ts buys it, type and subnet. */
export function offeringOfSpec(spec: AwsProviderSpec): Offering {
  const market =
    spec.instanceMarketOptions?.marketType ?? (spec.spotPrice !== undefined ? 'spot' : 'on-demand');
  return {
    market,
    instanceType: spec.machineType,
    subnetID: spec.networkInterfaces[0]?.subnetID ?? '',
  };
}

/** The offering an instance was launched as (undefined when EC2's answer lacks type or subnet). */
export function offeringOfInstance(i: Instance): Offering | undefined {
  const instanceType = i.InstanceType ?? '';
  const subnetID = i.SubnetId ?? '';
  if (instanceType === '' || subnetID === '') return undefined;
  return { market: i.InstanceLifecycle ?? 'on-demand', instanceType, subnetID };
}

/** How long an instance's offering is remembered after it was last seen. */
const INSTANCE_MEMORY_MS = 60 * 60_000;

const keyOf = (o: Offering): string => `${o.market}/${o.instanceType}/${o.subnetID}`;

/** How an offering reads in messages: "spot m5.large in subnet-0abc". */
export const describeOffering = (o: Offering): string => `${o.market} ${o.instanceType} in ${o.subnetID}`;

export interface OfferingMetrics {
  marks: Counter<'cause'>;
  refused: Counter;
  /** The caches whose standing marks the gauge counts when scraped. */
  sources: Set<UnavailableOfferings>;
}

const metricsByRegistry = new WeakMap<Registry, OfferingMetrics>();

/** The offering metrics of a registry (registered once per registry). */
export function offeringMetrics(registry: Registry): OfferingMetrics {
  let m = metricsByRegistry.get(registry);
  if (m === undefined) {
    const sources = new Set<UnavailableOfferings>();
    new Gauge({
      name: 'mcm_aws_unavailable_offerings',
      help: 'Offerings currently marked unavailable.',
      registers: [registry],
      collect() {
        let n = 0;
        for (const s of sources) n += s.standing();
        this.set(n);
      },
    });
    m = {
      sources,
      marks: new Counter({
        name: 'mcm_aws_offering_unavailable_marks_total',
        help: 'Offerings (market, instance type, subnet) marked unavailable, by cause: a Spot interruption of one of its instances or a capacity error from RunInstances.',
        labelNames: ['cause'],
        registers: [registry],
      }),
      refused: new Counter({
        name: 'mcm_aws_launches_refused_total',
        help: 'Machine creations refused with ResourceExhausted without calling EC2, because their offering is marked unavailable.',
        registers: [registry],
      }),
    };
    metricsByRegistry.set(registry, m);
  }
  return m;
}

export interface UnavailableOfferingsOptions {
  /** How long a mark lasts; 0: nothing is ever marked. */
  ttlMs: number;
  clock: Clock;
  metrics?: OfferingMetrics;
}

export class UnavailableOfferings {
  private readonly marks = new Map<string, UnavailableMark>();
  private readonly ttlMs: number;
  private readonly clock: Clock;
  private readonly metrics: OfferingMetrics | undefined;
  /**
   * Instances seen, by id, with when last seen: the offering a Spot interruption of one of them
   * marks. The orphan collection's listing sees every live instance every few minutes, so one not
   * seen for INSTANCE_MEMORY_MS is gone.
   */
  private readonly instances = new Map<string, { offering: Offering; seenAt: number }>();
  private lastInstanceSweep: number;

  constructor(opts: UnavailableOfferingsOptions) {
    this.ttlMs = opts.ttlMs;
    this.clock = opts.clock;
    this.metrics = opts.metrics;
    this.lastInstanceSweep = opts.clock.monotonic();
  }

  /** Counts this cache's marks in the gauge (while the provider runs: the leader's are published). */
  open(): void {
    this.metrics?.sources.add(this);
  }

  /** Stops counting this cache's marks in the gauge. */
  close(): void {
    this.metrics?.sources.delete(this);
  }

  /** How many marks stand now. */
  standing(): number {
    this.sweep();
    return this.marks.size;
  }

  /** Marks the offering unavailable for the TTL from now (extending a mark that stands). */
  mark(o: Offering, cause: UnavailableCause, reason: string): void {
    if (this.ttlMs <= 0 || o.instanceType === '' || o.subnetID === '') return;
    this.marks.set(keyOf(o), { until: this.clock.now() + this.ttlMs, reason });
    this.metrics?.marks.inc({ cause });
  }

  /** The mark that stands on the offering, with how long it still stands, if one does. */
  unavailable(o: Offering): (UnavailableMark & { remainingMs: number }) | undefined {
    const key = keyOf(o);
    const m = this.marks.get(key);
    if (m === undefined) return undefined;
    const remainingMs = m.until - this.clock.now();
    if (remainingMs <= 0) {
      this.marks.delete(key);
      return undefined;
    }
    return { ...m, remainingMs };
  }

  /** Counts a creation refused for a mark. */
  refused(): void {
    this.metrics?.refused.inc();
  }

  /** Remembers the offering of an instance the driver saw (forgotten once it is gone). */
  observeInstance(i: Instance): void {
    const id = i.InstanceId ?? '';
    if (id === '') return;
    const state = i.State?.Name ?? '';
    if (state === 'terminated' || state === 'shutting-down') {
      this.instances.delete(id);
      return;
    }
    const offering = offeringOfInstance(i);
    const now = this.clock.monotonic();
    if (offering !== undefined) this.instances.set(id, { offering, seenAt: now });
    if (now - this.lastInstanceSweep >= INSTANCE_MEMORY_MS) {
      this.lastInstanceSweep = now;
      for (const [k, v] of this.instances) if (now - v.seenAt > INSTANCE_MEMORY_MS) this.instances.delete(k);
    }
  }

  /** Marks the offering of an instance whose Spot capacity is being reclaimed (if it was seen). */
  markInterrupted(instanceId: string): Offering | undefined {
    const o = this.instances.get(instanceId)?.offering;
    if (o === undefined) return undefined;
    this.mark(o, UnavailableCause.Interruption, `EC2 Spot interruption of ${instanceId}`);
    return o;
  }

  /** Drops the marks that ended. */
  private sweep(): void {
    const now = this.clock.now();
    for (const [k, m] of this.marks) if (m.until <= now) this.marks.delete(k);
  }
}
