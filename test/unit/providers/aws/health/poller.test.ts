import type {
  DescribeInstanceStatusCommandInput,
  DescribeInstanceStatusCommandOutput,
  InstanceStatus,
  InstanceStatusSummary,
} from '@aws-sdk/client-ec2';
import { expect } from 'chai';

import type { VmNotice, VmNoticeOutcome, VmNoticeSink } from '../../../../../lib/driver/notices.js';
import { FakeClock } from '../../../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import type { Ec2Api, Ec2ApiFactory } from '../../../../../lib/providers/aws/client.js';
import {
  InstanceHealthMetrics,
  InstanceHealthPoller,
} from '../../../../../lib/providers/aws/health/poller.js';
import { eventually } from '../../../helpers/eventually.js';
import { cls, secret } from '../fixtures.js';

const T0 = Date.UTC(2026, 10, 28, 2, 0, 0);
const INTERVAL = 60_000;
const TIMEOUT = 300_000;

type Answer = (
  input: DescribeInstanceStatusCommandInput,
  signal?: AbortSignal,
) => Promise<DescribeInstanceStatusCommandOutput>;

const running = (id: string, status: 'ok' | 'impaired', since?: Date): InstanceStatus => {
  const check: InstanceStatusSummary = {
    Status: status,
    Details: [
      {
        Name: 'reachability',
        Status: status === 'ok' ? 'passed' : 'failed',
        ...(since === undefined ? {} : { ImpairedSince: since }),
      },
    ],
  };
  return {
    InstanceId: id,
    InstanceState: { Code: 16, Name: 'running' },
    InstanceStatus: { Status: 'ok' },
    SystemStatus: check,
  };
};

/** EC2 for the poll: DescribeInstanceStatus answers `statuses` (ignoring filters, as the emulator does). */
class FakeStatusEc2 {
  readonly calls: { input: DescribeInstanceStatusCommandInput; signal: AbortSignal | undefined }[] = [];
  statuses: InstanceStatus[] = [];
  answer: Answer | undefined;
  destroyed = 0;

  constructor(readonly region: string) {}

  api(): Ec2Api {
    const refuse = (): Promise<never> => Promise.reject(new Error('unexpected call'));
    return {
      describeInstanceStatus: (input, signal) => {
        this.calls.push({ input, signal });
        if (this.answer !== undefined) return this.answer(input, signal);
        return Promise.resolve({ $metadata: {}, InstanceStatuses: this.statuses });
      },
      runInstances: refuse,
      describeInstances: refuse,
      describeImages: refuse,
      terminateInstances: refuse,
      modifyInstanceAttribute: refuse,
      modifyNetworkInterfaceAttribute: refuse,
      assignIpv6Addresses: refuse,
      describeSpotPriceHistory: refuse,
      destroy: () => {
        this.destroyed++;
      },
    };
  }
}

class FakeSink implements VmNoticeSink {
  readonly notices: VmNotice[] = [];
  answer: VmNoticeOutcome | Error = 'acted';
  handle(notice: VmNotice): Promise<VmNoticeOutcome> {
    this.notices.push(notice);
    return this.answer instanceof Error ? Promise.reject(this.answer) : Promise.resolve(this.answer);
  }
}

function unauthorized(): Error {
  const err = new Error('You are not authorized to perform this operation.');
  err.name = 'UnauthorizedOperation';
  Object.assign(err, { $metadata: { httpStatusCode: 403 } });
  return err;
}

