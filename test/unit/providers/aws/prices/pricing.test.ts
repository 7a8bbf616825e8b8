import { expect } from 'chai';

import type { MachineClass } from '../../../../../lib/api/types.js';
import type { NodePriceAnswer, ProviderContext } from '../../../../../lib/driver/registry.js';
import type { KubeApi } from '../../../../../lib/kube/client.js';
import { FakeClock } from '../../../../../lib/kube/clock.js';
import type { Secret } from '../../../../../lib/kube/types.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import { awsProvider } from '../../../../../lib/providers/aws/index.js';
import { AwsPricing } from '../../../../../lib/providers/aws/prices/pricing.js';
import { b64, secret } from '../fixtures.js';
import { fakeEc2Factory, onDemandClass, spotClass, spotRecord } from './fakes.js';

const ZONE = 'topology.kubernetes.io/zone';
const zoneLabels = (zone: string): Record<string, string> => ({ [ZONE]: zone });
const OD_SOURCE = 'aws on-demand list price us-east-1 2026-07-20';

/** us-east-1 spot prices: a, b and c (the emulator's product description) priced, f not. */
const RECORDS = [
  // Older: the later record of the zone counts, in whatever order they come.
  spotRecord('us-east-1a', 'm5.large', '0.050000', { Timestamp: new Date('2025-12-31T00:00:00Z') }),
  spotRecord('us-east-1a', 'm5.large', '0.035000'),
  spotRecord('us-east-1a', 'm5.large', '0.040000', { Timestamp: new Date('2025-12-31T12:00:00Z') }),
  // Not Linux: ignored, however cheap.
  spotRecord('us-east-1a', 'm5.large', '0.000100', {
    ProductDescription: 'Windows',
    Timestamp: new Date('2026-01-01T00:00:01Z'),
  }),
  spotRecord('us-east-1b', 'm5.large', '0.041000'),
  spotRecord('us-east-1c', 'm5.large', '0.000010', {
    ProductDescription: 'Linux/UNIX (Amazon VPC)',
    Timestamp: new Date('2006-01-02T15:04:05Z'),
  }),
  spotRecord('us-east-1a', 't3.medium', '0.012500'),
];

function setup(records = RECORDS): {
  clock: FakeClock;
  log: CapturingLogger;
  ec2: ReturnType<typeof fakeEc2Factory>;
  pricing: AwsPricing;
} {
  const clock = new FakeClock();
  const log = new CapturingLogger();
  const ec2 = fakeEc2Factory((api) => {
    api.records = records;
  });
  const pricing = new AwsPricing({
    ec2: ec2.factory,
    clock,
    logger: log,
    registry: newRegistry(),
    spot: { random: () => 0.5 },
  });
  return { clock, log, ec2, pricing };
}

const price = (
  pricing: AwsPricing,
  machineClass: MachineClass,
  labels: Record<string, string> = {},
): NodePriceAnswer => pricing.nodePrice({ machineClass, labels });

