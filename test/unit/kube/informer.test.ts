import { expect } from 'chai';

import type { KubeObject } from '../../../lib/kube/types.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { AsyncChannel, type WatchEvent, type WatchOptions } from '../../../lib/kube/client.js';
import { GoneError, UnavailableError } from '../../../lib/kube/errors.js';
import {
  CONTROLLER_UID_INDEX,
  Informer,
  NO_CONTROLLER,
  NO_STREAKS,
  SHORT_WATCH_MS,
  labelIndex,
  planRestart,
  type DeepReadonly,
  type Restart,
  type RoundEnd,
  type Streaks,
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
    expect(inf.someByIndex('tier', 'silver', (o) => o.metadata.name === 'b')).to.equal(true);
    expect(inf.someByIndex('tier', 'silver', (o) => o.metadata.name === 'a')).to.equal(false);
    expect(inf.someByIndex('tier', 'gold', () => true)).to.equal(false);
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

/** What the stub server does with one watch request. */
type WatchAnswer =
  /** HTTP 410 Gone instead of a stream. */
  | { kind: 'gone' }
  /** The connection is refused. */
  | { kind: 'refused' }
  /** A stream the server closes at once, without an event. */
  | { kind: 'close' }
  /** A stream whose first event is an ERROR with a 500 Status. */
  | { kind: 'errorEvent' }
  /**
   * A stream that sends `bookmarks` bookmarks, then after `lastsMs` of the fake clock closes
   * (or sends an ERROR event with a 410 Status when `then` is 'gone').
   */
  | { kind: 'stream'; bookmarks: number; lastsMs: number; then?: 'close' | 'gone' };

/**
 * The in-memory API with scripted watches: answer(n) says what the n-th watch request (from 1)
 * gets; lists are served by FakeKube. Each watch is answered after one turn of the event loop, as
 * a network answer would be, so that a retry loop without a delay spins through event-loop turns
 * (and shows in the counts) instead of starving the test of them.
 */
class ScriptedWatches extends FakeKube {
  /** When each watch request was sent. */
  readonly watchTimes: number[] = [];
  /** When each watch ended: its request failed, its stream closed or delivered its ERROR event. */
  readonly watchEnds: number[] = [];
  readonly listTimes: number[] = [];

  constructor(
    private readonly clock: FakeClock,
    private readonly answer: (n: number) => WatchAnswer,
  ) {
    super();
    this.seed(widgets, widget('a'));
    this.react((a) => {
      if (a.verb === 'list') this.listTimes.push(this.clock.now());
      return undefined;
    });
  }

  override async watch<T>(
    _res: ResourceType,
    opts: WatchOptions = {},
  ): Promise<AsyncIterableIterator<WatchEvent<T>>> {
    this.watchTimes.push(this.clock.now());
    const n = this.watchTimes.length;
    const answer = this.answer(n);
    await new Promise<void>((resolve) => setImmediate(resolve));
    const ended = (): void => {
      this.watchEnds[n - 1] = this.clock.now();
    };
    const status = (code: number, reason: string): WatchEvent<T> =>
      ({
        type: 'ERROR',
        object: { kind: 'Status', code, reason, message: reason },
      }) as unknown as WatchEvent<T>;
    const channel = new AsyncChannel<WatchEvent<T>>();
    switch (answer.kind) {
      case 'gone':
        ended();
        throw new GoneError('too old resource version', 410, 'Expired');
      case 'refused':
        ended();
        throw new UnavailableError('connect ECONNREFUSED', 0, 'ServiceUnavailable');
      case 'close':
        ended();
        channel.end();
        break;
      case 'errorEvent':
        ended();
        channel.push(status(500, 'InternalError'));
        break;
      case 'stream': {
        for (let i = 0; i < answer.bookmarks; i++) {
          const resourceVersion = String(1000 + n * 10 + i);
          channel.push({ type: 'BOOKMARK', object: { metadata: { resourceVersion } } } as WatchEvent<T>);
        }
        // Ends when the informer stops, like a real stream (stop() waits for the informer's loop).
        const onAbort = (): void => {
          channel.end();
        };
        opts.signal?.addEventListener('abort', onAbort, { once: true });
        this.clock.setTimeout(() => {
          opts.signal?.removeEventListener('abort', onAbort);
          ended();
          if (answer.then === 'gone') channel.push(status(410, 'Expired'));
          else channel.end();
        }, answer.lastsMs);
        break;
      }
    }
    return channel;
  }

  /** The pause before each watch after the first: from the end of the previous one. */
  pausesBeforeWatches(): number[] {
    return this.watchTimes.slice(1).map((t, i) => t - (this.watchEnds[i] ?? NaN));
  }

  /** The pause before each list after the first: from the end of the watch before it. */
  pausesBeforeLists(): number[] {
    return this.listTimes.slice(1).map((t, i) => t - (this.watchEnds[i] ?? NaN));
  }
}

/** Moves the fake clock on in small steps, each giving the event loop a few turns. */
async function drive(clock: FakeClock, ms: number, stepMs = 100): Promise<void> {
  for (let t = 0; t < ms; t += stepMs) await clock.advance(stepMs);
}

/** Whether each pause is the default backoff's i-th delay: 800 ms doubling to 30 s, plus 0–100 %. */
function growsLikeTheBackoff(pauses: number[]): boolean {
  return pauses.every((p, i) => {
    const base = Math.min(800 * 2 ** i, 30_000);
    return p >= base && p <= 2 * base;
  });
}

describe('Informer retry pacing (scripted watches, fake clock)', () => {
  let clock: FakeClock;
  let inf: Informer<Widget> | undefined;
  let logger: CapturingLogger;

  beforeEach(() => {
    clock = new FakeClock();
    logger = new CapturingLogger();
    inf = undefined;
  });

  afterEach(async () => {
    await inf?.stop();
  });

  /** An informer with the default backoff. */
  function start(answer: (n: number) => WatchAnswer): ScriptedWatches {
    const api = new ScriptedWatches(clock, answer);
    inf = new Informer<Widget>({ client: api, resource: widgets, logger, clock });
    inf.start();
    return api;
  }

  it('spaces re-lists by a growing backoff when every watch is answered with 410 Gone', async () => {
    const api = start(() => ({ kind: 'gone' }));
    await drive(clock, 60_000);
    const [first, ...backedOff] = api.pausesBeforeLists();
    const shown = `pauses before the lists: ${api.pausesBeforeLists().slice(0, 10).join(', ')}`;
    // The initial list, one re-list at once (one 410 is routine), then re-lists after 0.8–1.6 s,
    // 1.6–3.2 s, 3.2–6.4 s, 6.4–12.8 s, 12.8–25.6 s: 7 or 8 lists in the first minute.
    expect(api.listTimes.length, shown).to.be.within(7, 8);
    expect(first, shown).to.equal(0);
    expect(growsLikeTheBackoff(backedOff), shown).to.equal(true);
    const warnings = logger.lines.filter((l) => l.level === 'warn').map((l) => l.msg);
    expect(warnings, 'a warning for each 410 after the first').to.have.length(api.watchEnds.length - 1);
    expect(new Set(warnings)).to.deep.equal(
      new Set(['resourceVersion expired again, re-listing after a backoff']),
    );
  });

  it('backs off between watches that the server closes at once without an event, without re-listing', async () => {
    const api = start(() => ({ kind: 'close' }));
    await drive(clock, 60_000);
    const shown = `pauses before the watches: ${api.pausesBeforeWatches().slice(0, 10).join(', ')}`;
    // Watches after 0.8–1.6 s, 1.6–3.2 s, ...: 6 or 7 in the first minute.
    expect(api.watchTimes.length, shown).to.be.within(6, 7);
    expect(growsLikeTheBackoff(api.pausesBeforeWatches()), shown).to.equal(true);
    expect(api.listTimes).to.have.length(1);
    // The first short watch is logged at verbose, the next ones at warning; the requests themselves
    // succeeded, so the outage log has nothing to report.
    const levels = logger.lines
      .filter((l) => l.msg === 'watch ended at once without an event, retrying after a backoff')
      .map((l) => l.level);
    expect(levels.slice(0, 3)).to.deep.equal(['verbose', 'warn', 'warn']);
    expect(logger.lines.filter((l) => l.msg === 'list/watch failing repeatedly')).to.deep.equal([]);
  });

  for (const [what, healthy] of [
    ['delivered an event', { kind: 'stream', bookmarks: 1, lastsMs: 10_000 }],
    [
      'lasted without an event until the server ended it (a watch timeout)',
      { kind: 'stream', bookmarks: 0, lastsMs: 10_000 },
    ],
  ] as const) {
    it(`starts the backoff over after a watch that ${what}, and opens the next watch at once`, async () => {
      // Four watches closed at once grow the backoff to 6.4–12.8 s; the fifth is healthy.
      const api = start((n) => (n === 5 ? healthy : { kind: 'close' }));
      await drive(clock, 45_000);
      const pauses = api.pausesBeforeWatches();
      const shown = `pauses before the watches: ${pauses.slice(0, 10).join(', ')}`;
      expect(pauses.length, shown).to.be.at.least(6);
      expect(growsLikeTheBackoff(pauses.slice(0, 4)), shown).to.equal(true);
      expect(pauses[4], `${shown}: no pause after the healthy watch`).to.equal(0);
      expect(pauses[5], `${shown}: the backoff starts again from 0.8–1.6 s`).to.be.within(800, 1600);
    });
  }

  it('re-lists at once on a 410 Gone after a healthy watch, even after earlier 410s made it back off', async () => {
    // Watches 1–3 get 410 (a re-list at once, then two after a backoff); watch 4 delivers an event
    // and after 30 s ends with an ERROR 410; watch 5 and later stay healthy.
    const api = start((n) =>
      n <= 3
        ? { kind: 'gone' }
        : n === 4
          ? { kind: 'stream', bookmarks: 1, lastsMs: 30_000, then: 'gone' }
          : { kind: 'stream', bookmarks: 1, lastsMs: 3_600_000 },
    );
    await drive(clock, 60_000);
    const pauses = api.pausesBeforeLists();
    const shown = `pauses before the lists: ${pauses.join(', ')}`;
    expect(pauses, shown).to.have.length(4);
    expect(pauses[0], shown).to.equal(0);
    expect(growsLikeTheBackoff(pauses.slice(1, 3)), shown).to.equal(true);
    expect(pauses[3], `${shown}: the 410 that ended the healthy watch re-lists at once`).to.equal(0);
    expect(api.watchTimes.at(-1), 'and the next watch follows at once').to.equal(api.listTimes.at(-1));
  });

  it('counts each refused watch once in the outage log, and reports the recovery once a watch works', async () => {
    start((n) => (n <= 3 ? { kind: 'refused' } : { kind: 'stream', bookmarks: 1, lastsMs: 3_600_000 }));
    await drive(clock, 30_000);
    const lines = logger.lines.filter((l) => l.level === 'warn' || l.level === 'info');
    expect(lines.map((l) => [l.level, l.msg])).to.deep.equal([
      ['warn', 'list/watch failing repeatedly'],
      ['info', 'list/watch recovered'],
    ]);
    expect(lines[1]?.fields).to.include({ failures: 3 });
  });

  for (const [what, answer] of [
    ['is refused', { kind: 'refused' }],
    ['ends with an ERROR event other than 410', { kind: 'errorEvent' }],
  ] as const) {
    it(`backs off between watches when every watch ${what}, without re-listing`, async () => {
      const api = start(() => answer);
      await drive(clock, 60_000);
      const shown = `pauses before the watches: ${api.pausesBeforeWatches().slice(0, 10).join(', ')}`;
      expect(api.watchTimes.length, shown).to.be.within(6, 7);
      expect(growsLikeTheBackoff(api.pausesBeforeWatches()), shown).to.equal(true);
      expect(api.listTimes).to.have.length(1);
    });
  }
});

describe('planRestart (what the informer does after a list/watch round)', () => {
  const none: Streaks = NO_STREAKS;
  const cases: [string, RoundEnd, Streaks, Restart][] = [
    [
      'a watch the server ended after a second without events (its timeout): at once, backoff reset',
      { how: 'closed', events: 0, watchMs: SHORT_WATCH_MS },
      { expired: 1, short: 2 },
      { resetBackoff: true, relist: false, backoff: false, streaks: none },
    ],
    [
      'a watch the server ended at once after an event: at once, backoff reset',
      { how: 'closed', events: 1, watchMs: 0 },
      { expired: 0, short: 3 },
      { resetBackoff: true, relist: false, backoff: false, streaks: none },
    ],
    [
      'a watch the server ended within a second without events: backoff, same resourceVersion',
      { how: 'closed', events: 0, watchMs: SHORT_WATCH_MS - 1 },
      { expired: 1, short: 1 },
      { resetBackoff: false, relist: false, backoff: true, streaks: { expired: 1, short: 2 } },
    ],
    [
      'the first 410 since a healthy watch: re-list at once',
      { how: 'expired', events: 0, watchMs: 0 },
      none,
      { resetBackoff: false, relist: true, backoff: false, streaks: { expired: 1, short: 0 } },
    ],
    [
      'a second 410 without a healthy watch between: re-list after a backoff',
      { how: 'expired', events: 0, watchMs: 0 },
      { expired: 1, short: 0 },
      { resetBackoff: false, relist: true, backoff: true, streaks: { expired: 2, short: 0 } },
    ],
    [
      'a 410 that ends a watch which delivered events: re-list at once, backoff reset',
      { how: 'expired', events: 4, watchMs: 300_000 },
      { expired: 3, short: 0 },
      { resetBackoff: true, relist: true, backoff: false, streaks: { expired: 1, short: 0 } },
    ],
    [
      'a 410 that ends a long watch without events: no progress, so the 410s in a row count on',
      { how: 'expired', events: 0, watchMs: 300_000 },
      { expired: 1, short: 0 },
      { resetBackoff: false, relist: true, backoff: true, streaks: { expired: 2, short: 0 } },
    ],
    [
      'another error: backoff, same resourceVersion',
      { how: 'failed', events: 0, watchMs: 300_000 },
      { expired: 1, short: 1 },
      { resetBackoff: false, relist: false, backoff: true, streaks: { expired: 1, short: 1 } },
    ],
    [
      'another error after events: backoff from its initial delay',
      { how: 'failed', events: 2, watchMs: 10 },
      { expired: 1, short: 1 },
      { resetBackoff: true, relist: false, backoff: true, streaks: none },
    ],
  ];
  for (const [what, end, before, want] of cases) {
    it(what, () => {
      expect(planRestart(end, before)).to.deep.equal(want);
    });
  }
});
