import { expect } from 'chai';
import fc from 'fast-check';
import type { Registry } from 'prom-client';
import { FakeClock, flushMicrotasks } from '../../../lib/kube/clock.js';
import { ItemExponentialFailureRateLimiter } from '../../../lib/kube/ratelimit.js';
import { WorkQueue, type GetResult } from '../../../lib/kube/workqueue.js';
import { newRegistry } from '../../../lib/observability/metrics.js';

/** Reads one sample; `series` selects a histogram's _sum/_count. */
/** prom-client's typings omit the metricName that histogram samples carry. */
function seriesName(v: object, metric: string): string {
  return 'metricName' in v && typeof v.metricName === 'string' ? v.metricName : metric;
}

async function sample(
  registry: Registry,
  metric: string,
  labels: Record<string, string>,
  series: string = metric,
): Promise<number | undefined> {
  const all = await registry.getMetricsAsJSON();
  const values = all.find((m) => m.name === metric)?.values ?? [];
  const hit = values.find(
    (v) =>
      seriesName(v, metric) === series && Object.entries(labels).every(([k, want]) => v.labels[k] === want),
  );
  return hit?.value;
}

function itemOf<T>(r: GetResult<T>): T {
  if (r.shutdown) throw new Error('expected an item, got shutdown');
  return r.item;
}

/** Tracks whether a promise has settled without awaiting it. */
function track<T>(p: Promise<T>): { settled: () => boolean; value: () => T | undefined } {
  let settled = false;
  let value: T | undefined;
  void p.then((v) => {
    settled = true;
    value = v;
  });
  return { settled: () => settled, value: () => value };
}

