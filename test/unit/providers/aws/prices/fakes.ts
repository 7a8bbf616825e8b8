import type {
  DescribeInstancesCommandOutput,
  DescribeSpotPriceHistoryCommandInput,
  DescribeSpotPriceHistoryCommandOutput,
  SpotPrice,
} from '@aws-sdk/client-ec2';

import type { MachineClass } from '../../../../../lib/api/types.js';
import type { AwsCredentials } from '../../../../../lib/providers/aws/credentials.js';
import type { Ec2Api, Ec2ApiFactory } from '../../../../../lib/providers/aws/client.js';
import { cls } from '../fixtures.js';

const meta = { $metadata: {} };

/** A spot price record as DescribeSpotPriceHistory gives it. */
export function spotRecord(
  zone: string,
  type: string,
  price: string,
  over: Partial<SpotPrice> = {},
): SpotPrice {
  return {
    AvailabilityZone: zone,
    InstanceType: type as SpotPrice['InstanceType'],
    ProductDescription: 'Linux/UNIX',
    SpotPrice: price,
    Timestamp: new Date('2026-01-01T00:00:00Z'),
    ...over,
  };
}

type Answer = (
  input: DescribeSpotPriceHistoryCommandInput,
  signal?: AbortSignal,
) => Promise<DescribeSpotPriceHistoryCommandOutput>;

/** EC2 for the prices: DescribeSpotPriceHistory answers from `records` (or `answer`), the rest is empty. */
export class FakeSpotEc2 implements Ec2Api {
  readonly calls: DescribeSpotPriceHistoryCommandInput[] = [];
  /** Every call of any method, by name (the nodePrice path must make none). */
  readonly all: string[] = [];
  records: SpotPrice[] = [];
  /** Replaces the answer from `records` (failures, hanging calls, pages). */
  answer: Answer | undefined;
  destroyed = 0;

  constructor(
    readonly region: string,
    readonly credentials: AwsCredentials,
  ) {}

  describeSpotPriceHistory(
    input: DescribeSpotPriceHistoryCommandInput,
    signal?: AbortSignal,
  ): Promise<DescribeSpotPriceHistoryCommandOutput> {
    this.all.push('DescribeSpotPriceHistory');
    this.calls.push(input);
    if (this.answer !== undefined) return this.answer(input, signal);
    // As EC2 (and the emulator) do: the InstanceTypes are honoured.
    const types: readonly string[] = input.InstanceTypes ?? [];
    return Promise.resolve({
      ...meta,
      SpotPriceHistory: this.records.filter(
        (r) => types.length === 0 || types.includes(r.InstanceType ?? ''),
      ),
    });
  }

  describeInstances(): Promise<DescribeInstancesCommandOutput> {
    this.all.push('DescribeInstances');
    return Promise.resolve({ ...meta, Reservations: [] });
  }

  private refuse(name: string): Promise<never> {
    this.all.push(name);
    return Promise.reject(new Error(`unexpected ${name}`));
  }

  runInstances(): Promise<never> {
    return this.refuse('RunInstances');
  }
  describeImages(): Promise<never> {
    return this.refuse('DescribeImages');
  }
  terminateInstances(): Promise<never> {
    return this.refuse('TerminateInstances');
  }
  modifyInstanceAttribute(): Promise<never> {
    return this.refuse('ModifyInstanceAttribute');
  }
  modifyNetworkInterfaceAttribute(): Promise<never> {
    return this.refuse('ModifyNetworkInterfaceAttribute');
  }
  assignIpv6Addresses(): Promise<never> {
    return this.refuse('AssignIpv6Addresses');
  }
  describeInstanceStatus(): Promise<never> {
    return this.refuse('DescribeInstanceStatus');
  }
  destroy(): void {
    this.destroyed++;
  }
}

/** A factory of FakeSpotEc2 clients, each kept (with its region and credentials) for the test. */
export function fakeEc2Factory(setup: (api: FakeSpotEc2) => void = () => undefined): {
  factory: Ec2ApiFactory;
  clients: FakeSpotEc2[];
  /** Every call any client received. */
  calls: () => string[];
} {
  const clients: FakeSpotEc2[] = [];
  return {
    factory: (region, credentials) => {
      const api = new FakeSpotEc2(region, credentials);
      setup(api);
      clients.push(api);
      return api;
    },
    clients,
    calls: () => clients.flatMap((c) => c.all),
  };
}

/** gardener's sample class as a spot class (spotPrice '') of type m5.large in us-east-1. */
export function spotClass(name = 'spot-mc', over: Record<string, unknown> = {}): MachineClass {
  const c = cls({ region: 'us-east-1', machineType: 'm5.large', spotPrice: '', ...over });
  c.metadata.name = name;
  return c;
}

/** The same, bought on demand (no spotPrice, no instanceMarketOptions). */
export function onDemandClass(name = 'od-mc', over: Record<string, unknown> = {}): MachineClass {
  const c = cls({ region: 'us-east-1', machineType: 'm5.large', ...over });
  delete c.providerSpec.spotPrice;
  c.metadata.name = name;
  return c;
}
