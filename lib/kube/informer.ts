import { Counter, Gauge, type Registry } from 'prom-client';

import type { KubeObject, Status } from './types.js';
import type { Logger } from '../observability/logger.js';
import { Backoff } from './backoff.js';
import type { KubeApi, WatchEvent } from './client.js';
import { OutageLog } from './outage.js';
import { RealClock, type Clock, type TimerHandle } from './clock.js';
import { AbortedError, GoneError, errorFromResponse } from './errors.js';
import { resourceLabel, type ResourceType } from './resources.js';

/** Read through a function so the compiler does not narrow it across awaits. */
function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}

/** The Status reason of a failed list or watch, for the watch-error metric. */
function errorReason(err: unknown): string {
  const reason = err instanceof Error && 'reason' in err ? String(err.reason) : '';
  return reason === '' ? 'Error' : reason;
}

/** Objects handed out by the cache are frozen: copy (structuredClone) before changing one. */
export type DeepReadonly<T> = T extends (infer E)[]
  ? readonly DeepReadonly<E>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T;

/** A mutable deep copy of a cached object. */
export function clone<T>(obj: DeepReadonly<T> | T): T {
  return structuredClone(obj) as T;
}

/**
 * What the cache keeps of an object: everything but metadata.managedFields, which no controller
 * reads and which often outweighs the rest of the object.
 */
function prepare<T extends KubeObject>(obj: T): DeepReadonly<T> {
  if (obj.metadata.managedFields !== undefined) delete obj.metadata.managedFields;
  return deepFreeze(obj);
}

function deepFreeze<T>(obj: T): DeepReadonly<T> {
  if (obj !== null && typeof obj === 'object' && !Object.isFrozen(obj)) {
    Object.freeze(obj);
    for (const v of Object.values(obj as Record<string, unknown>)) deepFreeze(v);
  }
  return obj as DeepReadonly<T>;
}

/** Cache key: "namespace/name", or "name" for cluster-scoped objects. */
export function objectKey(
  obj: Pick<KubeObject, 'metadata'> | DeepReadonly<Pick<KubeObject, 'metadata'>>,
): string {
  const ns = obj.metadata.namespace;
  const name = obj.metadata.name ?? '';
  return ns === undefined || ns === '' ? name : `${ns}/${name}`;
}