describe('WorkQueue', () => {
  let clock: FakeClock;
  let queue: WorkQueue;

  beforeEach(() => {
    clock = new FakeClock();
    queue = new WorkQueue({
      name: 'test',
      clock,
      rateLimiter: new ItemExponentialFailureRateLimiter(10, 1000),
    });
  });

  afterEach(() => {
    queue.shutDown();
  });

  it('hands items out in the order they were added', async () => {
    queue.add('a');
    queue.add('b');
    queue.add('c');
    const got = [itemOf(await queue.get()), itemOf(await queue.get()), itemOf(await queue.get())];
    expect(got).to.deep.equal(['a', 'b', 'c']);
  });

  it('hands out an item added several times before processing only once', async () => {
    queue.add('a');
    queue.add('b');
    queue.add('a');
    queue.add('a');
    expect(queue.len()).to.equal(2);
    expect(itemOf(await queue.get())).to.equal('a');
    expect(itemOf(await queue.get())).to.equal('b');
    expect(queue.len()).to.equal(0);
  });

  it('does not hand an in-flight item to a second worker; re-adds it after done', async () => {
    queue.add('a');
    expect(itemOf(await queue.get())).to.equal('a');
    queue.add('a');
    expect(queue.len()).to.equal(0);
    const second = track(queue.get());
    await flushMicrotasks();
    expect(second.settled()).to.be.false;
    queue.done('a');
    await flushMicrotasks();
    expect(second.value()).to.deep.equal({ item: 'a', shutdown: false });
  });

  it('does not requeue an item that was not re-added while in flight', async () => {
    queue.add('a');
    queue.done(itemOf(await queue.get()));
    expect(queue.len()).to.equal(0);
  });

  it('wakes a waiting get() when an item is added', async () => {
    const waiting = track(queue.get());
    await flushMicrotasks();
    expect(waiting.settled()).to.be.false;
    queue.add('a');
    await flushMicrotasks();
    expect(waiting.value()).to.deep.equal({ item: 'a', shutdown: false });
  });

  it('addAfter makes the item available only once the delay has passed', async () => {
    queue.addAfter('a', 100);
    expect(queue.len()).to.equal(0);
    await clock.advance(99);
    expect(queue.len()).to.equal(0);
    await clock.advance(1);
    expect(queue.len()).to.equal(1);
  });

  it('addAfter with a non-positive delay adds immediately', () => {
    queue.addAfter('a', 0);
    queue.addAfter('b', -5);
    expect(queue.len()).to.equal(2);
  });

  it('addAfter keeps the earliest pending time for the same item', async () => {
    queue.addAfter('a', 500);
    queue.addAfter('a', 100);
    queue.addAfter('a', 300);
    await clock.advance(100);
    expect(queue.len()).to.equal(1);
    queue.done(itemOf(await queue.get()));
    await clock.advance(1000);
    expect(queue.len(), 'later duplicates were superseded, not kept').to.equal(0);
    expect(clock.pendingTimers()).to.equal(0);
  });

  it('addAfter waits out delays longer than a Node timer can hold', async () => {
    const day = 24 * 3600 * 1000;
    queue.addAfter('a', 30 * day);
    await clock.advance(25 * day);
    expect(queue.len()).to.equal(0);
    await clock.advance(5 * day);
    expect(queue.len()).to.equal(1);
  });

  it('addRateLimited backs off per item and forget resets the backoff', async () => {
    queue.addRateLimited('a'); // 10 ms
    queue.addRateLimited('a'); // 20 ms, superseded by the earlier 10 ms
    expect(queue.numRequeues('a')).to.equal(2);
    await clock.advance(10);
    queue.done(itemOf(await queue.get()));
    queue.addRateLimited('a'); // 40 ms
    await clock.advance(39);
    expect(queue.len()).to.equal(0);
    await clock.advance(1);
    expect(queue.len()).to.equal(1);
    queue.forget('a');
    expect(queue.numRequeues('a')).to.equal(0);
  });

  it('shutDown wakes every waiting get() with shutdown', async () => {
    const waiters = [track(queue.get()), track(queue.get())];
    queue.shutDown();
    await flushMicrotasks();
    expect(waiters.map((w) => w.value())).to.deep.equal([{ shutdown: true }, { shutdown: true }]);
    expect(queue.shuttingDown()).to.be.true;
  });

  it('after shutDown ignores adds and does not hand out queued items', async () => {
    queue.add('a');
    queue.shutDown();
    queue.add('b');
    expect(await queue.get()).to.deep.equal({ shutdown: true });
  });

  it('shutDown cancels pending delayed adds so the process can exit', () => {
    queue.addAfter('a', 1000);
    queue.addRateLimited('b');
    expect(clock.pendingTimers()).to.equal(2);
    queue.shutDown();
    expect(clock.pendingTimers()).to.equal(0);
  });

  it('shutDownWithDrain hands out queued items and resolves once in-flight items are done', async () => {
    queue.add('a');
    queue.add('b');
    const a = itemOf(await queue.get());
    queue.add('a'); // re-added while in flight: must still be processed during the drain
    const drained = track(queue.shutDownWithDrain());
    queue.add('c'); // refused: the queue is shutting down
    expect(itemOf(await queue.get())).to.equal('b');
    queue.done('b');
    await flushMicrotasks();
    expect(drained.settled(), 'a is still in flight').to.be.false;
    queue.done(a);
    expect(itemOf(await queue.get())).to.equal('a');
    await flushMicrotasks();
    expect(drained.settled(), 'the re-added a is in flight').to.be.false;
    queue.done('a');
    await flushMicrotasks();
    expect(drained.settled()).to.be.true;
    expect(await queue.get()).to.deep.equal({ shutdown: true });
  });

  it('shutDownWithDrain resolves at once when nothing is queued or in flight', async () => {
    await queue.shutDownWithDrain();
    expect(await queue.get()).to.deep.equal({ shutdown: true });
  });

  it('shutDown during a drain ends the drain', async () => {
    queue.add('a');
    itemOf(await queue.get());
    const drained = track(queue.shutDownWithDrain());
    queue.shutDown();
    await flushMicrotasks();
    expect(drained.settled()).to.be.true;
  });

  it('ignores done() for an item that is not in flight', async () => {
    queue.add('a');
    queue.done('a');
    expect(queue.len()).to.equal(1);
    expect(itemOf(await queue.get())).to.equal('a');
  });
});

