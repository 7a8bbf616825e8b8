import { expect } from 'chai';

import { FakeClock } from '../../../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import type { AwsCredentials } from '../../../../../lib/providers/aws/credentials.js';
import { SpotPriceCache, type SpotPriceCacheOptions } from '../../../../../lib/providers/aws/prices/spot.js';
import { fakeEc2Factory, spotRecord, type FakeSpotEc2 } from './fakes.js';

const KEYS: AwsCredentials = { kind: 'static', accessKeyId: 'AKIDSPOT', secretAccessKey: 'SECRETSPOT' };
const OTHER_KEYS: AwsCredentials = {
  kind: 'static',
  accessKeyId: 'AKIDOTHER',
  secretAccessKey: 'SECRETOTHER',
};
const MINUTE = 60_000;

function ec2Error(code: string, message: string): Error {
  return Object.assign(new Error(message), { name: code, $metadata: { httpStatusCode: 400 } });
}

function setup(
  setupApi: (api: FakeSpotEc2) => void = (api) => {
    api.records = [spotRecord('us-east-1a', 'm5.large', '0.035')];
  },
  over: Partial<SpotPriceCacheOptions> = {},
): {
  clock: FakeClock;
  log: CapturingLogger;
  registry: ReturnType<typeof newRegistry>;
  ec2: ReturnType<typeof fakeEc2Factory>;
  cache: SpotPriceCache;
} {
  const clock = new FakeClock();
  const log = new CapturingLogger();
  const registry = newRegistry();
  const ec2 = fakeEc2Factory(setupApi);
  const cache = new SpotPriceCache({
    ec2: ec2.factory,
    clock,
    logger: log,
    registry,
    random: () => 0.5,
    ...over,
  });
  return { clock, log, registry, ec2, cache };
}

/** When (ms since the start) each DescribeSpotPriceHistory call was made. */
function callTimes(api: FakeSpotEc2, start: number): number[] {
  return api.calls.map((c) => (c.StartTime?.getTime() ?? 0) - start);
}

