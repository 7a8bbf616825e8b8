// On-demand Linux list prices per region and instance type, from the generated table (public AWS
// list prices: see hack/gen-aws-prices.mjs). A region without a table of its own is priced with its
// partition's table (us-east-1's for the commercial regions, as Karpenter does; the China regions
// take cn-north-1's, in CNY like their spot prices): right as an order between types, not as an
// amount. That is reported once per region, in the log and in a metric.

import { Gauge, type Registry } from 'prom-client';

import type { Logger } from '../../../observability/logger.js';
import { ON_DEMAND_TABLES, type OnDemandRegionTable } from './ondemand-table.generated.js';

export interface OnDemandPrice {
  /** Per hour, in `currency`. */
  price: number;
  currency: string;
  /** The region whose table priced it: the one asked for, or the fallback's. */
  region: string;
  /** Whether the region asked for has no table (and `region` is another's). */
  fallback: boolean;
  /** Where the figure comes from, for the price's `source`. */
  source: string;
}

const COMMERCIAL_FALLBACK = 'us-east-1';

/** The table a region without one of its own is priced with: its partition's. */
function fallbackRegionOf(region: string): string {
  if (region.startsWith('cn-')) return 'cn-north-1';
  if (region.startsWith('us-gov-')) return 'us-gov-west-1';
  return COMMERCIAL_FALLBACK;
}

const fallbackGauges = new WeakMap<Registry, Gauge<'region'>>();

function fallbackGauge(registry: Registry): Gauge<'region'> {
  let g = fallbackGauges.get(registry);
  if (g === undefined) {
    g = new Gauge({
      name: 'mcm_autoscaler_price_region_fallback',
      help: "1 for each AWS region whose nodes are priced with another region's on-demand table (it has none of its own).",
      labelNames: ['region'],
      registers: [registry],
    });
    fallbackGauges.set(registry, g);
  }
  return g;
}

interface ParsedRegion {
  table: OnDemandRegionTable;
  prices: ReadonlyMap<string, number>;
  /** "aws on-demand list price us-east-1 2026-07-20" */
  source: string;
}

interface Fallback {
  region: string;
  parsed: ParsedRegion;
  /** The fallback table's source and why it is used. */
  source: string;
}

export interface OnDemandPricesOptions {
  logger: Logger;
  registry: Registry;
  /** The tables by region (default: the generated one; tests pass their own). */
  tables?: Readonly<Record<string, OnDemandRegionTable>>;
}

/** Answers from memory; a region's table becomes a map the first time the region is asked about. */
export class OnDemandPrices {
  private readonly tables: Readonly<Record<string, OnDemandRegionTable>>;
  private readonly parsed = new Map<string, ParsedRegion>();
  /** Regions priced with another's table, each reported once. */
  private readonly fallbacks = new Map<string, Fallback>();
  private readonly log: Logger;
  private readonly gauge: Gauge<'region'>;

  constructor(opts: OnDemandPricesOptions) {
    this.tables = opts.tables ?? ON_DEMAND_TABLES;
    this.log = opts.logger;
    this.gauge = fallbackGauge(opts.registry);
  }

  /** The list price of an instance type in a region; undefined when the table has no such type. */
  onDemandPrice(region: string, instanceType: string): OnDemandPrice | undefined {
    if (region === '' || instanceType === '') return undefined;
    const own = this.region(region);
    if (own !== undefined) {
      const price = own.prices.get(instanceType);
      if (price === undefined) return undefined;
      return { price, currency: own.table.currency, region, fallback: false, source: own.source };
    }
    const fallback = this.fallback(region);
    const price = fallback?.parsed.prices.get(instanceType);
    if (fallback === undefined || price === undefined) return undefined;
    return {
      price,
      currency: fallback.parsed.table.currency,
      region: fallback.region,
      fallback: true,
      source: fallback.source,
    };
  }

  private region(region: string): ParsedRegion | undefined {
    const done = this.parsed.get(region);
    if (done !== undefined) return done;
    if (!Object.hasOwn(this.tables, region)) return undefined;
    const table = this.tables[region];
    if (table === undefined) return undefined;
    const prices = new Map<string, number>();
    for (const pair of table.prices.split(';')) {
      const eq = pair.indexOf('=');
      if (eq > 0) prices.set(pair.slice(0, eq), Number(pair.slice(eq + 1)));
    }
    const parsed = {
      table,
      prices,
      source: `aws on-demand list price ${region} ${table.generatedAt.slice(0, 10)}`,
    };
    this.parsed.set(region, parsed);
    return parsed;
  }

  /** The table a region without its own is priced with; reported the first time it is asked for. */
  private fallback(region: string): Fallback | undefined {
    const known = this.fallbacks.get(region);
    if (known !== undefined) return known;
    const fallbackRegion = fallbackRegionOf(region);
    const parsed = this.region(fallbackRegion);
    if (parsed === undefined) return undefined;
    const fallback = {
      region: fallbackRegion,
      parsed,
      source: `${parsed.source} (${fallbackRegion} price: region ${region} not in the table)`,
    };
    this.fallbacks.set(region, fallback);
    this.gauge.set({ region }, 1);
    this.log.warn(
      `AWS region ${region} has no on-demand price table: its nodes are priced with ${fallbackRegion}'s list prices (an order between instance types, not their cost there)`,
      { region, pricedAs: fallbackRegion },
    );
    return fallback;
  }
}