describe('WorkQueue metrics', () => {
  it('reports depth, adds, latency and work duration with the queue name as label', async () => {
    const clock = new FakeClock();
    const registry = newRegistry();
    const q = new WorkQueue({ name: 'machines', clock, registry });
    const l = { name: 'machines' };
    q.add('a');
    q.add('b');
    q.add('a');
    expect(await sample(registry, 'workqueue_depth', l)).to.equal(2);
    expect(await sample(registry, 'workqueue_adds_total', l)).to.equal(2);
    await clock.advance(250);
    const a = itemOf(await q.get());
    expect(await sample(registry, 'workqueue_depth', l)).to.equal(1);
    expect(
      await sample(registry, 'workqueue_queue_duration_seconds', l, 'workqueue_queue_duration_seconds_sum'),
    ).to.equal(0.25);
    await clock.advance(1500);
    q.done(a);
    expect(
      await sample(registry, 'workqueue_work_duration_seconds', l, 'workqueue_work_duration_seconds_count'),
    ).to.equal(1);
    expect(
      await sample(registry, 'workqueue_work_duration_seconds', l, 'workqueue_work_duration_seconds_sum'),
    ).to.equal(1.5);
    q.shutDown();
  });

  it('computes unfinished work and the longest running processor at scrape time', async () => {
    const clock = new FakeClock();
    const registry = newRegistry();
    const q = new WorkQueue({ name: 'q', clock, registry });
    const l = { name: 'q' };
    q.add('a');
    const a = itemOf(await q.get());
    await clock.advance(2000);
    q.add('b');
    const b = itemOf(await q.get());
    await clock.advance(1000);
    expect(await sample(registry, 'workqueue_unfinished_work_seconds', l)).to.equal(4);
    expect(await sample(registry, 'workqueue_longest_running_processor_seconds', l)).to.equal(3);
    q.done(a);
    q.done(b);
    expect(await sample(registry, 'workqueue_unfinished_work_seconds', l)).to.equal(0);
    expect(await sample(registry, 'workqueue_longest_running_processor_seconds', l)).to.equal(0);
    q.shutDown();
  });

  it('counts every delayed and rate-limited add as a retry', async () => {
    const clock = new FakeClock();
    const registry = newRegistry();
    const q = new WorkQueue({ name: 'q', clock, registry });
    expect(await sample(registry, 'workqueue_retries_total', { name: 'q' })).to.equal(0);
    q.addAfter('a', 10);
    q.addRateLimited('b');
    expect(await sample(registry, 'workqueue_retries_total', { name: 'q' })).to.equal(2);
    q.shutDown();
  });

  it('lets two queues share a registry, each under its own name label', async () => {
    const registry = newRegistry();
    const q1 = new WorkQueue({ name: 'one', registry, clock: new FakeClock() });
    const q2 = new WorkQueue({ name: 'two', registry, clock: new FakeClock() });
    q1.add('a');
    q2.add('a');
    q2.add('b');
    expect(await sample(registry, 'workqueue_depth', { name: 'one' })).to.equal(1);
    expect(await sample(registry, 'workqueue_depth', { name: 'two' })).to.equal(2);
    q1.shutDown();
    q2.shutDown();
  });

  it('does not touch the global prom-client registry', async () => {
    const { register } = await import('prom-client');
    const q = new WorkQueue({ name: 'private', clock: new FakeClock() });
    q.add('a');
    expect(register.getSingleMetric('workqueue_depth')).to.be.undefined;
    q.shutDown();
  });
});

// ---- Property test: random interleavings against several concurrent async workers ----

const KEYS = ['a', 'b', 'c', 'd'] as const;
const WORKERS = 3;

type Command =
  | { kind: 'add'; key: string }
  | { kind: 'addAfter'; key: string; ms: number }
  | { kind: 'addRateLimited'; key: string }
  | { kind: 'forget'; key: string }
  | { kind: 'advance'; ms: number }
  | { kind: 'finish'; worker: number }
  | { kind: 'yield' };

const key = fc.constantFrom(...KEYS);
const command: fc.Arbitrary<Command> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant('add' as const), key }), weight: 4 },
  {
    arbitrary: fc.record({
      kind: fc.constant('addAfter' as const),
      key,
      ms: fc.integer({ min: -5, max: 100 }),
    }),
    weight: 2,
  },
  { arbitrary: fc.record({ kind: fc.constant('addRateLimited' as const), key }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('forget' as const), key }), weight: 1 },
  {
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 150 }) }),
    weight: 2,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('finish' as const),
      worker: fc.integer({ min: 0, max: WORKERS - 1 }),
    }),
    weight: 4,
  },
  { arbitrary: fc.constant({ kind: 'yield' as const }), weight: 3 },
);

