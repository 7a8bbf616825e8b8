import { expect } from 'chai';

import type { Lease } from '../../../lib/kube/types.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { UnavailableError } from '../../../lib/kube/errors.js';
import { FakeEventRecorder } from '../../../lib/kube/events.js';
import { LeaseFence } from '../../../lib/kube/fence.js';
import { LeaderElector, type LeaderElectionOptions } from '../../../lib/kube/leaderelection.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import { nullLogger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';
import { FakeKube } from '../../fakes/kube.js';

interface Candidate {
  elector: LeaderElector;
  abort: AbortController;
  started: number[];
  stopped: number[];
  leaderSignal: AbortSignal | undefined;
  done: Promise<void>;
}

describe('LeaderElector (fake API, fake clock)', () => {
  let api: FakeKube;
  let clock: FakeClock;

  beforeEach(() => {
    api = new FakeKube();
    clock = new FakeClock();
  });

  function candidate(identity: string, extra: Partial<LeaderElectionOptions> = {}): Candidate {
    const c: Partial<Candidate> = { started: [], stopped: [], abort: new AbortController() };
    c.elector = new LeaderElector({
      client: api,
      namespace: 'default',
      name: 'mcm',
      identity,
      clock,
      logger: nullLogger,
      onStartedLeading: (signal) => {
        c.started?.push(clock.now());
        c.leaderSignal = signal;
      },
      onStoppedLeading: () => c.stopped?.push(clock.now()),
      ...extra,
    });
    c.done = c.elector.run((c.abort as AbortController).signal);
    return c as Candidate;
  }

  const holder = (): string =>
    api.peek<Lease>(CoreResources.leases, 'mcm', 'default')?.spec?.holderIdentity ?? '';

  it('lets exactly one of two candidates lead and keeps renewing the Lease', async () => {
    const a = candidate('a');
    const b = candidate('b');
    await clock.advance(30_000);
    expect(a.elector.isLeader() !== b.elector.isLeader(), 'exactly one leader').to.equal(true);
    const leader = a.elector.isLeader() ? a : b;
    expect(holder()).to.equal(leader.elector.identity);
    expect(leader.started).to.have.length(1);
    const lease = api.peek<Lease>(CoreResources.leases, 'mcm', 'default');
    expect(Date.parse(lease?.spec?.renewTime ?? '')).to.be.greaterThan(clock.now() - 2_500);
    expect(lease?.spec?.leaseDurationSeconds).to.equal(15);
    a.abort.abort();
    b.abort.abort();
    await clock.advance(5000);
    await Promise.all([a.done, b.done]);
  });

  it('takes over once the leader stopped renewing for the lease duration (crash without release)', async () => {
    const a = candidate('a', { releaseOnCancel: false });
    await clock.advance(1000);
    expect(a.elector.isLeader()).to.equal(true);
    const b = candidate('b');
    await clock.advance(3000);
    expect(b.elector.isLeader()).to.equal(false);
    a.abort.abort(); // stops renewing, does not release: like a crash
    const crashedAt = clock.now();
    await clock.advance(1000);
    await a.done;
    let takeover = 0;
    for (let t = 0; t < 30_000 && takeover === 0; t += 100) {
      await clock.advance(100);
      if (b.elector.isLeader()) takeover = clock.now();
    }
    expect(takeover - crashedAt).to.be.greaterThan(12_000);
    expect(takeover - crashedAt).to.be.at.most(15_000 + 2_400 + 100);
    expect(holder()).to.equal('b');
    expect(api.peek<Lease>(CoreResources.leases, 'mcm', 'default')?.spec?.leaseTransitions).to.equal(1);
    b.abort.abort();
    await clock.advance(3000);
    await b.done;
  });

  it('a candidate that may not acquire only observes (a free Lease too); once it may, nudged, it takes an expired Lease at once', async () => {
    const a = candidate('a', { releaseOnCancel: false });
    await clock.advance(1000);
    expect(a.elector.isLeader()).to.equal(true);
    const gate = { open: false };
    const b = candidate('b', { mayAcquire: () => gate.open });
    a.abort.abort(); // a crash: the Lease is not released
    await clock.advance(1000);
    await a.done;
    await clock.advance(20_000); // well past the lease duration
    expect(b.elector.isLeader(), 'not while it may not').to.equal(false);
    expect(holder()).to.equal('a');
    expect(b.elector.holder()).to.equal('a');
    gate.open = true;
    b.elector.nudge();
    await clock.advance(10);
    expect(b.elector.isLeader(), 'at once: it observed the Lease for longer than its duration').to.equal(
      true,
    );
    b.abort.abort();
    await clock.advance(3000);
    await b.done;

    // A free Lease is not created by a candidate that may not acquire.
    api = new FakeKube();
    const c = candidate('c', { mayAcquire: () => false });
    await clock.advance(10_000);
    expect(c.elector.isLeader()).to.equal(false);
    expect(api.peek<Lease>(CoreResources.leases, 'mcm', 'default')).to.equal(undefined);
    c.abort.abort();
    await clock.advance(3000);
    await c.done;
  });

  it('releases the Lease on cancel so the follower takes over within one retry period', async () => {
    const a = candidate('a');
    await clock.advance(1000);
    const b = candidate('b');
    await clock.advance(5000);
    a.abort.abort();
    await clock.advance(10);
    await a.done;
    expect(holder()).to.equal('');
    expect(a.stopped).to.have.length(1);
    expect(a.leaderSignal?.aborted).to.equal(true);
    await clock.advance(2_500);
    expect(b.elector.isLeader()).to.equal(true);
    b.abort.abort();
    await clock.advance(3000);
    await b.done;
  });

  it('steps down and aborts the leader signal when it cannot renew within the renew deadline', async () => {
    const registry = newRegistry();
    const a = candidate('a', { registry });
    await clock.advance(1000);
    expect(a.elector.isLeader()).to.equal(true);
    expect(await registry.getSingleMetricAsString('leader_election_master_status')).to.contain(
      'name="mcm"} 1',
    );
    api.react((action) =>
      action.resource === 'leases.coordination.k8s.io'
        ? new UnavailableError('down', 503, 'ServiceUnavailable')
        : undefined,
    );
    await clock.advance(12_000);
    await a.done;
    expect(a.elector.isLeader()).to.equal(false);
    expect(a.stopped).to.have.length(1);
    expect(a.leaderSignal?.aborted).to.equal(true);
    expect(await registry.getSingleMetricAsString('leader_election_master_status')).to.contain(
      'name="mcm"} 0',
    );
  });

  it('grants the write fence on acquisition and each renewal, and closes it before the Lease can be taken over', async () => {
    const fence = new LeaseFence(clock);
    const a = candidate('a', { fence, releaseOnCancel: false });
    expect(fence.allowed(), 'not before the Lease is held').to.equal(false);
    await clock.advance(1000);
    expect(a.elector.isLeader()).to.equal(true);
    expect(fence.allowed()).to.equal(true);
    await clock.advance(30_000);
    expect(fence.allowed(), 'renewals keep it open').to.equal(true);
    // The API server stops answering Lease requests: the fence closes at the renew deadline after
    // the last renewal was sent, before anybody else may take the Lease (lease duration 15 s).
    const outageStart = clock.now();
    api.react((action) =>
      action.resource === 'leases.coordination.k8s.io'
        ? new UnavailableError('down', 503, 'ServiceUnavailable')
        : undefined,
    );
    let closedAt: number | undefined;
    for (let t = 0; t < 15_000 && closedAt === undefined; t += 100) {
      await clock.advance(100);
      if (!fence.allowed()) closedAt = clock.now();
    }
    // The last renewal was sent within one retry period (2 s) before the outage; the fence closes
    // the renew deadline (10 s) after it.
    expect(closedAt, 'the fence closed').to.not.equal(undefined);
    expect((closedAt ?? 0) - outageStart).to.be.within(8_000, 10_000);
    await clock.advance(5000);
    await a.done;
    expect(fence.allowed()).to.equal(false);
  });

  it('a standby measures the Lease on the monotonic clock: a wall-clock step forward does not let it take over while the fence is open', async () => {
    const fence = new LeaseFence(clock);
    const a = candidate('a', { fence, releaseOnCancel: false });
    await clock.advance(1000);
    expect(a.elector.isLeader()).to.equal(true);
    const b = candidate('b');
    await clock.advance(3000);
    expect(b.elector.isLeader()).to.equal(false);
    // The leader can no longer renew (its writes fail); the standby still reads the Lease. Then the
    // wall clock steps an hour forward (NTP, an operator): no time has really passed.
    api.react((action) =>
      action.resource === 'leases.coordination.k8s.io' &&
      action.verb === 'update' &&
      JSON.stringify(action.body).includes('"holderIdentity":"a"')
        ? new UnavailableError('down', 503, 'ServiceUnavailable')
        : undefined,
    );
    const stalledAt = clock.monotonic();
    // The standby reads the Lease's last record (one retry period, jittered), then the step comes.
    await clock.advance(2500);
    clock.stepWall(3_600_000);
    let takenAt: number | undefined;
    for (let t = 0; t < 30_000 && takenAt === undefined; t += 100) {
      await clock.advance(100);
      if (b.elector.isLeader()) {
        takenAt = clock.monotonic();
        expect(fence.allowed(), 'the old leader may still write').to.equal(false);
      }
    }
    expect(takenAt, 'the standby took over in the end').to.not.equal(undefined);
    // Not before the lease duration (15 s) after the last renewal it saw, which was at most one
    // retry period (2 s, jittered up to 20 %) before the leader's writes began to fail.
    expect((takenAt ?? 0) - stalledAt).to.be.at.least(15_000 - 2_400);
    a.abort.abort();
    b.abort.abort();
    await clock.advance(5000);
    await Promise.all([a.done, b.done]);
  });

  it('records a LeaderElection event when it acquires the Lease', async () => {
    const recorder = new FakeEventRecorder();
    const a = candidate('a', { recorder });
    await clock.advance(1000);
    expect(recorder.events).to.deep.equal([
      {
        subject: { kind: 'Lease', namespace: 'default', name: 'mcm' },
        type: 'Normal',
        reason: 'LeaderElection',
        message: 'a became leader',
      },
    ]);
    a.abort.abort();
    await clock.advance(3000);
    await a.done;
  });

  it('rejects timing settings that cannot work', () => {
    expect(
      () =>
        new LeaderElector({
          client: api,
          namespace: 'default',
          name: 'x',
          logger: nullLogger,
          leaseDurationMs: 10_000,
          renewDeadlineMs: 10_000,
          onStartedLeading: () => undefined,
          onStoppedLeading: () => undefined,
        }),
    ).to.throw(/lease duration must be greater/);
  });
});