export function splitKey(key: string): { namespace: string | undefined; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { namespace: undefined, name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

export interface InformerHandlers<T> {
  /** initialList is true for objects delivered by the first list, before hasSynced(). */
  onAdd?(obj: DeepReadonly<T>, initialList: boolean): void;
  /** Also called with old === new (same object) on periodic resync. */
  onUpdate?(oldObj: DeepReadonly<T>, newObj: DeepReadonly<T>): void;
  /**
   * The last state seen. finalStateUnknown is true when the delete was not observed as an event
   * (the object was missing from a re-list after a disconnect), so the state may be stale.
   */
  onDelete?(obj: DeepReadonly<T>, finalStateUnknown: boolean): void;
}

export type IndexFunc<T> = (obj: DeepReadonly<T>) => readonly string[];

/** Indexes every informer can have. */
export const namespaceIndex = <T extends KubeObject>(obj: DeepReadonly<T>): string[] =>
  obj.metadata.namespace === undefined ? [] : [obj.metadata.namespace];

/** Index value of objects without a controller reference (orphans) in the controller-UID index. */
export const NO_CONTROLLER = '';

export const controllerOwnerUIDIndex = <T extends KubeObject>(obj: DeepReadonly<T>): string[] => {
  const ref = obj.metadata.ownerReferences?.find((r) => r.controller === true);
  return [ref === undefined ? NO_CONTROLLER : ref.uid];
};

/** Index by the value of one label. */
export function labelIndex(key: string): <T extends KubeObject>(obj: DeepReadonly<T>) => string[] {
  return (obj) => {
    const v = obj.metadata.labels?.[key];
    return v === undefined ? [] : [v];
  };
}

/**
 * With allowWatchBookmarks the apiserver (1.34) sends a bookmark about every minute on a quiet
 * watch (measured: first after ~120 s, then every 60 s), so five silent minutes mean the stream
 * is dead even though the TCP connection looks open.
 */
export const DEFAULT_WATCH_IDLE_TIMEOUT_MS = 300_000;

export const NAMESPACE_INDEX = 'namespace';
export const CONTROLLER_UID_INDEX = 'controllerUID';

export interface InformerOptions<T = unknown> {
  client: KubeApi;
  resource: ResourceType;
  /** Restrict to one namespace (namespaced resources). */
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Name in logs and metrics; defaults to the resource. */
  name?: string;
  logger: Logger;
  registry?: Registry;
  clock?: Clock;
  pageSize?: number;
  /** Replays every cached object as an update this often (0 = never). */
  resyncPeriodMs?: number;
  /** Server-side watch timeout; jittered between 1x and 2x. */
  watchTimeoutSeconds?: number;
  /** A watch that delivers nothing (bookmarks included) this long is considered stalled. */
  idleTimeoutMs?: number;
  backoff?: { initialMs: number; maxMs: number };
  /**
   * Trims an object before it is cached (client-go's SetTransform): keep only what readers need,
   * so that a cache of many large objects (every pod of a cluster) stays small.
   */
  transform?: (obj: T) => T;
}

interface InformerMetrics {
  lists: Counter<'name'>;
  watches: Counter<'name'>;
  watchErrors: Counter<'name' | 'reason'>;
  events: Counter<'name' | 'type'>;
  objects: Gauge<'name'>;
}

const metricsByRegistry = new WeakMap<Registry, InformerMetrics>();

function informerMetrics(registry: Registry | undefined): InformerMetrics | undefined {
  if (registry === undefined) return undefined;
  let m = metricsByRegistry.get(registry);
  if (m === undefined) {
    m = {
      lists: new Counter({
        name: 'informer_lists_total',
        help: 'Full lists done by an informer (initial sync and re-lists).',
        labelNames: ['name'],
        registers: [registry],
      }),
      watches: new Counter({
        name: 'informer_watches_total',
        help: 'Watch streams opened by an informer.',
        labelNames: ['name'],
        registers: [registry],
      }),
      watchErrors: new Counter({
        name: 'informer_watch_errors_total',
        help:
          'Lists and watches that ended with an error, by reason (Expired, Stalled, ServiceUnavailable, ' +
          'ShortWatch: a watch the server ended within a second without an event, ...).',
        labelNames: ['name', 'reason'],
        registers: [registry],
      }),
      events: new Counter({
        name: 'informer_events_total',
        help: 'Watch events received by an informer, by type.',
        labelNames: ['name', 'type'],
        registers: [registry],
      }),
      objects: new Gauge({
        name: 'informer_objects',
        help: 'Objects held in an informer cache.',
        labelNames: ['name'],
        registers: [registry],
      }),
    };
    metricsByRegistry.set(registry, m);
  }
  return m;
}

/** Read access to a cache, as controllers use it. */
export interface Lister<T> {
  get(namespace: string | undefined, name: string): DeepReadonly<T> | undefined;
  getByKey(key: string): DeepReadonly<T> | undefined;
  list(namespace?: string): DeepReadonly<T>[];
  byIndex(index: string, value: string): DeepReadonly<T>[];
  /** Whether an object under an index value satisfies `pred`: stops at the first, lists nothing. */
  someByIndex(index: string, value: string, pred: (obj: DeepReadonly<T>) => boolean): boolean;
}

/**
 * A watch the server ends within this time without an event is a failure, not a timeout (the
 * threshold of client-go's reflector): a server or proxy that closes every watch at once would
 * otherwise be asked again in a tight loop.
 */
export const SHORT_WATCH_MS = 1000;

/** How one round of the informer's loop (a list if needed, then a watch) ended. */
export interface RoundEnd {
  /** 'closed': the server ended the watch; 'expired': 410 Gone (list or watch); 'failed': any other error. */
  how: 'closed' | 'expired' | 'failed';
  /** Events the watch delivered, bookmarks included (0 when the list or the watch request failed). */
  events: number;
  /** From sending the watch request to the end of the stream (0 when no watch was opened). */
  watchMs: number;
}

/** Rounds since the last healthy watch that ended in 410 Gone, and that were short watches. */
export interface Streaks {
  readonly expired: number;
  readonly short: number;
}

export const NO_STREAKS: Streaks = Object.freeze({ expired: 0, short: 0 });

export interface Restart {
  /** The watch was healthy: the backoff starts again from its initial delay. */
  resetBackoff: boolean;
  /** Start again from a full list. */
  relist: boolean;
  /** Wait out the next backoff delay before the next request. */
  backoff: boolean;
  streaks: Streaks;
}

/**
 * What to do after a round. A watch is healthy when it delivered an event or when the server
 * ended it cleanly after SHORT_WATCH_MS or more (its timeout). After a healthy watch the backoff
 * starts over and the next watch is opened at once. A 410 Gone re-lists, at once when no 410
 * came since the last healthy watch (the common case: one 410 after a long watch), after a
 * backoff otherwise (a server that answers every watch from a fresh list with 410 would make
 * the informer list in a tight loop). A short watch, and any other error, retries the watch from
 * the same resourceVersion after a backoff.
 */
export function planRestart(end: RoundEnd, before: Streaks): Restart {
  const healthy = end.events > 0 || (end.how === 'closed' && end.watchMs >= SHORT_WATCH_MS);
  const streaks = healthy ? NO_STREAKS : before;
  switch (end.how) {
    case 'closed':
      return healthy
        ? { resetBackoff: true, relist: false, backoff: false, streaks }
        : {
            resetBackoff: false,
            relist: false,
            backoff: true,
            streaks: { ...streaks, short: streaks.short + 1 },
          };
    case 'expired':
      return {
        resetBackoff: healthy,
        relist: true,
        backoff: streaks.expired > 0,
        streaks: { ...streaks, expired: streaks.expired + 1 },
      };
    case 'failed':
      return { resetBackoff: healthy, relist: false, backoff: true, streaks };
  }
}

/** The watch of the current round: when its request was sent, how many events it delivered. */
interface WatchRound {
  startedAt: number | undefined;
  events: number;
}

/**
 * Keeps a local cache of one resource in sync with the apiserver: a paginated list, then a watch
 * with bookmarks from the last resourceVersion; a re-list on 410 Gone; a watchdog for silent
 * streams; reconnects with exponential backoff and jitter (see planRestart).
 */
export class Informer<T extends KubeObject> implements Lister<T> {
  private readonly store = new Map<string, DeepReadonly<T>>();
  private readonly indexers = new Map<string, { fn: IndexFunc<T>; values: Map<string, Set<string>> }>();
  private readonly handlers: InformerHandlers<T>[] = [];
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly metrics: InformerMetrics | undefined;
  private readonly name: string;
  private readonly backoff: Backoff;
  private resourceVersion: string | undefined;
  private synced = false;
  private syncWaiters: (() => void)[] = [];
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private resyncTimer: TimerHandle | undefined;
  private sleepAbort: AbortController | undefined;
  private readonly outage: OutageLog;

  constructor(private readonly opts: InformerOptions<T>) {
    this.clock = opts.clock ?? new RealClock();
    this.name = opts.name ?? resourceLabel(opts.resource);
    this.log = opts.logger.child({ informer: this.name });
    this.metrics = informerMetrics(opts.registry);
    this.backoff = new Backoff({
      initialMs: opts.backoff?.initialMs ?? 800,
      maxMs: opts.backoff?.maxMs ?? 30_000,
      factor: 2,
      jitter: 1,
      resetAfterMs: 120_000,
      clock: this.clock,
    });
    this.outage = new OutageLog({ what: 'list/watch', log: this.log, clock: this.clock });
    this.addIndexer(NAMESPACE_INDEX, namespaceIndex);
    this.addIndexer(CONTROLLER_UID_INDEX, controllerOwnerUIDIndex);
  }

  addHandler(h: InformerHandlers<T>): void {
    this.handlers.push(h);
    // Late handlers see the current cache as adds, as client-go does.
    if (this.synced) for (const obj of this.store.values()) this.call(() => h.onAdd?.(obj, false));
  }

  addIndexer(name: string, fn: IndexFunc<T>): void {
    if (this.indexers.has(name)) throw new Error(`indexer ${name} already exists`);
    const values = new Map<string, Set<string>>();
    for (const [key, obj] of this.store) this.indexInto(values, fn, key, obj);
    this.indexers.set(name, { fn, values });
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** Resolves once the first list has been delivered to the handlers. */
  waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        reject(new AbortedError(`informer ${this.name}: waitForSync aborted`, 0, 'Aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.syncWaiters.push(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  /** The resourceVersion the cache is at (for tests and diagnostics). */
  lastSyncResourceVersion(): string | undefined {
    return this.resourceVersion;
  }

  start(): void {
    if (this.loop !== undefined) return;
    this.abort = new AbortController();
    this.loop = this.run(this.abort.signal);
    const period = this.opts.resyncPeriodMs ?? 0;
    if (period > 0) this.scheduleResync(period);
  }

  /**
   * Ends a backoff wait at once, so a failed list/watch is retried now (called when an outage is
   * known to be over: waiting out a long backoff would leave the cache stale).
   */
  retryNow(): void {
    this.sleepAbort?.abort();
  }

  async stop(): Promise<void> {
    this.abort?.abort();
    this.sleepAbort?.abort();
    this.resyncTimer?.cancel();
    await this.loop;
    this.loop = undefined;
  }

  // ---- Lister ----

  get(namespace: string | undefined, name: string): DeepReadonly<T> | undefined {
    return this.store.get(namespace === undefined || namespace === '' ? name : `${namespace}/${name}`);
  }

  getByKey(key: string): DeepReadonly<T> | undefined {
    return this.store.get(key);
  }

  list(namespace?: string): DeepReadonly<T>[] {
    if (namespace === undefined) return [...this.store.values()];
    return this.byIndex(NAMESPACE_INDEX, namespace);
  }

  byIndex(index: string, value: string): DeepReadonly<T>[] {
    const idx = this.indexers.get(index);
    if (idx === undefined) throw new Error(`informer ${this.name} has no index ${index}`);
    const keys = idx.values.get(value);
    if (keys === undefined) return [];
    const out: DeepReadonly<T>[] = [];
    for (const k of keys) {
      const o = this.store.get(k);
      if (o !== undefined) out.push(o);
    }
    return out;
  }

  someByIndex(index: string, value: string, pred: (obj: DeepReadonly<T>) => boolean): boolean {
    const idx = this.indexers.get(index);
    if (idx === undefined) throw new Error(`informer ${this.name} has no index ${index}`);
    for (const k of idx.values.get(value) ?? []) {
      const o = this.store.get(k);
      if (o !== undefined && pred(o)) return true;
    }
    return false;
  }

  keys(): string[] {
    return [...this.store.keys()];
  }

  size(): number {
    return this.store.size;
  }

  // ---- internals ----

  private trim(obj: T): T {
    return this.opts.transform === undefined ? obj : this.opts.transform(obj);
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log.error('event handler failed', { err });
    }
  }

  private indexInto(
    values: Map<string, Set<string>>,
    fn: IndexFunc<T>,
    key: string,
    obj: DeepReadonly<T>,
  ): void {
    for (const v of fn(obj)) {
      let set = values.get(v);
      if (set === undefined) {
        set = new Set();
        values.set(v, set);
      }
      set.add(key);
    }
  }

  private unindex(key: string, obj: DeepReadonly<T>): void {
    for (const { fn, values } of this.indexers.values()) {
      for (const v of fn(obj)) {
        const set = values.get(v);
        set?.delete(key);
        if (set?.size === 0) values.delete(v);
      }
    }
  }

  private put(key: string, obj: DeepReadonly<T>): DeepReadonly<T> | undefined {
    const old = this.store.get(key);
    if (old !== undefined) this.unindex(key, old);
    this.store.set(key, obj);
    for (const { fn, values } of this.indexers.values()) this.indexInto(values, fn, key, obj);
    return old;
  }

  private remove(key: string): DeepReadonly<T> | undefined {
    const old = this.store.get(key);
    if (old === undefined) return undefined;
    this.unindex(key, old);
    this.store.delete(key);
    return old;
  }

  private scheduleResync(period: number): void {
    this.resyncTimer = this.clock.setTimeout(() => {
      if (this.abort?.signal.aborted !== false) return;
      if (this.synced) {
        for (const obj of this.store.values())
          for (const h of this.handlers) this.call(() => h.onUpdate?.(obj, obj));
      }
      this.scheduleResync(period);
    }, period);
  }

  private async run(signal: AbortSignal): Promise<void> {
    let streaks = NO_STREAKS;
    while (!signal.aborted) {
      const watch: WatchRound = { startedAt: undefined, events: 0 };
      let err: unknown;
      try {
        if (this.resourceVersion === undefined) await this.relist(signal);
        await this.watchOnce(signal, watch);
      } catch (e) {
        err = e;
      }
      if (isAborted(signal)) break;
      const end: RoundEnd = {
        how: err === undefined ? 'closed' : err instanceof GoneError ? 'expired' : 'failed',
        events: watch.events,
        watchMs: watch.startedAt === undefined ? 0 : this.clock.now() - watch.startedAt,
      };
      const plan = planRestart(end, streaks);
      streaks = plan.streaks;
      if (plan.resetBackoff) this.backoff.reset();
      const delay = plan.backoff ? this.backoff.next() : 0;
      this.report(end, err, plan, delay);
      // After a 410 our resourceVersion is older than what the server keeps: start over from a list.
      if (plan.relist) this.resourceVersion = undefined;
      if (plan.backoff) await this.pause(delay, signal);
    }
  }

  /** Metrics and log lines for a round that did not end with a healthy watch the server closed. */
  private report(end: RoundEnd, err: unknown, plan: Restart, delayMs: number): void {
    if (end.how === 'closed' && !plan.backoff) return;
    const reason = end.how === 'closed' ? 'ShortWatch' : errorReason(err);
    this.metrics?.watchErrors.inc({ name: this.name, reason });
    const retryInMs = Math.round(delayMs);
    const resourceVersion = this.resourceVersion;
    switch (end.how) {
      case 'failed':
        // One failure is routine (a watch connection dropped); the outage log warns on repeats.
        this.log.verbose('list/watch failed, retrying', { err, retryInMs });
        this.outage.failure(err);
        return;
      case 'expired':
        if (plan.backoff) {
          this.log.warn('resourceVersion expired again, re-listing after a backoff', {
            resourceVersion,
            inARow: plan.streaks.expired,
            retryInMs,
          });
        } else {
          this.log.info('resourceVersion expired, re-listing', { resourceVersion });
        }
        return;
      case 'closed': {
        // The list and watch requests succeeded: no failure for the outage log, which counts those.
        const msg = 'watch ended at once without an event, retrying after a backoff';
        const fields = { inARow: plan.streaks.short, retryInMs };
        if (plan.streaks.short > 1) this.log.warn(msg, fields);
        else this.log.verbose(msg, fields);
      }
    }
  }

  /** Waits out a backoff delay; stop() and retryNow() end the wait early. */
  private async pause(ms: number, signal: AbortSignal): Promise<void> {
    this.sleepAbort = new AbortController();
    const onAbort = (): void => this.sleepAbort?.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      await this.clock.sleep(ms, this.sleepAbort.signal);
    } catch {
      // stopped or told to retry now
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  private async relist(signal: AbortSignal): Promise<void> {
    this.metrics?.lists.inc({ name: this.name });
    const { items, resourceVersion } = await this.opts.client.listAll<T>(this.opts.resource, {
      ...(this.opts.namespace === undefined ? {} : { namespace: this.opts.namespace }),
      ...(this.opts.labelSelector === undefined ? {} : { labelSelector: this.opts.labelSelector }),
      ...(this.opts.fieldSelector === undefined ? {} : { fieldSelector: this.opts.fieldSelector }),
      pageSize: this.opts.pageSize ?? 500,
      signal,
    });
    if (signal.aborted) return;
    this.outage.success();
    const initial = !this.synced;
    const seen = new Set<string>();
    for (const raw of items) {
      const obj = prepare(this.trim(raw));
      const key = objectKey(obj);
      seen.add(key);
      const old = this.put(key, obj);
      if (old === undefined) {
        for (const h of this.handlers) this.call(() => h.onAdd?.(obj, initial));
      } else if (old.metadata.resourceVersion !== obj.metadata.resourceVersion) {
        for (const h of this.handlers) this.call(() => h.onUpdate?.(old, obj));
      }
    }
    for (const key of [...this.store.keys()]) {
      if (seen.has(key)) continue;
      const old = this.remove(key);
      if (old !== undefined) for (const h of this.handlers) this.call(() => h.onDelete?.(old, true));
    }
    this.resourceVersion = resourceVersion;
    this.metrics?.objects.set({ name: this.name }, this.store.size);
    this.log.debug('listed', { objects: items.length, resourceVersion });
    if (!this.synced) {
      this.synced = true;
      const waiters = this.syncWaiters;
      this.syncWaiters = [];
      for (const w of waiters) w();
    }
  }

  private async watchOnce(signal: AbortSignal, round: WatchRound): Promise<void> {
    const base = this.opts.watchTimeoutSeconds ?? 300;
    const timeoutSeconds = Math.round(base * (1 + Math.random()));
    this.metrics?.watches.inc({ name: this.name });
    // From the request on: a proxy may hold back the response headers until the first event.
    round.startedAt = this.clock.now();
    const stream = await this.opts.client.watch<T>(this.opts.resource, {
      ...(this.opts.namespace === undefined ? {} : { namespace: this.opts.namespace }),
      ...(this.opts.labelSelector === undefined ? {} : { labelSelector: this.opts.labelSelector }),
      ...(this.opts.fieldSelector === undefined ? {} : { fieldSelector: this.opts.fieldSelector }),
      ...(this.resourceVersion === undefined ? {} : { resourceVersion: this.resourceVersion }),
      allowWatchBookmarks: true,
      timeoutSeconds,
      idleTimeoutMs: this.opts.idleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS,
      signal,
    });
    this.outage.success();
    for await (const ev of stream) {
      if (signal.aborted) break;
      this.handleEvent(ev);
      round.events++;
    }
  }

  private handleEvent(ev: WatchEvent<T>): void {
    this.metrics?.events.inc({ name: this.name, type: ev.type });
    switch (ev.type) {
      case 'ADDED':
      case 'MODIFIED': {
        const obj = prepare(this.trim(ev.object));
        const old = this.put(objectKey(obj), obj);
        this.resourceVersion = obj.metadata.resourceVersion ?? this.resourceVersion;
        if (old === undefined) for (const h of this.handlers) this.call(() => h.onAdd?.(obj, false));
        else for (const h of this.handlers) this.call(() => h.onUpdate?.(old, obj));
        break;
      }
      case 'DELETED': {
        const obj = prepare(this.trim(ev.object));
        const old = this.remove(objectKey(obj));
        this.resourceVersion = obj.metadata.resourceVersion ?? this.resourceVersion;
        // Deliver the state from the event (the newest), even if it was not cached.
        for (const h of this.handlers) this.call(() => h.onDelete?.(obj, false));
        if (old === undefined)
          this.log.debug('delete event for an object not in the cache', { key: objectKey(obj) });
        break;
      }
      case 'BOOKMARK':
        this.resourceVersion = ev.object.metadata.resourceVersion ?? this.resourceVersion;
        break;
      case 'ERROR': {
        const status = ev.object as unknown as Status;
        throw errorFromResponse(status.code ?? 500, status, `watch ${this.name}`);
      }
      default:
        this.log.warn('unknown watch event type', { type: String(ev.type) });
    }
    this.metrics?.objects.set({ name: this.name }, this.store.size);
  }
}
