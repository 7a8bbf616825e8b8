import { expect } from 'chai';

import type { Lease } from '../../lib/kube/types.js';
import { FakeClock } from '../../lib/kube/clock.js';
import { LeaseFence } from '../../lib/kube/fence.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { Leadership } from '../../lib/leadership.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { FakeKube } from '../fakes/kube.js';

const LEADER = 'machine-controller-manager';
const GUARD = 'machine-controller';

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
});
