import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { RealClock, type Clock, type TimerHandle } from './clock.js';
import { ItemExponentialFailureRateLimiter, type RateLimiter } from './ratelimit.js';
import { WorkQueue } from './workqueue.js';
import type { Logger } from '../observability/logger.js';

/** What a reconcile asks for next; {} means the key is done until something enqueues it again. */
export interface ReconcileResult {
  /** Reconcile again after this many milliseconds (ignored unless > 0). */
  requeueAfter?: number | undefined;
}

export interface ReconcileContext {
  /** Carries controller, key and reconcileID. */
  log: Logger;
  /** Aborted only when a graceful stop runs out of time; long waits should honour it. */
  signal: AbortSignal;
}

export interface Reconciler {
  /** Throwing requeues the key with backoff; the controller logs the error, so callers need not. */
  reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult>;
}

export interface ControllerOptions {
  name: string;
  reconciler: Reconciler;
  /** Number of keys reconciled concurrently (distinct keys only). */
  workers: number;
  clock?: Clock | undefined;
  logger: Logger;
  registry?: Registry | undefined;
  rateLimiter?: RateLimiter<string> | undefined;
  /**
   * Failed reconciles of one key are retried this many times, then the key is dropped until it is
   * enqueued again. Unlimited by default: controllers retry with backoff forever.
   */
  maxRetries?: number | undefined;
  /**
   * Errors that only mean "try again" (an optimistic-lock conflict): logged at debug, counted as
   * result="requeue", never dropped by maxRetries, and retried after `requeueBackoff` for the first
   * REQUEUE_FAST_RETRIES in a row, then rate-limited like any error.
   */
  isRequeueError?: ((err: unknown) => boolean) | undefined;
  /** The delays of those first retries; default: per key from 1 s, doubling. */
  requeueBackoff?: RateLimiter<string> | undefined;
  /** How long stop() waits before aborting the signal of running reconciles. Default 30 s. */
  stopTimeoutMs?: number | undefined;
}

export interface StopOptions {
  /** Reconcile the keys already queued before stopping (delayed keys are still dropped). */
  drain?: boolean | undefined;
  /** Overrides the controller's stopTimeoutMs for this stop. */
  timeoutMs?: number | undefined;
}

/**
 * A conflict means the object changed since the cache was read, so the watch event of the newer
 * version is on its way and enqueues the key by itself (or did so while the reconcile ran): the
 * retry after such an error is a fallback, for writes whose events a controller does not react to.
 * It does not take a token of the queue's overall bucket (10/s), which would make every mass
 * operation whose cache lags behind (a loaded API server) crawl at 10 conflicts a second; after
 * this many conflicts in a row a key is rate-limited like any failing key.
 */
export const REQUEUE_FAST_RETRIES = 5;
const REQUEUE_BACKOFF_BASE_MS = 1000;

/** Abort listeners a reconcile may hold on the controller's signal at once (requests, waits). */
const LISTENERS_PER_WORKER = 16;

type ReconcileOutcome = 'success' | 'error' | 'requeue' | 'requeue_after';
const OUTCOMES: readonly ReconcileOutcome[] = ['success', 'error', 'requeue', 'requeue_after'];

/** controller-runtime's reconcile_time_seconds buckets. */
const RECONCILE_TIME_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
  1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];

interface ControllerMetrics {
  total: Counter<'controller' | 'result'>;
  errors: Counter<'controller'>;
  time: Histogram<'controller'>;
  activeWorkers: Gauge<'controller'>;
  maxConcurrent: Gauge<'controller'>;
}

// One set of metric objects per registry, shared by all controllers registered on it.
const metricsByRegistry = new WeakMap<Registry, ControllerMetrics>();