describe('InstanceHealthPoller: EC2 status checks polled in the background', () => {
  let clock: FakeClock;
  let sink: FakeSink;
  let logger: CapturingLogger;
  let registry: ReturnType<typeof newRegistry>;
  let ec2: FakeStatusEc2[];
  /** Called with each client made. */
  let setup: (f: FakeStatusEc2) => void;
  let poller: InstanceHealthPoller;

  beforeEach(() => {
    clock = new FakeClock(T0);
    sink = new FakeSink();
    logger = new CapturingLogger();
    registry = newRegistry();
    ec2 = [];
    setup = () => undefined;
    const factory: Ec2ApiFactory = (region) => {
      const fake = new FakeStatusEc2(region);
      setup(fake);
      ec2.push(fake);
      return fake.api();
    };
    poller = new InstanceHealthPoller({
      ec2: factory,
      sink,
      settings: { intervalMs: INTERVAL, impairedTimeoutMs: TIMEOUT },
      clock,
      logger,
      metrics: InstanceHealthMetrics.of(registry),
      // No jitter: the polls come every INTERVAL exactly.
      random: () => 0.5,
    });
  });

  afterEach(async () => {
    await poller.stop();
  });

  async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    const m = await registry.getSingleMetric(name)?.get();
    return (m?.values ?? [])
      .filter((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want))
      .reduce((sum, v) => sum + v.value, 0);
  }
  const polls = (outcome: string): Promise<number> =>
    metric('mcm_aws_instance_status_polls_total', { outcome });

  /** The next poll, run to its end (its notices handled). */
  async function poll(): Promise<void> {
    const before = ec2.reduce((n, f) => n + f.calls.length, 0);
    await clock.advance(INTERVAL);
    await eventually(
      () => ec2.reduce((n, f) => n + f.calls.length, 0) > before && clock.pendingTimers() === 1,
      'the poll done and the next one waiting',
    );
  }

  it('polls nothing until a driver call shows a region and credentials, then both impaired filters of that region, every page, with one client for classes that share them', async () => {
    poller.start();
    await clock.advance(INTERVAL);
    await eventually(() => clock.pendingTimers() === 1, 'the next poll waiting');
    expect(ec2, 'nothing to poll, no client').to.deep.equal([]);
    poller.observeRequest(cls(), secret);
    poller.observeRequest(cls({ machineType: 'm5.xlarge' }), secret);
    setup = (f) => {
      f.answer = (input) =>
        Promise.resolve({
          $metadata: {},
          InstanceStatuses: [],
          ...(input.NextToken === undefined ? { NextToken: 'p2' } : {}),
        });
    };
    await poll();
    expect(
      ec2.map((f) => f.region),
      'one client for the one region and credentials',
    ).to.deep.equal(['eu-west-1']);
    const calls = ec2[0]?.calls ?? [];
    expect(calls.map((c) => [c.input.Filters, c.input.NextToken])).to.deep.equal([
      [[{ Name: 'instance-status.status', Values: ['impaired'] }], undefined],
      [[{ Name: 'instance-status.status', Values: ['impaired'] }], 'p2'],
      [[{ Name: 'system-status.status', Values: ['impaired'] }], undefined],
      [[{ Name: 'system-status.status', Values: ['impaired'] }], 'p2'],
    ]);
    expect(calls.every((c) => c.signal !== undefined && c.input.MaxResults === 1000)).to.equal(true);
    expect(await polls('ok')).to.equal(1);
  });

  it('hands over an instance impaired for longer than the timeout (counted from the first poll that saw it), checking the statuses itself, and not before', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    // The emulator ignores the filters: ok instances come back too, and are not impaired.
    fake.statuses = [running('i-ok', 'ok'), running('i-bad', 'impaired')];
    const firstSeen = clock.now() + INTERVAL;
    await poll();
    expect(await metric('mcm_aws_impaired_instances'), 'the ok one not counted').to.equal(1);
    for (let i = 0; i < 4; i++) await poll();
    expect(clock.now() - firstSeen).to.equal(TIMEOUT - INTERVAL);
    expect(sink.notices, 'not before the timeout').to.deep.equal([]);
    await poll();
    expect(sink.notices).to.have.length(1);
    expect(sink.notices[0]).to.deep.include({
      kind: 'impaired',
      providerID: 'aws:///eu-west-1/i-bad',
      reason: 'InstanceImpaired',
      sentAt: clock.now(),
    });
    expect(sink.notices[0]?.message).to.contain('system status check impaired (reachability)');
    expect(sink.notices[0]?.message).to.contain('longer than 5m0s');
    expect(await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'acted' })).to.equal(1);
    expect(logger.lines.filter((l) => l.level === 'info' && l.msg.includes('marked Failed'))).to.have.length(
      1,
    );
  });

  it('an instance back to ok before the timeout is forgotten: impaired again, it waits a whole timeout again', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.statuses = [running('i-bad', 'impaired')];
    for (let i = 0; i < 4; i++) await poll();
    fake.statuses = [running('i-bad', 'ok')];
    await poll();
    expect(await metric('mcm_aws_impaired_instances')).to.equal(0);
    fake.statuses = [running('i-bad', 'impaired')];
    for (let i = 0; i < 5; i++) await poll();
    expect(sink.notices, '4 + 5 polls impaired, never 6 in a row').to.deep.equal([]);
    await poll();
    expect(sink.notices).to.have.length(1);
  });

  it('an instance whose impairment was recorded and that EC2 shows ok again: its record is withdrawn (one call for the recovering instances); one that is gone is forgotten', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    const since = new Date(clock.now() - TIMEOUT);
    fake.statuses = [running('i-back', 'impaired', since), running('i-gone', 'impaired', since)];
    await poll();
    expect(sink.notices.map((n) => n.kind)).to.deep.equal(['impaired', 'impaired']);
    // i-back passes its checks again; i-gone is no longer running (EC2 lists neither as impaired).
    fake.statuses = [running('i-back', 'ok')];
    const callsBefore = fake.calls.length;
    await poll();
    expect(
      fake.calls.slice(callsBefore).map((c) => c.input.InstanceIds),
      'the two filtered calls, then one for the recovering instances',
    ).to.deep.equal([undefined, undefined, ['i-back', 'i-gone']]);
    expect(sink.notices.slice(2)).to.have.length(1);
    expect(sink.notices[2]).to.deep.include({
      kind: 'recovered',
      providerID: 'aws:///eu-west-1/i-back',
      reason: 'InstanceRecovered',
      withdraws: 'InstanceImpaired',
    });
    // Withdrawn once: the next poll asks nothing more.
    const after = fake.calls.length;
    await poll();
    expect(fake.calls.length - after, 'the two filtered calls only').to.equal(2);
    expect(sink.notices).to.have.length(3);
  });

  it('EC2’s ImpairedSince counts: an instance impaired long before is handed over at the first poll', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.statuses = [running('i-bad', 'impaired', new Date(clock.now() - TIMEOUT))];
    await poll();
    expect(sink.notices).to.have.length(1);
    expect(sink.notices[0]?.message).to.contain('since 2026-11-28T01:56:00Z');
  });

  it('an impaired instance no machine has: counted at every poll, logged once', async () => {
    sink.answer = 'unknown';
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.statuses = [running('i-other', 'impaired', new Date(T0 - 3_600_000))];
    for (let i = 0; i < 3; i++) await poll();
    expect(await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'unknown-instance' })).to.equal(
      3,
    );
    expect(logger.lines.filter((l) => l.fields.instance === 'i-other')).to.have.length(1);
  });

  it('a notice the sink could not record is counted failed, warned, and handed over again the next poll', async () => {
    sink.answer = new Error('the API is down');
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.statuses = [running('i-bad', 'impaired', new Date(T0 - 3_600_000))];
    await poll();
    expect(await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'failed' })).to.equal(1);
    expect(logger.lines.some((l) => l.level === 'warn' && l.msg.includes('next poll'))).to.equal(true);
    sink.answer = 'acted';
    await poll();
    expect(sink.notices).to.have.length(2);
    expect(await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'acted' })).to.equal(1);
  });

  it('UnauthorizedOperation: counted at every poll, warned once, the impaired clocks kept; the next poll that works says so', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.statuses = [running('i-bad', 'impaired')];
    await poll();
    fake.answer = () => Promise.reject(unauthorized());
    for (let i = 0; i < 3; i++) await poll();
    expect(await polls('unauthorized')).to.equal(3);
    const warned = logger.lines.filter((l) => l.level === 'warn');
    expect(warned).to.have.length(1);
    expect(warned[0]?.fields).to.deep.include({ needs: 'ec2:DescribeInstanceStatus' });
    expect(String(warned[0]?.fields.error)).to.contain('UnauthorizedOperation');
    fake.answer = undefined;
    await poll();
    expect(await polls('ok')).to.equal(3);
    expect(logger.lines.some((l) => l.level === 'info' && l.msg.includes('works again'))).to.equal(true);
    // Seen impaired 4 intervals ago (the failed polls changed nothing): one more and it is due.
    expect(sink.notices).to.deep.equal([]);
    await poll();
    expect(sink.notices).to.have.length(1);
  });

  it('other failures are counted failed; the poll goes on at its interval', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    fake.answer = () => Promise.reject(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
    await poll();
    await poll();
    expect(await polls('failed')).to.equal(2);
    expect(logger.lines.filter((l) => l.level === 'warn')).to.have.length(1);
  });

  it('never overlaps polls: a poll still waiting for EC2 holds the next one back, and stop aborts it', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    let aborted = false;
    fake.answer = (_input, signal) =>
      new Promise((_resolve, reject) => {
        signal?.addEventListener('abort', () => {
          aborted = true;
          reject(new Error('aborted'));
        });
      });
    const before = fake.calls.length;
    await clock.advance(INTERVAL);
    await eventually(() => fake.calls.length === before + 1, 'the hanging call made');
    await clock.advance(10 * INTERVAL);
    expect(fake.calls.length, 'no other call meanwhile').to.equal(before + 1);
    await poller.stop();
    expect(aborted, 'the call under way aborted').to.equal(true);
    expect(fake.destroyed).to.equal(1);
  });

  it('stops polling a region and credentials no driver call showed for an hour', async () => {
    poller.observeRequest(cls(), secret);
    poller.start();
    await poll();
    const fake = ec2[0];
    if (fake === undefined) throw new Error('no client');
    // Polled up to an hour after the driver call, not after.
    for (let i = 0; i < 59; i++) await poll();
    const calls = fake.calls.length;
    await clock.advance(INTERVAL);
    for (let i = 0; i < 10; i++) await clock.advance(0);
    expect(fake.calls.length, 'forgotten').to.equal(calls);
    expect(fake.destroyed).to.equal(1);
    poller.observeRequest(cls(), secret);
    await poll();
    expect(ec2, 'learnt again').to.have.length(2);
  });
});
