import type { Instance } from '@aws-sdk/client-ec2';
import { expect } from 'chai';
import { Registry } from 'prom-client';

import type { Clock, TimerHandle } from '../../../../lib/kube/clock.js';
import {
  UnavailableOfferings,
  offeringMetrics,
  offeringOfInstance,
  offeringOfSpec,
  type Offering,
} from '../../../../lib/providers/aws/offerings.js';
import { parseAwsProviderSpec } from '../../../../lib/providers/aws/spec.js';
import { sampleSpec } from './fixtures.js';

class ManualClock implements Clock {
  constructor(public t = 1_000_000) {}
  now(): number {
    return this.t;
  }
  monotonic(): number {
    return this.t;
  }
  setTimeout(): TimerHandle {
    throw new Error('not used');
  }
  sleep(): Promise<void> {
    throw new Error('not used');
  }
}

const spotM5: Offering = { market: 'spot', instanceType: 'm5.large', subnetID: 'subnet-a' };

function specOf(over: Record<string, unknown>): ReturnType<typeof offeringOfSpec> {
  const r = parseAwsProviderSpec({ ...sampleSpec(), region: 'eu-west-1', ...over });
  if (!r.ok) throw new Error(r.problems.join('; '));
  return offeringOfSpec(r.spec);
}

describe('AWS provider: unavailable offerings', () => {
  it('a class buys as launch.ts does: instanceMarketOptions, else spot with spotPrice, else on-demand', () => {
    expect(specOf({ spotPrice: '' })).to.deep.equal({
      market: 'spot',
      instanceType: 't2.large',
      subnetID: 'subnet-acbd1234',
    });
    expect(specOf({ spotPrice: undefined }).market).to.equal('on-demand');
    expect(
      specOf({ spotPrice: undefined, instanceMarketOptions: { marketType: 'capacity-block' } }).market,
    ).to.equal('capacity-block');
  });

  it('an instance is the offering of its lifecycle, type and subnet', () => {
    const i: Instance = {
      InstanceId: 'i-1',
      InstanceType: 'm5.large',
      SubnetId: 'subnet-a',
      InstanceLifecycle: 'spot',
    };
    expect(offeringOfInstance(i)).to.deep.equal(spotM5);
    expect(offeringOfInstance({ ...i, InstanceLifecycle: undefined })?.market).to.equal('on-demand');
    expect(offeringOfInstance({ ...i, SubnetId: undefined })).to.equal(undefined);
  });

  it('a mark stands for the TTL from the last mark, then ends', () => {
    const clock = new ManualClock();
    const o = new UnavailableOfferings({ ttlMs: 180_000, clock });
    o.mark(spotM5, 'capacity-error', 'EC2 answered InsufficientInstanceCapacity');
    expect(o.unavailable(spotM5)).to.deep.equal({
      until: 1_180_000,
      reason: 'EC2 answered InsufficientInstanceCapacity',
      remainingMs: 180_000,
    });
    expect(o.unavailable({ ...spotM5, market: 'on-demand' })).to.equal(undefined);
    expect(o.unavailable({ ...spotM5, subnetID: 'subnet-b' })).to.equal(undefined);
    clock.t += 100_000;
    o.mark(spotM5, 'interruption', 'EC2 Spot interruption of i-1');
    clock.t += 179_999;
    expect(o.unavailable(spotM5)?.reason).to.equal('EC2 Spot interruption of i-1');
    clock.t += 1;
    expect(o.unavailable(spotM5)).to.equal(undefined);
  });

  it('a TTL of 0 never marks', () => {
    const o = new UnavailableOfferings({ ttlMs: 0, clock: new ManualClock() });
    o.mark(spotM5, 'capacity-error', 'x');
    expect(o.unavailable(spotM5)).to.equal(undefined);
  });

  it('a Spot interruption marks the offering of an instance it saw, and nothing for one it did not or that is gone', () => {
    const clock = new ManualClock();
    const o = new UnavailableOfferings({ ttlMs: 180_000, clock });
    const base: Instance = { InstanceType: 'm5.large', SubnetId: 'subnet-a', InstanceLifecycle: 'spot' };
    o.observeInstance({ ...base, InstanceId: 'i-1', State: { Name: 'running' } });
    o.observeInstance({ ...base, InstanceId: 'i-2', SubnetId: 'subnet-b', State: { Name: 'running' } });
    o.observeInstance({ ...base, InstanceId: 'i-2', SubnetId: 'subnet-b', State: { Name: 'terminated' } });
    expect(o.markInterrupted('i-9')).to.equal(undefined);
    expect(o.markInterrupted('i-2')).to.equal(undefined);
    expect(o.unavailable({ ...spotM5, subnetID: 'subnet-b' })).to.equal(undefined);
    expect(o.markInterrupted('i-1')).to.deep.equal(spotM5);
    expect(o.unavailable(spotM5)?.reason).to.equal('EC2 Spot interruption of i-1');
  });

  it('forgets an instance not seen for an hour', () => {
    const clock = new ManualClock();
    const o = new UnavailableOfferings({ ttlMs: 180_000, clock });
    const base: Instance = { InstanceType: 'm5.large', SubnetId: 'subnet-a', InstanceLifecycle: 'spot' };
    o.observeInstance({ ...base, InstanceId: 'i-1' });
    clock.t += 3_600_001;
    o.observeInstance({ ...base, InstanceId: 'i-2' });
    expect(o.markInterrupted('i-1')).to.equal(undefined);
    expect(o.markInterrupted('i-2')).to.deep.equal(spotM5);
  });

  it('publishes the marks by cause, the refusals and the standing marks while open', async () => {
    const registry = new Registry();
    const clock = new ManualClock();
    const o = new UnavailableOfferings({ ttlMs: 180_000, clock, metrics: offeringMetrics(registry) });
    o.open();
    o.mark(spotM5, 'interruption', 'x');
    o.mark({ ...spotM5, subnetID: 'subnet-b' }, 'capacity-error', 'y');
    o.refused();
    const text = async (): Promise<string> => registry.metrics();
    expect(await text()).to.include('mcm_aws_unavailable_offerings 2');
    expect(await text()).to.include('mcm_aws_offering_unavailable_marks_total{cause="interruption"} 1');
    expect(await text()).to.include('mcm_aws_offering_unavailable_marks_total{cause="capacity-error"} 1');
    expect(await text()).to.include('mcm_aws_launches_refused_total 1');
    clock.t += 180_000;
    expect(await text()).to.include('mcm_aws_unavailable_offerings 0');
    o.mark(spotM5, 'interruption', 'x');
    o.close();
    expect(await text()).to.include('mcm_aws_unavailable_offerings 0');
  });
});
