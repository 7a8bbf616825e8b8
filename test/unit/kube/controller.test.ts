import { expect } from 'chai';
import fc from 'fast-check';
import type { Registry } from 'prom-client';
import { FakeClock, flushMicrotasks } from '../../../lib/kube/clock.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../../lib/kube/controller.js';
import { ItemExponentialFailureRateLimiter } from '../../../lib/kube/ratelimit.js';
import { CapturingLogger, nullLogger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';

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

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve: (v: T) => void = () => undefined;
  let reject: (e: unknown) => void = () => undefined;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * Makes a scripted reconcile honour its signal, so that a test failing while a reconcile is parked
 * on a gate still lets afterEach stop the controller instead of hanging.
 */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      reject(new Error('reconcile aborted', { cause: signal.reason }));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}

interface Call {
  key: string;
  at: number;
  ctx: ReconcileContext;
}

/** A reconciler driven by a script: each call takes the next behaviour for its key. */
class ScriptedReconciler {
  readonly calls: Call[] = [];
  constructor(
    private readonly clock: FakeClock,
    private readonly behave: (key: string, call: number, ctx: ReconcileContext) => Promise<ReconcileResult>,
  ) {}

  reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult> {
    const n = this.calls.filter((c) => c.key === key).length;
    this.calls.push({ key, at: this.clock.now(), ctx });
    return untilAborted(this.behave(key, n, ctx), ctx.signal);
  }

  callTimes(key: string, since: number): number[] {
    return this.calls.filter((c) => c.key === key).map((c) => c.at - since);
  }
}

class ConflictError extends Error {
  override readonly name = 'ConflictError';
}