function controllerMetricsFor(registry: Registry): ControllerMetrics {
  const existing = metricsByRegistry.get(registry);
  if (existing !== undefined) return existing;
  const registers = [registry];
  const metrics: ControllerMetrics = {
    total: new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Total number of reconciliations per controller',
      labelNames: ['controller', 'result'] as const,
      registers,
    }),
    errors: new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Total number of reconciliation errors per controller',
      labelNames: ['controller'] as const,
      registers,
    }),
    time: new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Length of time per reconciliation per controller',
      labelNames: ['controller'] as const,
      buckets: RECONCILE_TIME_BUCKETS,
      registers,
    }),
    activeWorkers: new Gauge({
      name: 'controller_runtime_active_workers',
      help: 'Number of currently used workers per controller',
      labelNames: ['controller'] as const,
      registers,
    }),
    maxConcurrent: new Gauge({
      name: 'controller_runtime_max_concurrent_reconciles',
      help: 'Maximum number of concurrent reconciles per controller',
      labelNames: ['controller'] as const,
      registers,
    }),
  };
  metricsByRegistry.set(registry, metrics);
  return metrics;
}

const DEFAULT_STOP_TIMEOUT_MS = 30_000;

/**
 * Runs a Reconciler over a WorkQueue of keys with N async workers, in the shape of a client-go
 * controller: success forgets the key's backoff, errors requeue it rate-limited, and a key is never
 * reconciled by two workers at once.
 */
export class Controller {
  readonly name: string;
  readonly queue: WorkQueue;
  private readonly reconciler: Reconciler;
  private readonly workers: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly metrics: ControllerMetrics;
  private readonly maxRetries: number | undefined;
  private readonly isRequeueError: (err: unknown) => boolean;
  private readonly requeueBackoff: RateLimiter<string>;
  private readonly stopTimeoutMs: number;
  private readonly abort = new AbortController();
  private workerLoops: Promise<void>[] = [];
  private started = false;
  private stopping: Promise<void> | undefined;