describe('aws prices: the spot price cache', () => {
  it('refreshes every 10 minutes, jittered within ±20%', async () => {
    for (const [random, period] of [
      [0, 8 * MINUTE],
      [0.5, 10 * MINUTE],
      [0.75, 11 * MINUTE],
    ] as const) {
      const { clock, ec2, cache } = setup(undefined, { random: () => random });
      const start = clock.now();
      cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
      cache.start();
      await clock.advance(2_000 + 3 * 12 * MINUTE);
      const api = ec2.clients[0];
      if (api === undefined) expect.fail('no client');
      const times = callTimes(api, start).filter((t) => t <= 2_000 + 3 * period);
      expect(times).to.deep.equal([2_000, 2_000 + period, 2_000 + 2 * period, 2_000 + 3 * period]);
      await cache.stop();
    }
  });

  it('a failed refresh is retried after a jittered backoff doubling from 30 s up to the period; the last prices stay; no secret is logged', async () => {
    let fail = false;
    const { clock, log, registry, ec2, cache } = setup((api) => {
      api.answer = (input) =>
        fail
          ? Promise.reject(
              ec2Error('UnauthorizedOperation', 'You are not authorized (key AKIDSPOT, secret SECRETSPOT)'),
            )
          : Promise.resolve({
              $metadata: {},
              SpotPriceHistory: [spotRecord('us-east-1a', input.InstanceTypes?.[0] ?? '', '0.035')],
            });
    });
    const start = clock.now();
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(2_000);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({
      kind: 'priced',
      price: 0.035,
    });

    fail = true;
    await clock.advance(10 * MINUTE + 30_000 + 60_000 + 120_000 + 240_000 + 480_000 + 600_000 + 600_000);
    const api = ec2.clients[0];
    if (api === undefined) expect.fail('no client');
    const t0 = 2_000 + 10 * MINUTE;
    expect(callTimes(api, start)).to.deep.equal([
      2_000,
      t0,
      t0 + 30_000,
      t0 + 90_000,
      t0 + 210_000,
      t0 + 450_000,
      t0 + 930_000,
      // Capped at the period.
      t0 + 1_530_000,
      t0 + 2_130_000,
    ]);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large'), 'the last prices stay').to.deep.include({
      kind: 'priced',
      price: 0.035,
    });
    const warnings = log.lines.filter((l) => l.level === 'warn');
    expect(warnings).to.have.length(8);
    expect(warnings[0]?.msg).to.equal('refreshing AWS spot prices failed; the last prices stay');
    expect(warnings[0]?.fields).to.deep.include({
      target: 'credentials #1 in us-east-1',
      classes: ['default/a'],
      failures: 1,
      retryInSeconds: 30,
    });
    expect(String(warnings[0]?.fields.error)).to.match(
      /^AWS DescribeSpotPriceHistory failed: UnauthorizedOperation/,
    );
    const logged = JSON.stringify(log.lines);
    expect(logged).to.not.include('AKIDSPOT');
    expect(logged).to.not.include('SECRETSPOT');

    fail = false;
    await clock.advance(10 * MINUTE);
    expect(log.lines.filter((l) => l.msg === 'AWS spot prices refreshed again')).to.have.length(1);
    const refreshes = await registry.getSingleMetric('mcm_autoscaler_price_aws_spot_refreshes_total')?.get();
    expect(Object.fromEntries(refreshes?.values.map((v) => [v.labels.result, v.value]) ?? [])).to.deep.equal({
      success: 2,
      failure: 8,
    });
    await cache.stop();
  });

  it('jitter spreads the backoff within ±20%', async () => {
    for (const [random, first] of [
      [0, 24_000],
      [0.75, 33_000],
    ] as const) {
      const { clock, ec2, cache } = setup(
        (api) => {
          api.answer = () => Promise.reject(ec2Error('RequestLimitExceeded', 'slow down'));
        },
        { random: () => random },
      );
      const start = clock.now();
      cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
      cache.start();
      await clock.advance(2_000 + first);
      const api = ec2.clients[0];
      if (api === undefined) expect.fail('no client');
      expect(callTimes(api, start)).to.deep.equal([2_000, 2_000 + first]);
      await cache.stop();
    }
  });

  it('a new type during a backoff waits for the backoff (no early request), and is asked for then', async () => {
    const { clock, ec2, cache } = setup((api) => {
      api.answer = () => Promise.reject(ec2Error('RequestLimitExceeded', 'slow down'));
    });
    const start = clock.now();
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(2_000);
    cache.observe('default/b', 'us-east-1', KEYS, 't3.medium');
    await clock.advance(30_000);
    const api = ec2.clients[0];
    if (api === undefined) expect.fail('no client');
    expect(callTimes(api, start)).to.deep.equal([2_000, 32_000]);
    expect(api.calls.map((c) => c.InstanceTypes)).to.deep.equal([['m5.large'], ['m5.large', 't3.medium']]);
    await cache.stop();
  });

  it('before the first successful answer nothing is priced (pending), and a failing target stays pending', async () => {
    const { clock, cache } = setup((api) => {
      api.answer = () => Promise.reject(ec2Error('AuthFailure', 'no'));
    });
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({ kind: 'pending' });
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(5 * MINUTE);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.equal({
      kind: 'pending',
      why: 'no DescribeSpotPriceHistory answer yet',
    });
    await cache.stop();
  });

  it('one client and one request per credentials and region: classes sharing a Secret share them', async () => {
    const { clock, ec2, cache } = setup();
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.observe('default/b', 'us-east-1', { ...KEYS }, 'c5.xlarge');
    cache.observe('default/c', 'us-east-1', OTHER_KEYS, 'm5.large');
    cache.observe('default/d', 'eu-west-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(2_000);
    expect(
      ec2.clients.map((c) => [c.region, c.credentials, c.calls.map((call) => call.InstanceTypes)]),
    ).to.deep.equal([
      ['us-east-1', KEYS, [['c5.xlarge', 'm5.large']]],
      ['us-east-1', OTHER_KEYS, [['m5.large']]],
      ['eu-west-1', KEYS, [['m5.large']]],
    ]);
    await cache.stop();
  });

  it('a class whose Secret changed is priced from its new credentials', async () => {
    const { clock, ec2, cache } = setup((api) => {
      const price = api.credentials === KEYS ? '0.035' : '0.020';
      api.records = [spotRecord('us-east-1a', 'm5.large', price)];
    });
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(2_000);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({ price: 0.035 });
    cache.observe('default/a', 'us-east-1', OTHER_KEYS, 'm5.large');
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({ kind: 'pending' });
    await clock.advance(2_000);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({ price: 0.02 });
    expect(ec2.clients).to.have.length(2);
    await cache.stop();
  });

  it('follows NextToken across pages', async () => {
    const { clock, ec2, cache } = setup((api) => {
      api.answer = (input) =>
        Promise.resolve(
          input.NextToken === undefined
            ? {
                $metadata: {},
                SpotPriceHistory: [spotRecord('us-east-1a', 'm5.large', '0.035')],
                NextToken: 'p2',
              }
            : {
                $metadata: {},
                SpotPriceHistory: [spotRecord('us-east-1b', 'm5.large', '0.041')],
                NextToken: '',
              },
        );
    });
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.start();
    await clock.advance(2_000);
    expect(ec2.clients[0]?.calls.map((c) => c.NextToken)).to.deep.equal([undefined, 'p2']);
    expect(cache.price('default/a', 'us-east-1a', 'm5.large')).to.deep.include({ price: 0.035 });
    expect(cache.price('default/a', 'us-east-1b', 'm5.large')).to.deep.include({ price: 0.041 });
    await cache.stop();
  });

  it('types no driver call mentioned for a day are no longer asked for; a target without types is closed', async () => {
    const { clock, ec2, cache } = setup();
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    cache.observe('default/b', 'us-east-1', KEYS, 't3.medium');
    cache.start();
    for (let h = 0; h < 26; h++) {
      cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
      await clock.advance(60 * MINUTE);
    }
    const api = ec2.clients[0];
    if (api === undefined) expect.fail('no client');
    expect(api.calls[0]?.InstanceTypes).to.deep.equal(['m5.large', 't3.medium']);
    expect(api.calls[api.calls.length - 1]?.InstanceTypes).to.deep.equal(['m5.large']);
    expect(cache.price('default/b', 'us-east-1a', 't3.medium')).to.deep.include({ kind: 'pending' });
    await clock.advance(25 * 60 * MINUTE);
    const calls = api.calls.length;
    await clock.advance(60 * MINUTE);
    expect(api.calls.length, 'no more requests').to.equal(calls);
    expect(api.destroyed).to.equal(1);
    expect(clock.pendingTimers()).to.equal(0);
    await cache.stop();
  });

  it('nothing is fetched before start(), and stop() cancels the timers, aborts a request under way and closes the client', async () => {
    let aborted = false;
    const { clock, ec2, cache } = setup((api) => {
      api.answer = (_input, signal) =>
        new Promise((_resolve, reject) => {
          signal?.addEventListener('abort', () => {
            aborted = true;
            reject(new Error('aborted'));
          });
        });
    });
    cache.observe('default/a', 'us-east-1', KEYS, 'm5.large');
    await clock.advance(60 * MINUTE);
    expect(ec2.clients).to.deep.equal([]);
    cache.start();
    await clock.advance(2_000);
    expect(ec2.clients[0]?.calls).to.have.length(1);
    await cache.stop();
    expect(aborted).to.equal(true);
    expect(ec2.clients[0]?.destroyed).to.equal(1);
    expect(clock.pendingTimers()).to.equal(0);
    cache.observe('default/b', 'us-east-1', KEYS, 'c5.large');
    await clock.advance(60 * MINUTE);
    expect(ec2.clients[0]?.calls).to.have.length(1);
    expect(ec2.clients).to.have.length(1);
  });
});