describe('aws prices: nodePrice', () => {
  it("an on-demand class: its type's list price in its region", () => {
    const { pricing } = setup();
    expect(price(pricing, onDemandClass(), zoneLabels('us-east-1a'))).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: OD_SOURCE,
    });
    expect(price(pricing, onDemandClass('t3', { machineType: 't3.medium' }))).to.deep.include({
      pricePerHour: 0.0416,
    });
  });

  it('a spot class: the on-demand price until the first spot answer (saying so), then its zone’s latest Linux spot price', async () => {
    const { clock, ec2, pricing } = setup();
    const cls = spotClass();
    pricing.observeRequest(cls, secret);
    expect(price(pricing, cls, zoneLabels('us-east-1a'))).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: `${OD_SOURCE}, for spot (no DescribeSpotPriceHistory answer yet)`,
    });
    pricing.start();
    await clock.advance(2_000);
    expect(ec2.clients).to.have.length(1);
    expect(ec2.clients[0]?.calls).to.have.length(1);
    expect(price(pricing, cls, zoneLabels('us-east-1a'))).to.deep.equal({
      pricePerHour: 0.035,
      currency: 'USD',
      source:
        'aws spot price us-east-1a (DescribeSpotPriceHistory 2026-01-01T00:00:02Z, since 2026-01-01T00:00:00Z)',
    });
    expect(price(pricing, cls, zoneLabels('us-east-1b'))).to.deep.include({ pricePerHour: 0.041 });
    expect(price(pricing, cls, zoneLabels('us-east-1c'))).to.deep.include({
      pricePerHour: 0.00001,
      source:
        'aws spot price us-east-1c (DescribeSpotPriceHistory 2026-01-01T00:00:02Z, since 2006-01-02T15:04:05Z)',
    });
    await pricing.stop();
  });

  it('a zone without a record after a successful refresh: the on-demand price, saying so', async () => {
    const { clock, pricing } = setup();
    const cls = spotClass();
    pricing.observeRequest(cls, secret);
    pricing.start();
    await clock.advance(2_000);
    expect(price(pricing, cls, zoneLabels('us-east-1f'))).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: `${OD_SOURCE}, for spot (DescribeSpotPriceHistory has no Linux price of m5.large in us-east-1f)`,
    });
    await pricing.stop();
  });

  it('the request: the types of the spot classes seen, the Linux product descriptions, from now', async () => {
    const { clock, ec2, pricing } = setup();
    pricing.observeRequest(spotClass('a'), secret);
    pricing.observeRequest(spotClass('b', { machineType: 't3.medium' }), secret);
    pricing.observeRequest(onDemandClass('c', { machineType: 'c5.xlarge' }), secret);
    pricing.start();
    await clock.advance(2_000);
    expect(ec2.clients[0]?.calls).to.deep.equal([
      {
        InstanceTypes: ['m5.large', 't3.medium'],
        ProductDescriptions: ['Linux/UNIX', 'Linux/UNIX (Amazon VPC)'],
        StartTime: new Date(Date.UTC(2026, 0, 1) + 2_000),
        MaxResults: 1000,
      },
    ]);
    expect(
      price(pricing, spotClass('b', { machineType: 't3.medium' }), zoneLabels('us-east-1a')),
    ).to.deep.include({ pricePerHour: 0.0125 });
    await pricing.stop();
  });

  it('the nodePrice path makes no EC2 call and schedules nothing, before and after the refresh', async () => {
    const { clock, ec2, pricing } = setup();
    const spot = spotClass();
    const od = onDemandClass();
    const unseen = spotClass('unseen');
    const ask = (): void => {
      for (let i = 0; i < 2_000; i++) {
        for (const c of [spot, od, unseen]) {
          price(pricing, c, zoneLabels(i % 2 === 0 ? 'us-east-1a' : 'us-east-1f'));
          price(pricing, c);
        }
      }
    };
    ask();
    expect(ec2.calls()).to.deep.equal([]);
    pricing.observeRequest(spot, secret);
    pricing.start();
    const timers = clock.pendingTimers();
    ask();
    expect(ec2.calls(), 'no call before the refresh is due').to.deep.equal([]);
    expect(clock.pendingTimers()).to.equal(timers);
    await clock.advance(2_000);
    expect(ec2.calls()).to.deep.equal(['DescribeSpotPriceHistory']);
    ask();
    expect(ec2.calls(), 'nor after it').to.deep.equal(['DescribeSpotPriceHistory']);
    expect(clock.pendingTimers()).to.equal(1);
    await pricing.stop();
  });

  it('the zone: topology label, else the beta label, else nodeTemplate.zone, else the zone of the subnet an instance of it ran in', async () => {
    const { clock, pricing } = setup();
    const plain = spotClass();
    const templated: MachineClass = {
      ...spotClass(),
      nodeTemplate: { capacity: {}, instanceType: 'm5.large', region: 'us-east-1', zone: 'us-east-1b' },
    };
    pricing.observeRequest(plain, secret);
    pricing.start();
    await clock.advance(2_000);
    const priceOf = (c: MachineClass, labels: Record<string, string>): number | undefined => {
      const a = price(pricing, c, labels);
      return 'pricePerHour' in a ? a.pricePerHour : undefined;
    };
    expect(
      priceOf(plain, { [ZONE]: 'us-east-1a', 'failure-domain.beta.kubernetes.io/zone': 'us-east-1b' }),
    ).to.equal(0.035);
    expect(priceOf(plain, { 'failure-domain.beta.kubernetes.io/zone': 'us-east-1b' })).to.equal(0.041);
    expect(priceOf(templated, {})).to.equal(0.041);
    expect(priceOf(templated, { [ZONE]: 'us-east-1a' }), 'the node says where it is').to.equal(0.035);
    expect(price(pricing, plain)).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: `${OD_SOURCE}, for spot (no zone known for spot class default/spot-mc)`,
    });
    // An instance of the class's subnet (fixtures: subnet-acbd1234) seen in us-east-1c.
    pricing.observeInstance({
      InstanceId: 'i-1',
      SubnetId: 'subnet-acbd1234',
      Placement: { AvailabilityZone: 'us-east-1c' },
    });
    expect(priceOf(spotClass(), {})).to.equal(0.00001);
    await pricing.stop();
  });

  it("the type: providerSpec.machineType, else the node's instance-type label; the region: providerSpec.region, else nodeTemplate.region, else the node's", () => {
    const { pricing } = setup();
    const noType = onDemandClass('no-type', { machineType: undefined });
    expect(price(pricing, noType, { 'node.kubernetes.io/instance-type': 't3.medium' })).to.deep.include({
      pricePerHour: 0.0416,
    });
    expect(price(pricing, noType, { 'beta.kubernetes.io/instance-type': 'c5.xlarge' })).to.deep.include({
      pricePerHour: 0.17,
    });
    expect(price(pricing, noType)).to.deep.equal({
      unknown: 'class default/no-type names no instance type (providerSpec.machineType)',
    });
    const noRegion = onDemandClass('no-region', { region: undefined });
    expect(price(pricing, noRegion)).to.deep.equal({
      unknown: 'class default/no-region names no region (providerSpec.region)',
    });
    expect(price(pricing, noRegion, { 'topology.kubernetes.io/region': 'us-gov-west-1' })).to.deep.include({
      pricePerHour: 0.121,
    });
    expect(
      price(pricing, {
        ...noRegion,
        nodeTemplate: { capacity: {}, instanceType: 'm5.large', region: 'cn-north-1', zone: 'cn-north-1a' },
      }),
    ).to.deep.equal({
      pricePerHour: 1.013,
      currency: 'CNY',
      source: 'aws on-demand list price cn-north-1 2024-11-06',
    });
  });

  it('an instance type without a list price is unknown, never a made-up number', () => {
    const { pricing } = setup();
    expect(price(pricing, onDemandClass('x', { machineType: 'x9.huge' }))).to.deep.equal({
      unknown: 'instance type x9.huge has no on-demand price for region us-east-1',
    });
    expect(
      price(pricing, spotClass('y', { machineType: 'x9.huge' }), zoneLabels('us-east-1a')),
    ).to.deep.equal({
      unknown:
        'instance type x9.huge has no on-demand price for region us-east-1 (spot: no driver call for class default/y has shown its credentials yet)',
    });
  });

  it('market: instanceMarketOptions.marketType spot is spot; spotPrice (any value, "" included) is spot; capacity blocks are unknown', async () => {
    const { clock, pricing } = setup();
    const byMarket = spotClass('market', {
      spotPrice: undefined,
      instanceMarketOptions: { marketType: 'spot' },
    });
    const byMaxPrice = spotClass('max', { spotPrice: '0.5' });
    pricing.observeRequest(byMarket, secret);
    pricing.observeRequest(byMaxPrice, secret);
    pricing.start();
    await clock.advance(2_000);
    expect(price(pricing, byMarket, zoneLabels('us-east-1a'))).to.deep.include({ pricePerHour: 0.035 });
    expect(price(pricing, byMaxPrice, zoneLabels('us-east-1a'))).to.deep.include({ pricePerHour: 0.035 });
    expect(
      price(
        pricing,
        spotClass('block', { spotPrice: '', instanceMarketOptions: { marketType: 'capacity-block' } }),
      ),
    ).to.deep.equal({
      unknown: 'class default/block launches capacity-block instances, which have no list price',
    });
    await pricing.stop();
  });

  it('a class that is not spot, or whose Secret holds no credentials, starts no spot refresh', async () => {
    const { clock, ec2, pricing } = setup();
    pricing.observeRequest(onDemandClass(), secret);
    const noCredentials: Secret = { metadata: { name: 'empty' }, data: { userData: b64('x') } };
    pricing.observeRequest(spotClass(), noCredentials);
    pricing.start();
    await clock.advance(60 * 60_000);
    expect(ec2.clients).to.deep.equal([]);
    await pricing.stop();
  });

  it('a class it cannot read is answered, not thrown', () => {
    const { pricing } = setup();
    const garbage = { metadata: { name: 'g' }, providerSpec: 'nonsense' } as unknown as MachineClass;
    expect(price(pricing, garbage)).to.have.property('unknown');
    const nulls = onDemandClass('n', { region: null, machineType: 7, networkInterfaces: 'x' });
    expect(price(pricing, nulls)).to.have.property('unknown');
  });

  it('a type seen after the first refresh is fetched soon, and priced on demand until then', async () => {
    const { clock, ec2, pricing } = setup();
    pricing.observeRequest(spotClass(), secret);
    pricing.start();
    await clock.advance(2_000);
    const t3 = spotClass('t3', { machineType: 't3.medium' });
    pricing.observeRequest(t3, secret);
    expect(price(pricing, t3, zoneLabels('us-east-1a'))).to.deep.equal({
      pricePerHour: 0.0416,
      currency: 'USD',
      source: `${OD_SOURCE}, for spot (t3.medium was not asked of DescribeSpotPriceHistory yet)`,
    });
    await clock.advance(2_000);
    expect(ec2.clients[0]?.calls.map((c) => c.InstanceTypes)).to.deep.equal([
      ['m5.large'],
      ['m5.large', 't3.medium'],
    ]);
    expect(price(pricing, t3, zoneLabels('us-east-1a'))).to.deep.include({ pricePerHour: 0.0125 });
    await pricing.stop();
  });

  it('a region outside the table: spot from its own spot prices, on demand from us-east-1’s table (saying so)', async () => {
    const { clock, pricing } = setup([spotRecord('eu-west-1a', 'm5.large', '0.038000')]);
    const eu = spotClass('eu', { region: 'eu-west-1' });
    pricing.observeRequest(eu, secret);
    pricing.start();
    await clock.advance(2_000);
    expect(price(pricing, eu, zoneLabels('eu-west-1a'))).to.deep.include({
      pricePerHour: 0.038,
      currency: 'USD',
    });
    expect(price(pricing, eu, zoneLabels('eu-west-1b'))).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: `${OD_SOURCE} (us-east-1 price: region eu-west-1 not in the table), for spot (DescribeSpotPriceHistory has no Linux price of m5.large in eu-west-1b)`,
    });
    await pricing.stop();
  });
});

