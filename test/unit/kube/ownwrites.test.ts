import { expect } from 'chai';

import { MachineResource, type Machine } from '../../../lib/api/types.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { OWN_WRITE_WAIT_MS, OwnWrites, OwnWritesClient } from '../../../lib/kube/ownwrites.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { Node } from '../../../lib/kube/types.js';
import { FakeKube } from '../../fakes/kube.js';

describe('OwnWrites: a controller’s own writes its cache does not show yet', () => {
  const KEY = 'default/m1';
  let clock: FakeClock;
  let cached: Map<string, string>;
  let writes: OwnWrites;

  beforeEach(() => {
    clock = new FakeClock(0);
    cached = new Map([[KEY, '10']]);
    writes = new OwnWrites(clock, (k) => cached.get(k));
  });

  it('has a reconcile from an older version wait until the cache shows the write', async () => {
    writes.wrote(KEY, '12');
    expect(writes.waitFor(KEY, '10')).to.equal(OWN_WRITE_WAIT_MS);
    await clock.advance(1_000);
    expect(writes.waitFor(KEY, '11'), 'an intermediate version is still older').to.equal(
      OWN_WRITE_WAIT_MS - 1_000,
    );
    expect(writes.waitFor(KEY, '12')).to.equal(undefined);
    expect(writes.size).to.equal(0);
  });

  it('stops waiting once the informer delivered the written version, whatever came after it', () => {
    writes.wrote(KEY, '12');
    writes.seen(KEY, '11');
    expect(writes.waitFor(KEY, '11')).to.not.equal(undefined);
    writes.seen(KEY, '12');
    writes.seen(KEY, '13');
    expect(writes.waitFor(KEY, '13')).to.equal(undefined);
  });

  it('records nothing when the cache already shows the write', () => {
    cached.set(KEY, '12');
    writes.wrote(KEY, '12');
    expect(writes.size).to.equal(0);
    expect(writes.waitFor(KEY, '12')).to.equal(undefined);
  });

  it('ends the wait after its limit when the written version never shows (a re-list skipped it)', async () => {
    writes.wrote(KEY, '12');
    await clock.advance(OWN_WRITE_WAIT_MS);
    expect(writes.waitFor(KEY, '14')).to.equal(undefined);
    expect(writes.size).to.equal(0);
  });

  it('forgets the writes of a deleted object', () => {
    writes.wrote(KEY, '12');
    writes.forget(KEY);
    expect(writes.waitFor(KEY, '10')).to.equal(undefined);
  });

  it('is fed by a client that notes the writes of its resource only, dry runs left out', async () => {
    const api = new FakeKube();
    const own = new OwnWrites(clock, () => undefined);
    const client = new OwnWritesClient(api, MachineResource, own);
    const m: Machine = {
      apiVersion: 'machine.sapcloud.io/v1alpha1',
      kind: 'Machine',
      metadata: { name: 'm1', namespace: 'default' },
    };
    const created = await client.create<Machine>(MachineResource, m, { namespace: 'default' });
    expect(own.waitFor(KEY, undefined), 'create').to.not.equal(undefined);
    expect(own.waitFor(KEY, created.metadata.resourceVersion)).to.equal(undefined);

    const patched = await client.patch<Machine>(
      MachineResource,
      'm1',
      { status: { currentStatus: { phase: 'Pending' } } },
      { type: 'merge', namespace: 'default', subresource: 'status' },
    );
    expect(own.waitFor(KEY, created.metadata.resourceVersion), 'status patch').to.not.equal(undefined);
    expect(own.waitFor(KEY, patched.metadata.resourceVersion)).to.equal(undefined);

    await client.patch<Machine>(
      MachineResource,
      'm1',
      { metadata: { labels: { a: 'b' } } },
      { type: 'merge', namespace: 'default', dryRun: true },
    );
    const node: Node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } };
    await client.create<Node>(CoreResources.nodes, node);
    expect(own.size, 'a dry run and another resource').to.equal(0);
  });
});
