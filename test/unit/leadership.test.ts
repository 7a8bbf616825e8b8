import { expect } from 'chai';

import type { WriteOptions } from '../../lib/kube/client.js';
import type { KubeObject, Lease } from '../../lib/kube/types.js';
import { FakeClock } from '../../lib/kube/clock.js';
import { LeaseFence } from '../../lib/kube/fence.js';
import { CoreResources, type ResourceType } from '../../lib/kube/resources.js';
import { Leadership } from '../../lib/leadership.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { FakeKube } from '../fakes/kube.js';

const LEADER = 'machine-controller-manager';
const GUARD = 'machine-controller';

/** Holds replica a's updates of the leader Lease while hold()'s gate is closed: renewals in flight. */
class GatedKube extends FakeKube {
  private gate: Promise<void> | undefined;
  inFlight = 0;

  hold(): () => void {
    let open = (): void => undefined;
    this.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    return () => {
      this.gate = undefined;
      open();
    };
  }

  override async update<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T> {
    const gate = this.gate;
    const renewal = obj.metadata.name === LEADER && (obj as Lease).spec?.holderIdentity === 'a';
    if (gate !== undefined && renewal) {
      this.inFlight++;
      await gate;
    }
    return super.update(res, obj, opts);
  }
}

describe('Leadership (the leader Lease and the machine-controller Lease beside it; fake API, fake clock)', () => {
  let api: FakeKube;
  let clock: FakeClock;
  let fence: LeaseFence;
  let stopping: boolean;

  beforeEach(() => {
    api = new FakeKube();
    clock = new FakeClock();
    fence = new LeaseFence(clock);
    stopping = false;
  });

  interface Replica {
    leadership: Leadership;
    led: number;
    lost: string[];
  }

  function replica(identity = 'a', { guard = true } = {}): Replica {
    const r: Partial<Replica> = { led: 0, lost: [] };
    r.leadership = new Leadership({
      lease: { client: api, namespace: 'default', logger: nullLogger },
      clock,
      leaseName: LEADER,
      guardLeaseName: guard ? GUARD : undefined,
      fence,
      identity,
      isStopping: () => stopping,
      onLead: () => {
        r.led = (r.led ?? 0) + 1;
      },
      onLost: (why) => r.lost?.push(why),
    });
    r.leadership.start();
    return r as Replica;
  }

  const holder = (name: string): string =>
    api.peek<Lease>(CoreResources.leases, name, 'default')?.spec?.holderIdentity ?? '';

  /** Another process writes itself into the Lease (gardener's machine-controller, another replica). */
  async function takeOver(name: string, identity: string): Promise<void> {
    const lease = await api.get<Lease>(CoreResources.leases, name, 'default');
    const now = new Date(clock.now()).toISOString();
    await api.update(CoreResources.leases, {
      ...lease,
      spec: { ...lease.spec, holderIdentity: identity, acquireTime: now, renewTime: now },
    });
  }

  /** Writes by which this replica holds a Lease: acquisitions and renewals (not releases). */
  const holds = (name: string, identity = 'a'): number =>
    api.actions.filter(
      (x) =>
        (x.verb === 'update' || x.verb === 'create') &&
        x.name === name &&
        (x.body as Lease | undefined)?.spec?.holderIdentity === identity,
    ).length;

  async function stop(r: Replica): Promise<void> {
    stopping = true;
    const stopped = r.leadership.stop();
    await clock.advance(3000);
    await stopped;
  }

  it('leads once it holds both Leases, and gives both up on stop', async () => {
    const a = replica();
    await clock.advance(1000);
    expect(a.leadership.isLeading()).to.equal(true);
    expect(a.led).to.equal(1);
    expect([holder(LEADER), holder(GUARD)]).to.deep.equal(['a', 'a']);
    expect(fence.allowed()).to.equal(true);
    await stop(a);
    expect(a.lost, 'stopping is not a loss').to.deep.equal([]);
    expect([holder(LEADER), holder(GUARD)]).to.deep.equal(['', '']);
    expect(a.leadership.isLeading()).to.equal(false);
  });

  it('does not lead while another process holds the machine-controller Lease, and leads once it lets go', async () => {
    const gardeners: Lease = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: GUARD, namespace: 'default' },
      spec: { holderIdentity: 'gardener', leaseDurationSeconds: 15, renewTime: new Date(0).toISOString() },
    };
    api.seed(CoreResources.leases, gardeners);
    const a = replica();
    for (let i = 0; i < 10; i++) {
      await clock.advance(2000);
      await takeOver(GUARD, 'gardener'); // gardener's machine-controller renews
    }
    expect(holder(LEADER)).to.equal('a');
    expect(a.led, 'the controllers wait').to.equal(0);
    await clock.advance(20_000); // gardener's stopped renewing: its Lease expires
    expect(holder(GUARD)).to.equal('a');
    expect(a.led).to.equal(1);
    await stop(a);
  });

  it('without a second Lease, leads on the leader Lease alone', async () => {
    const a = replica('a', { guard: false });
    await clock.advance(1000);
    expect(a.led).to.equal(1);
    expect(api.peek<Lease>(CoreResources.leases, GUARD, 'default')).to.equal(undefined);
    await stop(a);
  });

  it('losing the machine-controller Lease closes the fence for good: the leader Lease’s later renewals do not reopen it', async () => {
    const a = replica();
    await clock.advance(1000);
    expect(fence.allowed()).to.equal(true);
    await takeOver(GUARD, 'gardener');
    await clock.advance(2500); // the guard's next renewal finds gardener's machine-controller holding it
    expect(a.lost).to.deep.equal([`the ${GUARD} Lease was lost`]);
    expect(fence.allowed()).to.equal(false);
    for (let t = 0; t < 30_000; t += 500) {
      await clock.advance(500);
      expect(fence.allowed(), `${t + 500} ms after the loss`).to.equal(false);
    }
    expect(() => {
      fence.check('PATCH /machines/m1');
    }).to.throw(/the machine-controller Lease was lost/);
    await stop(a);
  });

  it('a leader-Lease renewal in flight when the machine-controller Lease is lost does not reopen the fence when its answer arrives', async () => {
    const gated = new GatedKube();
    api = gated;
    const a = replica();
    await clock.advance(1000);
    expect(fence.allowed()).to.equal(true);
    const open = gated.hold();
    await clock.advance(2000); // the leader Lease's renewal is sent and waits for its answer
    expect(gated.inFlight, 'a renewal in flight').to.equal(1);
    await takeOver(GUARD, 'gardener');
    await clock.advance(2500);
    expect(a.lost).to.deep.equal([`the ${GUARD} Lease was lost`]);
    expect(fence.allowed()).to.equal(false);
    const closed = fence.signal;
    open(); // the renewal succeeded (sent 3.5 s ago, well within the renew deadline)
    await clock.advance(10);
    expect(fence.allowed(), 'the late answer does not reopen it').to.equal(false);
    // Not even for a moment: a reopened fence hands out a fresh signal, which writers would take.
    expect(fence.signal, 'the signal aborted at the loss is still the one').to.equal(closed);
    await stop(a);
  });

  it('losing the machine-controller Lease ends the leader election: no renewal after the loss, and the replica never leads again (it stands by)', async () => {
    const a = replica();
    await clock.advance(1000);
    await takeOver(GUARD, 'gardener');
    await clock.advance(2500);
    expect(a.lost).to.deep.equal([`the ${GUARD} Lease was lost`]);
    const renewals = holds(LEADER);
    // Gardener's machine-controller stops too: both Leases expire or are free, yet none is taken.
    await clock.advance(60_000);
    expect(holds(LEADER), 'no renewal or acquisition of the leader Lease after the loss').to.equal(renewals);
    expect(holds(GUARD)).to.equal(1);
    expect(a.leadership.isLeading()).to.equal(false);
    expect(a.led).to.equal(1);
    expect(a.lost, 'reported once').to.have.length(1);
    expect(fence.allowed()).to.equal(false);
    await stop(a);
  });

  it('losing the machine-controller Lease releases the leader Lease at once, so another replica leads without waiting for it to expire', async () => {
    const a = replica();
    await clock.advance(1000);
    await takeOver(GUARD, 'gardener');
    await clock.advance(2500);
    expect(a.lost).to.deep.equal([`the ${GUARD} Lease was lost`]);
    await clock.advance(10);
    expect(holder(LEADER)).to.equal('');
    await stop(a);
  });

  it('a replica that lost the machine-controller Lease does not release a leader Lease another replica has taken meanwhile', async () => {
    const gated = new GatedKube();
    api = gated;
    const a = replica();
    await clock.advance(1000);
    const open = gated.hold();
    await clock.advance(2000); // a renewal waits; replica b takes the Lease before it arrives
    await takeOver(LEADER, 'b');
    await takeOver(GUARD, 'gardener');
    await clock.advance(2500);
    expect(a.lost).to.deep.equal([`the ${GUARD} Lease was lost`]);
    open(); // the renewal fails (a conflict), and so would a release: the Lease is no longer ours
    await clock.advance(10);
    expect(holder(LEADER)).to.equal('b');
    await stop(a);
  });

  it('losing the leader Lease is for good too: the machine-controller Lease is released, and neither is taken again once free', async () => {
    const a = replica();
    await clock.advance(1000);
    await takeOver(LEADER, 'b');
    await clock.advance(2500); // the next renewal finds replica b holding it
    expect(a.lost).to.deep.equal(['leadership lost']);
    expect(a.leadership.isLeading()).to.equal(false);
    expect(fence.allowed()).to.equal(false);
    await clock.advance(10);
    expect(holder(GUARD), 'released').to.equal('');
    const [leaderHolds, guardHolds] = [holds(LEADER), holds(GUARD)];
    await clock.advance(60_000); // replica b crashed: its Lease expires
    expect([holds(LEADER), holds(GUARD)], 'nothing taken or renewed after the loss').to.deep.equal([
      leaderHolds,
      guardHolds,
    ]);
    expect(a.leadership.isLeading()).to.equal(false);
    expect(a.lost).to.have.length(1);
    expect(fence.allowed()).to.equal(false);
    await stop(a);
  });
});
