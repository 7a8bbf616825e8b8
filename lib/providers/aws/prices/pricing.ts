// The AWS provider's node prices, for cluster-autoscaler's price expander: the on-demand list price
// of the class's instance type in its region, or for a spot class the zone's latest spot price.
// Answered from memory on the autoscaler's path (thousands of calls a loop): no cloud call, no
// throw. What the answer needs from the cloud is learnt from the driver calls the manager makes
// anyway (a spot class's credentials, the zones of the subnets its instances run in) and refreshed
// in the background (spot.ts).

import type { Instance } from '@aws-sdk/client-ec2';
import type { Registry } from 'prom-client';

import type { MachineClass } from '../../../api/types.js';
import type { NodePriceAnswer, NodePriceRequest } from '../../../driver/registry.js';
import type { Clock } from '../../../kube/clock.js';
import type { DeepReadonly } from '../../../kube/informer.js';
import type { Secret } from '../../../kube/types.js';
import { WellKnownLabel } from '../../../kube/wellknown.js';
import type { Logger } from '../../../observability/logger.js';
import type { Ec2ApiFactory } from '../client.js';
import { readCredentials } from '../credentials.js';
import { OnDemandPrices } from './ondemand.js';
import type { OnDemandRegionTable } from './ondemand-table.generated.js';
import { SpotPriceCache, type SpotPriceCacheOptions } from './spot.js';

/** What pricing reads of a class (gardener's providerSpec fields, see spec.ts), read leniently. */
interface ClassPricing {
  /** `namespace/name` */
  key: string;
  /** providerSpec.region, else nodeTemplate.region. */
  region: string;
  /** providerSpec.machineType */
  machineType: string;
  /** nodeTemplate.instanceType */
  templateType: string;
  /** nodeTemplate.zone */
  zone: string;
  /** The subnet of the first network interface. */
  subnetID: string;
  /**
   * How its instances are bought, as launch.ts asks for them: instanceMarketOptions.marketType,
   * else `spot` when spotPrice is set ('' included: the on-demand price as maximum), else on-demand.
   */
  market: string;
}

type Obj = Readonly<Record<string, unknown>>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function readClass(cls: DeepReadonly<MachineClass>): ClassPricing {
  const spec: Obj = isObj(cls.providerSpec) ? cls.providerSpec : {};
  const mo = spec.instanceMarketOptions;
  const spotPrice = spec.spotPrice;
  const marketType = isObj(mo) ? str(mo.marketType) : '';
  const nics = spec.networkInterfaces;
  const nic: unknown = Array.isArray(nics) ? nics[0] : undefined;
  return {
    key: `${cls.metadata.namespace ?? ''}/${cls.metadata.name ?? ''}`,
    region: str(spec.region) || (cls.nodeTemplate?.region ?? ''),
    machineType: str(spec.machineType),
    templateType: cls.nodeTemplate?.instanceType ?? '',
    zone: cls.nodeTemplate?.zone ?? '',
    subnetID: isObj(nic) ? str(nic.subnetID) : '',
    market:
      marketType !== '' ? marketType : spotPrice !== undefined && spotPrice !== null ? 'spot' : 'on-demand',
  };
}

/** The first of the values that is set and not empty, else ''. */
function firstOf(...values: (string | undefined)[]): string {
  for (const v of values) if (v !== undefined && v !== '') return v;
  return '';
}

/** Spot prices are in the partition's currency, like its on-demand prices. */
const currencyOf = (region: string): string => (region.startsWith('cn-') ? 'CNY' : 'USD');

export interface AwsPricingOptions {
  ec2: Ec2ApiFactory;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** The spot refresh's timing and jitter (tests). */
  spot?: Pick<SpotPriceCacheOptions, 'refreshMs' | 'soonMs' | 'backoffMs' | 'random'>;
  /** The on-demand tables (default: the generated one; tests). */
  tables?: Readonly<Record<string, OnDemandRegionTable>>;
}

