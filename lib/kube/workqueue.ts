import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { RealClock, type Clock, type TimerHandle } from './clock.js';
import { defaultControllerRateLimiter, type RateLimiter } from './ratelimit.js';

export type GetResult<T> = { item: T; shutdown: false } | { shutdown: true };

export interface WorkQueueOptions<T> {
  /** Value of the `name` label on the workqueue_* metrics. */
  name: string;
  clock?: Clock | undefined;
  /** Used by addRateLimited; defaults to defaultControllerRateLimiter over the queue's clock. */
  rateLimiter?: RateLimiter<T> | undefined;
  /** Where the workqueue_* metrics are registered; without one they are kept privately. */
  registry?: Registry | undefined;
}

/**
 * Node's timers overflow above 2^31-1 ms and then fire after 1 ms, so longer delays are waited out
 * in several steps.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** client-go's ExponentialBuckets(10e-9, 10, 12), written out so the `le` labels are exact. */
const DURATION_BUCKETS = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000];

/** What the scrape-time gauges need to know about a queue. */
interface InFlightSource {
  readonly name: string;
  inFlightSeconds(): number[];
}

interface QueueMetrics {
  depth: Gauge<'name'>;
  adds: Counter<'name'>;
  queueDuration: Histogram<'name'>;
  workDuration: Histogram<'name'>;
  retries: Counter<'name'>;
  /** Queues whose in-flight work is reported by the unfinished/longest gauges. */
  live: Set<InFlightSource>;
}

// prom-client refuses a second registration of a name, so all queues on one registry share one set
// of metric objects and differ only by label.
const metricsByRegistry = new WeakMap<Registry, QueueMetrics>();

function inFlightByName(live: Set<InFlightSource>): Map<string, number[]> {
  const byName = new Map<string, number[]>();
  for (const q of live) {
    const acc = byName.get(q.name) ?? [];
    acc.push(...q.inFlightSeconds());
    byName.set(q.name, acc);
  }
  return byName;
}

function queueMetricsFor(registry: Registry): QueueMetrics {
  const existing = metricsByRegistry.get(registry);
  if (existing !== undefined) return existing;
  const live = new Set<InFlightSource>();
  const registers = [registry];
  const labelNames = ['name'] as const;
  const metrics: QueueMetrics = {
    depth: new Gauge({ name: 'workqueue_depth', help: 'Current depth of workqueue', labelNames, registers }),
    adds: new Counter({
      name: 'workqueue_adds_total',
      help: 'Total number of adds handled by workqueue',
      labelNames,
      registers,
    }),
    queueDuration: new Histogram({
      name: 'workqueue_queue_duration_seconds',
      help: 'How long in seconds an item stays in workqueue before being requested',
      labelNames,
      buckets: DURATION_BUCKETS,
      registers,
    }),
    workDuration: new Histogram({
      name: 'workqueue_work_duration_seconds',
      help: 'How long in seconds processing an item from workqueue takes',
      labelNames,
      buckets: DURATION_BUCKETS,
      registers,
    }),
    retries: new Counter({
      name: 'workqueue_retries_total',
      help: 'Total number of retries handled by workqueue',
      labelNames,
      registers,
    }),
    live,
  };
  new Gauge({
    name: 'workqueue_unfinished_work_seconds',
    help:
      'How many seconds of work has been done that is in progress and has not been observed by ' +
      'work_duration. Large values indicate stuck threads.',
    labelNames,
    registers,
    collect() {
      this.reset();
      for (const [name, secs] of inFlightByName(live)) {
        this.set(
          { name },
          secs.reduce((a, b) => a + b, 0),
        );
      }
    },
  });
  new Gauge({
    name: 'workqueue_longest_running_processor_seconds',
    help: 'How many seconds has the longest running processor for workqueue been running',
    labelNames,
    registers,
    collect() {
      this.reset();
      for (const [name, secs] of inFlightByName(live)) this.set({ name }, Math.max(0, ...secs));
    },
  });
  metricsByRegistry.set(registry, metrics);
  return metrics;
}