interface SimWorker {
  holding: string | undefined;
  release: (() => void) | undefined;
}

/** Runs async workers that hold each item until a 'finish' command releases them. */
class Simulation {
  readonly clock = new FakeClock();
  readonly queue = new WorkQueue({
    name: 'property',
    clock: this.clock,
    rateLimiter: new ItemExponentialFailureRateLimiter<string>(1, 64),
  });
  readonly violations: string[] = [];
  readonly lastAdd = new Map<string, number>();
  readonly lastStart = new Map<string, number>();
  private readonly holders = new Map<string, number>();
  private step = 0;
  readonly workers: SimWorker[] = Array.from({ length: WORKERS }, () => ({
    holding: undefined,
    release: undefined,
  }));
  readonly loops: Promise<void>[] = this.workers.map((w, i) => this.work(w, i));

  private async work(w: SimWorker, id: number): Promise<void> {
    for (;;) {
      const next = await this.queue.get();
      if (next.shutdown) return;
      const item = next.item;
      const other = this.holders.get(item);
      if (other !== undefined)
        this.violations.push(`${item} handed to worker ${id} while worker ${other} holds it`);
      this.holders.set(item, id);
      this.lastStart.set(item, this.step++);
      await new Promise<void>((resolve) => {
        w.holding = item;
        w.release = resolve;
      });
      if (this.holders.get(item) === id) this.holders.delete(item);
      this.queue.done(item);
    }
  }

  async run(cmd: Command): Promise<void> {
    switch (cmd.kind) {
      case 'add':
        this.lastAdd.set(cmd.key, this.step++);
        this.queue.add(cmd.key);
        break;
      case 'addAfter':
        this.lastAdd.set(cmd.key, this.step++);
        this.queue.addAfter(cmd.key, cmd.ms);
        break;
      case 'addRateLimited':
        this.lastAdd.set(cmd.key, this.step++);
        this.queue.addRateLimited(cmd.key);
        break;
      case 'forget':
        this.queue.forget(cmd.key);
        break;
      case 'advance':
        await this.clock.advance(cmd.ms);
        break;
      case 'finish':
        this.finish(this.workers[cmd.worker]);
        break;
      case 'yield':
        await flushMicrotasks(3);
        break;
    }
  }

  private finish(w: SimWorker | undefined): void {
    const release = w?.release;
    if (w === undefined || release === undefined) return;
    w.holding = undefined;
    w.release = undefined;
    release();
  }

  /** Lets time pass and releases workers until nothing is queued, delayed or in flight. */
  async drain(): Promise<void> {
    for (let round = 0; round < 100; round++) {
      await this.clock.advance(1000);
      for (const w of this.workers) this.finish(w);
      await flushMicrotasks();
      const busy = this.workers.some((w) => w.holding !== undefined);
      if (!busy && this.queue.len() === 0 && this.clock.pendingTimers() === 0) return;
    }
    throw new Error('queue did not drain');
  }

  async close(): Promise<void> {
    this.queue.shutDown();
    for (const w of this.workers) this.finish(w);
    await Promise.all(this.loops);
  }
}

describe('WorkQueue properties', () => {
  it('property: never hands a key to two workers at once, and processes every key after its last add', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { maxLength: 60 }), async (cmds) => {
        const sim = new Simulation();
        try {
          for (const c of cmds) await sim.run(c);
          await sim.drain();
          expect(sim.violations, 'concurrent processing of one key').to.deep.equal([]);
          for (const [k, added] of sim.lastAdd) {
            const started = sim.lastStart.get(k) ?? -1;
            expect(
              started,
              `${k} was added at step ${added} but last started at ${started}`,
            ).to.be.greaterThan(added);
          }
        } finally {
          await sim.close();
        }
      }),
      { numRuns: 150 },
    );
  });

  it('property: hands keys out in first-add order when no worker is busy', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom(...KEYS), { maxLength: 20 }), async (adds) => {
        const q = new WorkQueue({ name: 'fifo', clock: new FakeClock() });
        for (const k of adds) q.add(k);
        const expected = [...new Set(adds)];
        const got: string[] = [];
        while (q.len() > 0) got.push(itemOf(await q.get()));
        q.shutDown();
        expect(got).to.deep.equal(expected);
      }),
      { numRuns: 100 },
    );
  });
});