export class AwsPricing {
  private readonly onDemand: OnDemandPrices;
  private readonly spot: SpotPriceCache;
  /** The zone of each subnet an instance was seen in. */
  private readonly subnetZones = new Map<string, string>();
  /** What each class object says (the cache's objects are replaced, never changed, on update). */
  private readonly classes = new WeakMap<object, ClassPricing>();
  private readonly log: Logger;
  private internalErrorLogged = false;

  constructor(opts: AwsPricingOptions) {
    this.log = opts.logger;
    this.onDemand = new OnDemandPrices({
      logger: opts.logger,
      registry: opts.registry,
      ...(opts.tables === undefined ? {} : { tables: opts.tables }),
    });
    this.spot = new SpotPriceCache({
      ec2: opts.ec2,
      clock: opts.clock,
      logger: opts.logger,
      registry: opts.registry,
      ...opts.spot,
    });
  }

  /** A driver call's class and Secret: a spot class's credentials and type, for the spot refresh. */
  observeRequest(machineClass: DeepReadonly<MachineClass>, secret: Secret): void {
    const c = readClass(machineClass);
    if (c.market !== 'spot' || c.region === '' || c.machineType === '') return;
    const creds = readCredentials(secret);
    if (!creds.ok) return;
    this.spot.observe(c.key, c.region, creds.credentials, c.machineType);
  }

  /** An instance a driver call described: the zone of its subnet. */
  observeInstance(i: Instance): void {
    const subnet = i.SubnetId ?? '';
    const zone = i.Placement?.AvailabilityZone ?? '';
    if (subnet !== '' && zone !== '' && this.subnetZones.get(subnet) !== zone)
      this.subnetZones.set(subnet, zone);
  }

  nodePrice(req: NodePriceRequest): NodePriceAnswer {
    try {
      return this.price(req);
    } catch (err) {
      // Nothing above should throw; if it does, the autoscaler gets an answer and the log one line.
      if (!this.internalErrorLogged) {
        this.internalErrorLogged = true;
        this.log.error('pricing a node failed', { err });
      }
      return { unknown: `pricing failed: ${err instanceof Error ? err.message : String(err)}` };
    }
  }

  start(): void {
    this.spot.start();
  }

  stop(): Promise<void> {
    return this.spot.stop();
  }

  private classOf(cls: DeepReadonly<MachineClass>): ClassPricing {
    let c = this.classes.get(cls);
    if (c === undefined) {
      c = readClass(cls);
      this.classes.set(cls, c);
    }
    return c;
  }

  private price({ machineClass, labels }: NodePriceRequest): NodePriceAnswer {
    const c = this.classOf(machineClass);
    const type = firstOf(
      c.machineType,
      labels[WellKnownLabel.InstanceType],
      labels[WellKnownLabel.BetaInstanceType],
      c.templateType,
    );
    const region = firstOf(c.region, labels[WellKnownLabel.Region], labels[WellKnownLabel.BetaRegion]);
    if (type === '') return { unknown: `class ${c.key} names no instance type (providerSpec.machineType)` };
    if (region === '') return { unknown: `class ${c.key} names no region (providerSpec.region)` };
    if (c.market !== 'spot' && c.market !== 'on-demand') {
      return { unknown: `class ${c.key} launches ${c.market} instances, which have no list price` };
    }
    const od = this.onDemand.onDemandPrice(region, type);
    if (c.market === 'on-demand') {
      if (od === undefined)
        return { unknown: `instance type ${type} has no on-demand price for region ${region}` };
      return { pricePerHour: od.price, currency: od.currency, source: od.source };
    }
    const zone = firstOf(
      labels[WellKnownLabel.Zone],
      labels[WellKnownLabel.BetaZone],
      c.zone,
      this.subnetZones.get(c.subnetID),
    );
    let why: string;
    if (zone === '') {
      why = `no zone known for spot class ${c.key}`;
    } else {
      const spot = this.spot.price(c.key, zone, type);
      if (spot.kind === 'priced')
        return { pricePerHour: spot.price, currency: currencyOf(region), source: spot.source };
      why = spot.why;
    }
    if (od === undefined) {
      return { unknown: `instance type ${type} has no on-demand price for region ${region} (spot: ${why})` };
    }
    return { pricePerHour: od.price, currency: od.currency, source: `${od.source}, for spot (${why})` };
  }
}