describe('Controller', () => {
  let clock: FakeClock;
  let registry: Registry;
  let log: CapturingLogger;
  let controllers: Controller[];

  function newController(
    behave: (key: string, call: number, ctx: ReconcileContext) => Promise<ReconcileResult>,
    extra: { workers?: number; maxRetries?: number; isRequeueError?: (err: unknown) => boolean } = {},
  ): { controller: Controller; reconciler: ScriptedReconciler } {
    const reconciler = new ScriptedReconciler(clock, behave);
    const controller = new Controller({
      name: 'machine',
      reconciler,
      workers: extra.workers ?? 2,
      clock,
      logger: log,
      registry,
      rateLimiter: new ItemExponentialFailureRateLimiter<string>(100, 10_000),
      maxRetries: extra.maxRetries,
      isRequeueError: extra.isRequeueError,
    });
    controllers.push(controller);
    return { controller, reconciler };
  }

  beforeEach(() => {
    clock = new FakeClock();
    registry = newRegistry();
    log = new CapturingLogger();
    controllers = [];
  });

  afterEach(async () => {
    const stopping = controllers.map((c) => c.stop({ timeoutMs: 0 }));
    await clock.advance(0); // fires the stop timeouts, aborting anything still running
    await Promise.all(stopping);
  });

  it('reconciles an enqueued key once and counts a success', async () => {
    const { controller, reconciler } = newController(() => Promise.resolve({}));
    controller.start();
    controller.enqueue('ns/m1');
    await flushMicrotasks();
    expect(reconciler.calls.map((c) => c.key)).to.deep.equal(['ns/m1']);
    await clock.advance(60_000);
    expect(reconciler.calls).to.have.length(1);
    expect(
      await sample(registry, 'controller_runtime_reconcile_total', {
        controller: 'machine',
        result: 'success',
      }),
    ).to.equal(1);
  });

  it('gives the reconcile a logger carrying controller, key and a fresh reconcileID', async () => {
    const { controller, reconciler } = newController((_key, _n, ctx) => {
      ctx.log.info('hello');
      return Promise.resolve({});
    });
    controller.start();
    controller.enqueue('ns/m1');
    await flushMicrotasks();
    controller.enqueue('ns/m1');
    await flushMicrotasks();
    expect(reconciler.calls).to.have.length(2);
    const hellos = log.lines.filter((l) => l.msg === 'hello');
    expect(hellos.map((l) => [l.fields.controller, l.fields.key])).to.deep.equal([
      ['machine', 'ns/m1'],
      ['machine', 'ns/m1'],
    ]);
    const ids = hellos.map((l) => l.fields.reconcileID);
    expect(ids[0])
      .to.be.a('string')
      .and.match(/^[0-9a-f-]{36}$/);
    expect(ids[0]).to.not.equal(ids[1]);
  });

  it('requeues after requeueAfter and counts requeue_after', async () => {
    const { controller, reconciler } = newController((_k, n) =>
      Promise.resolve(n === 0 ? { requeueAfter: 5000 } : {}),
    );
    controller.start();
    const t0 = clock.now();
    controller.enqueue('ns/m1');
    await clock.advance(4999);
    expect(reconciler.calls).to.have.length(1);
    await clock.advance(1);
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([0, 5000]);
    const l = { controller: 'machine' };
    expect(
      await sample(registry, 'controller_runtime_reconcile_total', { ...l, result: 'requeue_after' }),
    ).to.equal(1);
    expect(
      await sample(registry, 'controller_runtime_reconcile_total', { ...l, result: 'success' }),
    ).to.equal(1);
  });

  it('retries a failing key with exponential backoff and resets the backoff on success', async () => {
    const { controller, reconciler } = newController((_k, n) =>
      n < 3 || n === 4 ? Promise.reject(new Error(`boom ${n}`)) : Promise.resolve({}),
    );
    controller.start();
    const t0 = clock.now();
    controller.enqueue('ns/m1');
    await clock.advance(1000);
    // Attempts at 0, +100, +200, +400 (three failures back off 100, 200, 400 ms).
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([0, 100, 300, 700]);
    expect(controller.queue.numRequeues('ns/m1')).to.equal(0);
    controller.enqueue('ns/m1'); // fails again: backoff starts from the base, not 800 ms
    await clock.advance(100);
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([0, 100, 300, 700, 1000, 1100]);
    const l = { controller: 'machine' };
    expect(await sample(registry, 'controller_runtime_reconcile_total', { ...l, result: 'error' })).to.equal(
      4,
    );
    expect(await sample(registry, 'controller_runtime_reconcile_errors_total', l)).to.equal(4);
  });

  it('catches a thrown error and logs it once at error level with the key', async () => {
    const boom = new Error('cloud quota exceeded');
    const { controller } = newController((_k, n) => {
      // A synchronous throw from a non-async reconcile must be caught too.
      if (n === 0) throw boom;
      return Promise.resolve({});
    });
    controller.start();
    controller.enqueue('ns/m1');
    await clock.advance(1000);
    const errors = log.lines.filter((l) => l.level === 'error');
    expect(errors).to.have.length(1);
    expect(errors[0]?.fields).to.include({ controller: 'machine', key: 'ns/m1', err: boom });
  });

  it('drops a key after maxRetries failed retries, forgetting its backoff', async () => {
    const { controller, reconciler } = newController(() => Promise.reject(new Error('always')), {
      maxRetries: 2,
    });
    controller.start();
    controller.enqueue('ns/m1');
    await clock.advance(60_000);
    expect(reconciler.calls, 'first attempt plus two retries').to.have.length(3);
    expect(controller.queue.numRequeues('ns/m1')).to.equal(0);
    const errors = log.lines.filter((l) => l.level === 'error');
    expect(errors).to.have.length(3);
    expect(errors[2]?.msg).to.match(/dropping/);
    controller.enqueue('ns/m1'); // a new event brings it back
    await flushMicrotasks();
    expect(reconciler.calls).to.have.length(4);
  });

  it('retries forever by default', async () => {
    const { controller, reconciler } = newController(() => Promise.reject(new Error('always')));
    controller.start();
    controller.enqueue('ns/m1');
    await clock.advance(200_000);
    expect(reconciler.calls.length).to.be.greaterThan(20);
  });

  it('treats a requeue error as a retry after the requeue backoff, logged at debug, not an error', async () => {
    const { controller, reconciler } = newController(
      (_k, n) =>
        n === 0 ? Promise.reject(new ConflictError('the object has been modified')) : Promise.resolve({}),
      { isRequeueError: (err) => err instanceof ConflictError },
    );
    controller.start();
    const t0 = clock.now();
    controller.enqueue('ns/m1');
    await clock.advance(999);
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([0]);
    await clock.advance(1);
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([0, 1000]);
    expect(log.lines.filter((l) => l.level === 'error')).to.deep.equal([]);
    expect(log.lines.filter((l) => l.level === 'debug').map((l) => l.fields.key)).to.deep.equal(['ns/m1']);
    const l = { controller: 'machine' };
    expect(
      await sample(registry, 'controller_runtime_reconcile_total', { ...l, result: 'requeue' }),
    ).to.equal(1);
    expect(await sample(registry, 'controller_runtime_reconcile_errors_total', l)).to.equal(0);
  });

  it('retries the first conflicts in a row after 1, 2, 4, 8 and 16 s, then rate-limited; success starts over', async () => {
    const { controller, reconciler } = newController(
      (_k, n) =>
        n < 7 || n === 8
          ? Promise.reject(new ConflictError('the object has been modified'))
          : Promise.resolve({}),
      { isRequeueError: (err) => err instanceof ConflictError },
    );
    controller.start();
    const t0 = clock.now();
    controller.enqueue('ns/m1');
    await clock.advance(40_000);
    // Five fast retries, then the queue's limiter (100 ms doubling in this test).
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([
      0, 1000, 3000, 7000, 15_000, 31_000, 31_100, 31_300,
    ]);
    controller.enqueue('ns/m1'); // conflicts once more: 1 s again, not 32 s
    await clock.advance(1000);
    expect(reconciler.callTimes('ns/m1', t0)).to.deep.equal([
      0, 1000, 3000, 7000, 15_000, 31_000, 31_100, 31_300, 40_000, 41_000,
    ]);
  });

  it('does not let a burst of conflicts wait for the queue-wide bucket (10/s): 300 keys are all retried after 1 s', async () => {
    const reconciler = new ScriptedReconciler(clock, (_k, n) =>
      n === 0 ? Promise.reject(new ConflictError('the object has been modified')) : Promise.resolve({}),
    );
    const controller = new Controller({
      name: 'machine',
      reconciler,
      workers: 50,
      clock,
      logger: log,
      registry,
      isRequeueError: (err) => err instanceof ConflictError,
    });
    controllers.push(controller);
    controller.start();
    const keys = Array.from({ length: 300 }, (_, i) => `ns/m${i}`);
    for (const k of keys) controller.enqueue(k);
    await clock.advance(1000);
    // With the default limiter (5 ms per key, 10/s with a burst of 100 for the queue) the last of
    // these would wait 20 s.
    expect(keys.filter((k) => reconciler.callTimes(k, 0).length !== 2)).to.deep.equal([]);
  });

  it('lets each of 50 workers wait on its signal without Node warning of a listener leak', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w.name);
    };
    process.on('warning', onWarning);
    try {
      const gate = deferred<ReconcileResult>();
      const { controller } = newController((_k, _n, ctx) => untilAborted(gate.promise, ctx.signal), {
        workers: 50,
      });
      controller.start();
      for (let i = 0; i < 50; i++) controller.enqueue(`ns/m${i}`);
      await flushMicrotasks();
      gate.resolve({});
      await flushMicrotasks();
      // Node emits process warnings on a later tick.
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).to.deep.equal([]);
  });

  it('never reconciles one key in two workers at once, and reconciles it again if enqueued meanwhile', async () => {
    const gate = deferred<ReconcileResult>();
    let running = 0;
    let maxRunning = 0;
    const { controller, reconciler } = newController(
      async (_k, n) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        try {
          return n === 0 ? await gate.promise : {};
        } finally {
          running--;
        }
      },
      { workers: 4 },
    );
    controller.start();
    controller.enqueue('ns/m1');
    await flushMicrotasks();
    controller.enqueue('ns/m1');
    controller.enqueue('ns/m1');
    await flushMicrotasks();
    expect(reconciler.calls).to.have.length(1);
    gate.resolve({});
    await flushMicrotasks();
    expect(reconciler.calls).to.have.length(2);
    expect(maxRunning).to.equal(1);
  });

  it('reconciles different keys concurrently up to the worker count', async () => {
    const gate = deferred<ReconcileResult>();
    const { controller, reconciler } = newController(() => gate.promise, { workers: 2 });
    controller.start();
    for (const k of ['a', 'b', 'c']) controller.enqueue(k);
    await flushMicrotasks();
    expect(reconciler.calls.map((c) => c.key)).to.deep.equal(['a', 'b']);
    expect(await sample(registry, 'controller_runtime_active_workers', { controller: 'machine' })).to.equal(
      2,
    );
    gate.resolve({});
    await flushMicrotasks();
    expect(reconciler.calls.map((c) => c.key)).to.deep.equal(['a', 'b', 'c']);
    expect(await sample(registry, 'controller_runtime_active_workers', { controller: 'machine' })).to.equal(
      0,
    );
  });

  it('pre-initialises its metrics at zero and reports the worker count', async () => {
    newController(() => Promise.resolve({}), { workers: 3 });
    const l = { controller: 'machine' };
    for (const result of ['success', 'error', 'requeue', 'requeue_after']) {
      expect(await sample(registry, 'controller_runtime_reconcile_total', { ...l, result }), result).to.equal(
        0,
      );
    }
    expect(await sample(registry, 'controller_runtime_reconcile_errors_total', l)).to.equal(0);
    expect(await sample(registry, 'controller_runtime_max_concurrent_reconciles', l)).to.equal(3);
    expect(await sample(registry, 'workqueue_depth', { name: 'machine' })).to.equal(0);
  });

  it('observes reconcile time in seconds', async () => {
    const { controller } = newController(async () => {
      await clock.sleep(2500);
      return {};
    });
    controller.start();
    controller.enqueue('a');
    await clock.advance(2500);
    const l = { controller: 'machine' };
    const series = 'controller_runtime_reconcile_time_seconds_sum';
    expect(await sample(registry, 'controller_runtime_reconcile_time_seconds', l, series)).to.equal(2.5);
  });

  it('stop waits for an in-flight reconcile without aborting it before the timeout', async () => {
    const gate = deferred<ReconcileResult>();
    const { controller, reconciler } = newController(() => gate.promise);
    controller.start();
    controller.enqueue('a');
    await flushMicrotasks();
    let stopped = false;
    void controller.stop({ timeoutMs: 10_000 }).then(() => {
      stopped = true;
    });
    controller.enqueue('b'); // refused once stopping
    await clock.advance(9_999);
    expect(stopped).to.be.false;
    expect(reconciler.calls[0]?.ctx.signal.aborted).to.be.false;
    gate.resolve({});
    await flushMicrotasks();
    expect(stopped).to.be.true;
    expect(reconciler.calls.map((c) => c.key)).to.deep.equal(['a']);
  });

  it('stop aborts the reconcile signal once the timeout passes and still waits for it', async () => {
    const { controller, reconciler } = newController(async (_k, _n, ctx) => {
      await clock.sleep(3_600_000, ctx.signal);
      return {};
    });
    controller.start();
    controller.enqueue('a');
    await flushMicrotasks();
    let stopped = false;
    void controller.stop({ timeoutMs: 5000 }).then(() => {
      stopped = true;
    });
    await clock.advance(4999);
    expect(stopped).to.be.false;
    await clock.advance(1);
    expect(reconciler.calls[0]?.ctx.signal.aborted).to.be.true;
    expect(stopped).to.be.true;
    expect(
      log.lines.filter((l) => l.level === 'error'),
      'an aborted reconcile is not an error line',
    ).to.deep.equal([]);
  });

  it('stop with drain reconciles the keys already queued first', async () => {
    const gate = deferred<ReconcileResult>();
    const { controller, reconciler } = newController(
      (k) => (k === 'a' ? gate.promise : Promise.resolve({})),
      {
        workers: 1,
      },
    );
    controller.start();
    controller.enqueue('a');
    controller.enqueue('b');
    controller.enqueue('c');
    await flushMicrotasks();
    let stopped = false;
    void controller.stop({ drain: true }).then(() => {
      stopped = true;
    });
    await flushMicrotasks();
    expect(stopped).to.be.false;
    gate.resolve({});
    await flushMicrotasks();
    expect(reconciler.calls.map((c) => c.key)).to.deep.equal(['a', 'b', 'c']);
    expect(stopped).to.be.true;
  });

  it('stop before start resolves at once, even with drain, and keeps the controller from starting', async () => {
    const { controller, reconciler } = newController(() => Promise.resolve({}));
    controller.enqueue('a');
    await controller.stop({ drain: true });
    expect(reconciler.calls).to.deep.equal([]);
    expect(() => {
      controller.start();
    }).to.throw(/after stop/);
  });

  it('refuses to start twice', () => {
    const { controller } = newController(() => Promise.resolve({}));
    controller.start();
    expect(() => {
      controller.start();
    }).to.throw(/more than once/);
  });

  it('rejects a worker count below one', () => {
    expect(
      () =>
        new Controller({
          name: 'x',
          reconciler: { reconcile: () => Promise.resolve({}) },
          workers: 0,
          logger: nullLogger,
        }),
    ).to.throw(RangeError);
  });

  it('property: with random outcomes, a key is never reconciled concurrently and ends reconciled after its last enqueue', async () => {
    const outcome = fc.constantFrom('ok', 'error', 'requeueAfter', 'slow');
    const step = fc.record({
      key: fc.constantFrom('a', 'b', 'c'),
      advanceMs: fc.integer({ min: 0, max: 300 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(outcome, { minLength: 1, maxLength: 8 }),
        fc.array(step, { maxLength: 25 }),
        async (outcomes, steps) => {
          clock = new FakeClock();
          registry = newRegistry();
          log = new CapturingLogger();
          const inFlight = new Set<string>();
          const overlaps: string[] = [];
          const lastEnqueue = new Map<string, number>();
          const lastStart = new Map<string, number>();
          let seq = 0;
          const { controller } = newController(
            async (key, n) => {
              if (inFlight.has(key)) overlaps.push(key);
              inFlight.add(key);
              lastStart.set(key, seq++);
              try {
                // Only the first few attempts misbehave, so the run settles.
                const o = n < outcomes.length ? outcomes[n] : 'ok';
                if (o === 'slow') await clock.sleep(250);
                if (o === 'error') throw new Error('boom');
                return o === 'requeueAfter' ? { requeueAfter: 50 } : {};
              } finally {
                inFlight.delete(key);
              }
            },
            { workers: 3 },
          );
          controller.start();
          for (const s of steps) {
            lastEnqueue.set(s.key, seq++);
            controller.enqueue(s.key);
            await clock.advance(s.advanceMs);
          }
          for (let i = 0; i < 40; i++) await clock.advance(10_000);
          const stopped = controller.stop({ timeoutMs: 0 });
          await clock.advance(0);
          await stopped;
          expect(overlaps).to.deep.equal([]);
          for (const [k, at] of lastEnqueue) expect(lastStart.get(k) ?? -1, k).to.be.greaterThan(at);
        },
      ),
      { numRuns: 60 },
    );
  });
});