/** A FIFO with O(1) removal from the front. */
class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  /** Only call when length > 0. */
  shift(): T {
    const item = this.items[this.head] as T;
    this.items[this.head] = undefined; // let the item be collected
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

interface Waiting {
  readyAt: number;
  timer: TimerHandle;
}

/**
 * A work queue with client-go semantics, for N concurrent async workers:
 * - fair: items are handed out in the order they were added;
 * - stingy: an item added several times before it is handed out is handed out once, and an item is
 *   never handed out again before done(item) — this is what keeps two reconciles of one object
 *   from interleaving at await points;
 * - an item added while in flight is handed out again after done(item);
 * - delayed adds (addAfter) and rate-limited adds (addRateLimited) over an injected Clock.
 */
export class WorkQueue<T = string> {
  readonly name: string;
  private readonly clock: Clock;
  private readonly rateLimiter: RateLimiter<T>;
  private readonly metrics: QueueMetrics;
  private readonly labels: { name: string };
  private readonly source: InFlightSource;

  private readonly queue = new Fifo<T>();
  /** Items waiting to be handed out, including those re-added while in flight. */
  private readonly dirty = new Set<T>();
  /** Items handed out and not yet done, with the time they were handed out. */
  private readonly processing = new Map<T, number>();
  /** When each dirty item was first added since it was last handed out (queue latency). */
  private readonly addedAt = new Map<T, number>();
  private readonly waiting = new Map<T, Waiting>();
  private getters: ((r: GetResult<T>) => void)[] = [];
  private drainWaiters: (() => void)[] = [];
  private stopping = false;
  private draining = false;

  constructor(opts: WorkQueueOptions<T>) {
    this.name = opts.name;
    this.clock = opts.clock ?? new RealClock();
    this.rateLimiter = opts.rateLimiter ?? defaultControllerRateLimiter<T>(this.clock);
    this.metrics = queueMetricsFor(opts.registry ?? new Registry());
    this.labels = { name: opts.name };
    this.source = { name: opts.name, inFlightSeconds: () => this.inFlightSeconds() };
    this.metrics.live.add(this.source);
    // Series exist from the start, so dashboards show 0 rather than "no data".
    this.metrics.depth.set(this.labels, 0);
    this.metrics.adds.inc(this.labels, 0);
    this.metrics.retries.inc(this.labels, 0);
  }

  /** Marks the item as needing processing; ignored after shutdown. */
  add(item: T): void {
    if (this.stopping || this.dirty.has(item)) return;
    this.metrics.adds.inc(this.labels);
    this.metrics.depth.inc(this.labels);
    if (!this.addedAt.has(item)) this.addedAt.set(item, this.clock.now());
    this.dirty.add(item);
    // An in-flight item goes back into the queue from done(), never to a second worker now.
    if (this.processing.has(item)) return;
    this.push(item);
  }

  /**
   * Adds the item after ms milliseconds. While an earlier delayed add of the same item is pending,
   * the earliest time wins. Counts towards workqueue_retries_total (as client-go does).
   */
  addAfter(item: T, ms: number): void {
    if (this.stopping) return;
    this.metrics.retries.inc(this.labels);
    if (!(ms > 0)) {
      this.add(item);
      return;
    }
    const readyAt = this.clock.now() + ms;
    const pending = this.waiting.get(item);
    if (pending !== undefined) {
      if (pending.readyAt <= readyAt) return;
      pending.timer.cancel();
    }
    this.waiting.set(item, { readyAt, timer: this.arm(item, readyAt) });
  }

  /** Adds the item after the delay the rate limiter chooses for it. */
  addRateLimited(item: T): void {
    if (this.stopping) return;
    this.addAfter(item, this.rateLimiter.when(item));
  }

  /** Tells the rate limiter the item is no longer failing, resetting its backoff. */
  forget(item: T): void {
    this.rateLimiter.forget(item);
  }

  numRequeues(item: T): number {
    return this.rateLimiter.numRequeues(item);
  }

  /** Number of items ready to be handed out (not counting delayed or in-flight ones). */
  len(): number {
    return this.queue.length;
  }

  /**
   * Waits for the next item. The caller owns it until done(item). Resolves { shutdown: true } once
   * the queue is shut down — after shutDownWithDrain only when no queued item is left.
   */
  get(): Promise<GetResult<T>> {
    if (this.queue.length > 0 && (!this.stopping || this.draining)) {
      return Promise.resolve(this.handOut(this.queue.shift()));
    }
    if (this.stopping) return Promise.resolve({ shutdown: true });
    return new Promise((resolve) => this.getters.push(resolve));
  }

  /** Ends processing of an item handed out by get(); requeues it if it was added meanwhile. */
  done(item: T): void {
    const start = this.processing.get(item);
    if (start === undefined) return;
    this.processing.delete(item);
    this.metrics.workDuration.observe(this.labels, Math.max(0, this.clock.now() - start) / 1000);
    if (this.dirty.has(item)) this.push(item);
    this.settleDrain();
    this.retireIfIdle();
  }

  /**
   * Stops accepting adds, drops pending delayed adds and wakes waiting get() calls. Items still
   * queued are not handed out; workers finish what they hold and call done().
   */
  shutDown(): void {
    this.stopping = true;
    this.draining = false;
    this.stopTimersAndWakeGetters();
    // A drain in progress is cut short, as a hard shutdown overrides it.
    this.resolveDrainWaiters();
    this.retireIfIdle();
  }

  /**
   * Stops accepting adds and drops pending delayed adds, but keeps handing out queued items.
   * Resolves once the queue is empty and every handed-out item is done — so it only finishes while
   * workers keep calling get().
   */
  shutDownWithDrain(): Promise<void> {
    if (this.stopping && !this.draining) return Promise.resolve();
    this.stopping = true;
    this.draining = true;
    this.stopTimersAndWakeGetters();
    return new Promise((resolve) => {
      this.drainWaiters.push(resolve);
      this.settleDrain();
    });
  }

  shuttingDown(): boolean {
    return this.stopping;
  }

  private inFlightSeconds(): number[] {
    const now = this.clock.now();
    return [...this.processing.values()].map((start) => Math.max(0, now - start) / 1000);
  }

  private push(item: T): void {
    // Getters only wait while the queue is empty, so handing the item straight over keeps FIFO order.
    const getter = this.getters.shift();
    if (getter !== undefined) getter(this.handOut(item));
    else this.queue.push(item);
  }

  private handOut(item: T): GetResult<T> {
    const now = this.clock.now();
    this.dirty.delete(item);
    this.processing.set(item, now);
    this.metrics.depth.dec(this.labels);
    const added = this.addedAt.get(item);
    if (added !== undefined) {
      this.metrics.queueDuration.observe(this.labels, Math.max(0, now - added) / 1000);
      this.addedAt.delete(item);
    }
    return { item, shutdown: false };
  }

  private arm(item: T, readyAt: number): TimerHandle {
    const wait = Math.min(MAX_TIMER_MS, Math.max(0, readyAt - this.clock.now()));
    return this.clock.setTimeout(() => {
      this.fire(item, readyAt);
    }, wait);
  }

  private fire(item: T, readyAt: number): void {
    const pending = this.waiting.get(item);
    if (pending?.readyAt !== readyAt) return;
    if (this.clock.now() < readyAt) {
      pending.timer = this.arm(item, readyAt);
      return;
    }
    this.waiting.delete(item);
    this.add(item);
  }

  private stopTimersAndWakeGetters(): void {
    for (const w of this.waiting.values()) w.timer.cancel();
    this.waiting.clear();
    // Getters only wait while the queue is empty, so there is nothing left for them.
    const getters = this.getters;
    this.getters = [];
    for (const g of getters) g({ shutdown: true });
  }

  private settleDrain(): void {
    if (this.draining && this.queue.length === 0 && this.processing.size === 0) this.resolveDrainWaiters();
  }

  private resolveDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }

  private retireIfIdle(): void {
    if (this.stopping && this.processing.size === 0) this.metrics.live.delete(this.source);
  }
}
