import { expect } from 'chai';

import type { KubeObject } from '../../../lib/kube/types.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { UnavailableError } from '../../../lib/kube/errors.js';
import {
  CONTROLLER_UID_INDEX,
  Informer,
  NO_CONTROLLER,
  labelIndex,
  type DeepReadonly,
} from '../../../lib/kube/informer.js';
import type { ResourceType } from '../../../lib/kube/resources.js';
import { CapturingLogger, nullLogger } from '../../../lib/observability/logger.js';
import { FakeKube } from '../../fakes/kube.js';
import { eventually } from '../helpers/eventually.js';

const widgets: ResourceType = {
  group: 'example.com',
  version: 'v1',
  plural: 'widgets',
  kind: 'Widget',
  namespaced: true,
};

interface Widget extends KubeObject {
  spec?: { size?: number };
}

const widget = (name: string, extra: Partial<Widget['metadata']> = {}): Widget => ({
  apiVersion: 'example.com/v1',
  kind: 'Widget',
  metadata: { name, namespace: 'ns', ...extra },
  spec: { size: 1 },
});

interface Seen {
  adds: { name: string; initial: boolean }[];
  updates: { name: string; oldRV: string; newRV: string }[];
  deletes: { name: string; unknown: boolean }[];
}

function track(inf: Informer<Widget>): Seen {
  const seen: Seen = { adds: [], updates: [], deletes: [] };
  inf.addHandler({
    onAdd: (o, initial) => seen.adds.push({ name: o.metadata.name ?? '', initial }),
    onUpdate: (o, n) =>
      seen.updates.push({
        name: n.metadata.name ?? '',
        oldRV: o.metadata.resourceVersion ?? '',
        newRV: n.metadata.resourceVersion ?? '',
      }),
    onDelete: (o, unknown) => seen.deletes.push({ name: o.metadata.name ?? '', unknown }),
  });
  return seen;
}