  constructor(opts: ControllerOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) {
      throw new RangeError(`controller ${opts.name}: workers must be an integer >= 1, got ${opts.workers}`);
    }
    if (opts.maxRetries !== undefined && !(opts.maxRetries >= 0)) {
      throw new RangeError(`controller ${opts.name}: maxRetries must be >= 0, got ${opts.maxRetries}`);
    }
    this.name = opts.name;
    this.reconciler = opts.reconciler;
    this.workers = opts.workers;
    this.clock = opts.clock ?? new RealClock();
    this.logger = opts.logger.child({ controller: opts.name });
    this.maxRetries = opts.maxRetries;
    this.isRequeueError = opts.isRequeueError ?? (() => false);
    this.requeueBackoff =
      opts.requeueBackoff ??
      new ItemExponentialFailureRateLimiter<string>(
        REQUEUE_BACKOFF_BASE_MS,
        REQUEUE_BACKOFF_BASE_MS * 2 ** (REQUEUE_FAST_RETRIES - 1),
      );
    this.stopTimeoutMs = opts.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
    // Every reconcile in flight listens on this one signal, once per request or wait it has open:
    // 50 workers are far beyond Node's default of 10 listeners, which it would report as a leak.
    setMaxListeners(LISTENERS_PER_WORKER * opts.workers, this.abort.signal);
    const registry = opts.registry ?? new Registry();
    this.metrics = controllerMetricsFor(registry);
    this.queue = new WorkQueue({
      name: opts.name,
      clock: this.clock,
      rateLimiter: opts.rateLimiter,
      registry,
    });
    const labels = { controller: opts.name };
    // Pre-initialised so that rate() over a fresh controller reads 0 instead of "no data".
    for (const result of OUTCOMES) this.metrics.total.inc({ ...labels, result }, 0);
    this.metrics.errors.inc(labels, 0);
    this.metrics.activeWorkers.set(labels, 0);
    this.metrics.maxConcurrent.set(labels, opts.workers);
  }

  enqueue(key: string): void {
    this.queue.add(key);
  }

  enqueueAfter(key: string, ms: number): void {
    this.queue.addAfter(key, ms);
  }

  /** Starts the worker loops; they run until stop(). */
  start(): void {
    if (this.started) throw new Error(`controller ${this.name} was started more than once`);
    if (this.stopping !== undefined) throw new Error(`controller ${this.name} was started after stop`);
    this.started = true;
    this.logger.info('Starting workers', { workerCount: this.workers });
    for (let i = 0; i < this.workers; i++) this.workerLoops.push(this.runWorker());
  }

  /**
   * Stops taking new keys and waits for running reconciles to finish. With drain, keys already
   * queued are reconciled first. If that takes longer than the timeout, the signal given to running
   * reconciles is aborted — and stop still waits for them to return.
   */
  stop(opts: StopOptions = {}): Promise<void> {
    this.stopping ??= this.shutdown(opts);
    return this.stopping;
  }

  private async shutdown(opts: StopOptions): Promise<void> {
    this.logger.info('Shutdown signal received, waiting for all workers to finish', {
      drain: opts.drain ?? false,
    });
    const timeoutMs = opts.timeoutMs ?? this.stopTimeoutMs;
    const timer: TimerHandle = this.clock.setTimeout(() => {
      this.logger.warn('Graceful stop timed out, aborting running reconciles', { timeoutMs });
      this.abort.abort(new Error(`controller ${this.name} stopped: graceful stop timed out`));
    }, timeoutMs);
    try {
      // Without workers nobody would take queued keys, so a drain could never finish.
      if (opts.drain === true && this.started) {
        await Promise.all([this.queue.shutDownWithDrain(), ...this.workerLoops]);
      } else {
        this.queue.shutDown();
        await Promise.all(this.workerLoops);
      }
    } finally {
      timer.cancel();
    }
    this.logger.info('All workers finished');
  }

  private async runWorker(): Promise<void> {
    for (;;) {
      const next = await this.queue.get();
      if (next.shutdown) return;
      await this.processKey(next.item);
    }
  }

  private async processKey(key: string): Promise<void> {
    const labels = { controller: this.name };
    const log = this.logger.child({ key, reconcileID: randomUUID() });
    const start = this.clock.now();
    this.metrics.activeWorkers.inc(labels);
    try {
      const result = await this.reconciler.reconcile(key, { log, signal: this.abort.signal });
      this.queue.forget(key);
      this.requeueBackoff.forget(key);
      const after = result.requeueAfter;
      if (after !== undefined && after > 0) {
        this.queue.addAfter(key, after);
        this.record('requeue_after');
      } else {
        this.record('success');
      }
    } catch (err) {
      this.handleError(key, err, log);
    } finally {
      this.metrics.time.observe(labels, Math.max(0, this.clock.now() - start) / 1000);
      this.metrics.activeWorkers.dec(labels);
      this.queue.done(key);
    }
  }

  private handleError(key: string, err: unknown, log: Logger): void {
    if (this.isRequeueErrorSafe(err, log)) {
      log.debug('Reconcile requested a retry', { err });
      if (this.requeueBackoff.numRequeues(key) < REQUEUE_FAST_RETRIES)
        this.queue.addAfter(key, this.requeueBackoff.when(key));
      else this.queue.addRateLimited(key);
      this.record('requeue');
      return;
    }
    this.record('error');
    this.metrics.errors.inc({ controller: this.name });
    if (this.abort.signal.aborted) {
      // Expected while stopping: the reconcile gave up because its signal was aborted.
      log.info('Reconcile interrupted by controller stop', { err });
      return;
    }
    const retries = this.queue.numRequeues(key);
    if (this.maxRetries !== undefined && retries >= this.maxRetries) {
      log.error('Reconciler error, dropping key after too many retries', { err, retries });
      this.queue.forget(key);
      return;
    }
    log.error('Reconciler error', { err });
    this.queue.addRateLimited(key);
  }

  /** A throwing classifier must not take the worker down; treat its failure as a plain error. */
  private isRequeueErrorSafe(err: unknown, log: Logger): boolean {
    try {
      return this.isRequeueError(err);
    } catch (classifierErr) {
      log.warn('isRequeueError threw; treating the reconcile error as an error', { err: classifierErr });
      return false;
    }
  }

  private record(result: ReconcileOutcome): void {
    this.metrics.total.inc({ controller: this.name, result });
  }
}