describe('aws provider: nodePrice, start and stop', () => {
  it("a spot class without machines is priced from spot once the orphan collection's ListMachines showed its Secret", async () => {
    const clock = new FakeClock();
    const ec2 = fakeEc2Factory((api) => {
      api.records = RECORDS;
    });
    const ctx: ProviderContext = {
      control: {} as KubeApi,
      target: undefined,
      namespace: 'default',
      nodes: undefined,
      clock,
      logger: new CapturingLogger(),
      registry: newRegistry(),
    };
    const provider = awsProvider({ ec2: ec2.factory, spot: { random: () => 0.5 } })(ctx);
    const cls = spotClass();
    const ask = (): NodePriceAnswer | undefined =>
      provider.nodePrice?.({ machineClass: cls, labels: zoneLabels('us-east-1a') });
    provider.start?.();
    expect(ask()).to.deep.include({ pricePerHour: 0.096 });
    expect(await provider.driver.listMachines({ machineClass: cls, secret })).to.deep.equal({
      machineList: {},
    });
    await clock.advance(2_000);
    expect(ask()).to.deep.include({ pricePerHour: 0.035 });
    // The driver's client (ListMachines) and the prices' client (DescribeSpotPriceHistory).
    expect(ec2.calls().sort()).to.deep.equal(['DescribeInstances', 'DescribeSpotPriceHistory']);
    await provider.stop?.();
    expect(ec2.clients.map((c) => c.destroyed)).to.deep.equal([1, 1]);
  });
});