describe('Informer (against the in-memory API)', () => {
  let api: FakeKube;
  let inf: Informer<Widget>;

  beforeEach(() => {
    api = new FakeKube();
    api.seed(widgets, widget('a'), widget('b', { labels: { tier: 'gold' } }));
  });

  afterEach(async () => {
    await inf.stop();
  });

  function newInformer(extra: Partial<ConstructorParameters<typeof Informer>[0]> = {}): Informer<Widget> {
    inf = new Informer<Widget>({
      client: api,
      resource: widgets,
      logger: nullLogger,
      backoff: { initialMs: 1, maxMs: 2 },
      ...extra,
    });
    return inf;
  }

  it('delivers the initial list as adds flagged initial, then reports synced', async () => {
    newInformer();
    const seen = track(inf);
    inf.start();
    await inf.waitForSync();
    expect(inf.hasSynced()).to.equal(true);
    expect(seen.adds.map((a) => a.name).sort()).to.deep.equal(['a', 'b']);
    expect(seen.adds.every((a) => a.initial)).to.equal(true);
  });

  it('applies watch events and gives update handlers the old and the new object', async () => {
    newInformer();
    const seen = track(inf);
    inf.start();
    await inf.waitForSync();
    const a = await api.get<Widget>(widgets, 'a', 'ns');
    a.spec = { size: 5 };
    await api.update(widgets, a);
    await api.create(widgets, widget('c'));
    await api.delete(widgets, 'b', { namespace: 'ns' });
    await eventually(() => seen.deletes.length === 1 && inf.get('ns', 'c') !== undefined, 'events applied');
    expect(inf.get('ns', 'a')?.spec?.size).to.equal(5);
    expect(seen.updates).to.have.length(1);
    expect(seen.updates[0]?.oldRV).to.not.equal(seen.updates[0]?.newRV);
    expect(seen.adds.find((x) => x.name === 'c')?.initial).to.equal(false);
    expect(seen.deletes).to.deep.equal([{ name: 'b', unknown: false }]);
    expect(inf.get('ns', 'b')).to.equal(undefined);
  });

  it('re-lists after 410 Gone and delivers objects deleted meanwhile as final-state-unknown deletes', async () => {
    newInformer();
    const seen = track(inf);
    inf.start();
    await inf.waitForSync();
    // Simulate an outage during which an object is deleted and history is compacted away.
    let down = true;
    api.react((action) =>
      down && action.verb === 'watch'
        ? new UnavailableError('connection refused', 0, 'ServiceUnavailable')
        : undefined,
    );
    api.closeWatches();
    await api.delete(widgets, 'a', { namespace: 'ns' });
    api.compact();
    down = false;
    await eventually(() => inf.get('ns', 'a') === undefined, 'a removed after re-list');
    const listCalls = api.actions.filter((x) => x.verb === 'list').length;
    expect(listCalls).to.be.at.least(2);
    expect(seen.deletes.find((d) => d.name === 'a')).to.deep.equal({ name: 'a', unknown: true });
  });

  it('keeps indexes (namespace, controller owner UID, label value) in step with the cache', async () => {
    newInformer();
    inf.addIndexer('tier', labelIndex('tier'));
    inf.start();
    await inf.waitForSync();
    expect(inf.byIndex('tier', 'gold').map((o) => o.metadata.name)).to.deep.equal(['b']);
    const b = await api.get<Widget>(widgets, 'b', 'ns');
    b.metadata.labels = { tier: 'silver' };
    b.metadata.ownerReferences = [
      { apiVersion: 'v1', kind: 'X', name: 'x', uid: 'owner-1', controller: true },
    ];
    await api.update(widgets, b);
    await eventually(() => inf.byIndex('tier', 'silver').length === 1, 'label index updated');
    expect(inf.byIndex('tier', 'gold')).to.deep.equal([]);
    expect(inf.byIndex(CONTROLLER_UID_INDEX, 'owner-1').map((o) => o.metadata.name)).to.deep.equal(['b']);
    expect(inf.list('ns')).to.have.length(2);
    expect(inf.list('other')).to.have.length(0);
  });

  it('indexes objects without a controller reference under NO_CONTROLLER and drops managedFields', async () => {
    api.seed(widgets, {
      ...widget('c'),
      metadata: { ...widget('c').metadata, managedFields: [{ manager: 'kubectl' }] },
    });
    newInformer();
    inf.start();
    await inf.waitForSync();
    expect(
      inf
        .byIndex(CONTROLLER_UID_INDEX, NO_CONTROLLER)
        .map((o) => o.metadata.name)
        .sort(),
    ).to.deep.equal(['a', 'b', 'c']);
    expect(inf.get('ns', 'c')?.metadata.managedFields).to.equal(undefined);
  });

  it('hands out frozen objects, so a mutation of the cache throws', async () => {
    newInformer();
    inf.start();
    await inf.waitForSync();
    const a = inf.get('ns', 'a') as DeepReadonly<Widget>;
    expect(() => {
      (a.metadata as { name?: string }).name = 'changed';
    }).to.throw(TypeError);
    expect(Object.isFrozen(a.spec)).to.equal(true);
  });

  it('keeps delivering to other handlers when one throws, and logs the failure', async () => {
    const log = new CapturingLogger();
    newInformer({ logger: log });
    inf.addHandler({
      onAdd: () => {
        throw new Error('boom');
      },
    });
    const seen = track(inf);
    inf.start();
    await inf.waitForSync();
    expect(seen.adds).to.have.length(2);
    expect(log.lines.filter((l) => l.level === 'error' && l.msg === 'event handler failed')).to.have.length(
      2,
    );
  });

  it('replays every cached object as an update on each resync period', async () => {
    const clock = new FakeClock();
    newInformer({ clock, resyncPeriodMs: 60_000 });
    const seen = track(inf);
    inf.start();
    await inf.waitForSync();
    expect(seen.updates).to.have.length(0);
    await clock.advance(60_000);
    expect(seen.updates.map((u) => u.name).sort()).to.deep.equal(['a', 'b']);
    expect(seen.updates.every((u) => u.oldRV === u.newRV)).to.equal(true);
  });

  it('lists and watches only what the label selector selects', async () => {
    newInformer({ labelSelector: 'tier=gold' });
    inf.start();
    await inf.waitForSync();
    expect(inf.keys()).to.deep.equal(['ns/b']);
    await api.create(widgets, widget('d', { labels: { tier: 'gold' } }));
    await api.create(widgets, widget('e'));
    await eventually(() => inf.size() === 2, 'gold widget d added');
    expect(inf.keys().sort()).to.deep.equal(['ns/b', 'ns/d']);
  });

  it('warns once when list/watch fails repeatedly and says once at info when it recovers', async () => {
    const logger = new CapturingLogger();
    let failures = 3;
    api.react((a) => {
      if (a.verb !== 'list' || failures === 0) return undefined;
      failures--;
      return new UnavailableError('connection refused', 0, 'ServiceUnavailable');
    });
    newInformer({ logger });
    inf.start();
    await inf.waitForSync();
    const lines = logger.lines.filter((l) => l.level === 'warn' || l.level === 'info');
    expect(lines.map((l) => [l.level, l.msg])).to.deep.equal([
      ['warn', 'list/watch failing repeatedly'],
      ['info', 'list/watch recovered'],
    ]);
    expect(lines[1]?.fields).to.include({ failures: 3 });
  });

  it('keeps a single failure (a dropped watch) out of the default log', async () => {
    const logger = new CapturingLogger();
    let failures = 1;
    api.react((a) => {
      if (a.verb !== 'list' || failures === 0) return undefined;
      failures--;
      return new UnavailableError('connection reset', 0, 'ServiceUnavailable');
    });
    newInformer({ logger });
    inf.start();
    await inf.waitForSync();
    expect(logger.lines.filter((l) => l.level === 'warn' || l.level === 'info')).to.deep.equal([]);
    expect(logger.lines.map((l) => l.msg)).to.include('list/watch failed, retrying');
  });

  it('retryNow ends a backoff wait at once (after an outage is known to be over)', async () => {
    const clock = new FakeClock();
    let down = true;
    api.react((a) =>
      down && a.verb === 'list'
        ? new UnavailableError('connection refused', 0, 'ServiceUnavailable')
        : undefined,
    );
    newInformer({ clock, backoff: { initialMs: 60_000, maxMs: 60_000 } });
    inf.start();
    await eventually(() => api.actions.some((a) => a.verb === 'list'), 'first list attempt');
    down = false;
    await clock.advance(1000);
    expect(inf.hasSynced(), 'still waiting out the 60 s backoff').to.equal(false);
    inf.retryNow();
    await inf.waitForSync();
    expect(inf.keys().sort()).to.deep.equal(['ns/a', 'ns/b']);
  });

  it('gives late handlers the current cache as adds', async () => {
    newInformer();
    inf.start();
    await inf.waitForSync();
    const seen = track(inf);
    expect(seen.adds.map((a) => a.name).sort()).to.deep.equal(['a', 'b']);
  });
});
