import { hostname } from 'node:os';

import { Counter, type Registry } from 'prom-client';

import type { CoreEvent, KubeObject, ObjectReference } from './types.js';
import type { Logger } from '../observability/logger.js';
import type { KubeApi } from './client.js';
import { RealClock, type Clock } from './clock.js';
import { isNotFound } from './errors.js';
import type { DeepReadonly } from './informer.js';
import { TokenBucket } from './ratelimit.js';
import { CoreResources } from './resources.js';

export type EventType = 'Normal' | 'Warning';

/** What events are recorded about: any API object (or a reference to one). */
export type EventSubject = KubeObject | DeepReadonly<KubeObject>;

export interface EventRecorder {
  /** Records an event; never blocks and never throws (events are best effort). */
  event(subject: EventSubject, type: EventType, reason: string, message: string): void;
}

function referenceOf(subject: EventSubject): ObjectReference {
  const ref: ObjectReference = {};
  if (subject.apiVersion !== undefined) ref.apiVersion = subject.apiVersion;
  if (subject.kind !== undefined) ref.kind = subject.kind;
  if (subject.metadata.namespace !== undefined) ref.namespace = subject.metadata.namespace;
  if (subject.metadata.name !== undefined) ref.name = subject.metadata.name;
  if (subject.metadata.uid !== undefined) ref.uid = subject.metadata.uid;
  if (subject.metadata.resourceVersion !== undefined) ref.resourceVersion = subject.metadata.resourceVersion;
  return ref;
}

export interface KubeEventRecorderOptions {
  client: KubeApi;
  /** source.component / reportingComponent, e.g. "machineset-controller". */
  component: string;
  logger: Logger;
  registry?: Registry;
  clock?: Clock;
  host?: string;
  /** Per-object spam filter: events allowed in a burst, refilled at refillPerSecond. */
  burstPerObject?: number;
  refillPerSecond?: number;
  /** Events waiting to be written beyond this are dropped. */
  maxPending?: number;
  /** How many distinct events are remembered for aggregation. */
  cacheSize?: number;
}

interface Aggregate {
  name: string;
  namespace: string;
  count: number;
  firstTimestamp: string;
}

interface Pending {
  key: string;
  ref: ObjectReference;
  type: EventType;
  reason: string;
  message: string;
  at: number;
}

const droppedByRegistry = new WeakMap<Registry, Counter<'reason'>>();

/**
 * Writes core/v1 Events in the background. An event repeated for the same object, type, reason
 * and message updates the existing Event (count and lastTimestamp) instead of creating a new one;
 * a token bucket per object keeps a misbehaving reconcile loop from flooding the apiserver.
 */
export class KubeEventRecorder implements EventRecorder {
  private readonly clock: Clock;
  private readonly cache = new Map<string, Aggregate>();
  private readonly limiters = new Map<string, TokenBucket>();
  private queue: Pending[] = [];
  private draining: Promise<void> | undefined;
  private readonly dropped: Counter<'reason'> | undefined;
  private stopped = false;
  private seq = 0;

  constructor(private readonly opts: KubeEventRecorderOptions) {
    this.clock = opts.clock ?? new RealClock();
    if (opts.registry !== undefined) {
      let c = droppedByRegistry.get(opts.registry);
      if (c === undefined) {
        c = new Counter({
          name: 'events_dropped_total',
          help: 'Kubernetes events not written, by reason (rate_limited, queue_full, error).',
          labelNames: ['reason'],
          registers: [opts.registry],
        });
        droppedByRegistry.set(opts.registry, c);
      }
      this.dropped = c;
    }
  }

  event(subject: EventSubject, type: EventType, reason: string, message: string): void {
    if (this.stopped) return;
    const ref = referenceOf(subject);
    const objectKey = `${ref.kind ?? ''}/${ref.namespace ?? ''}/${ref.name ?? ''}/${ref.uid ?? ''}`;
    let limiter = this.limiters.get(objectKey);
    if (limiter === undefined) {
      limiter = new TokenBucket(
        this.opts.refillPerSecond ?? 1 / 300,
        this.opts.burstPerObject ?? 25,
        this.clock,
      );
      this.limiters.set(objectKey, limiter);
      if (this.limiters.size > (this.opts.cacheSize ?? 4096)) {
        const oldest = this.limiters.keys().next().value;
        if (oldest !== undefined) this.limiters.delete(oldest);
      }
    }
    if (!limiter.tryTake()) {
      this.dropped?.inc({ reason: 'rate_limited' });
      return;
    }
    if (this.queue.length >= (this.opts.maxPending ?? 1000)) {
      this.dropped?.inc({ reason: 'queue_full' });
      return;
    }
    const key = `${objectKey}/${type}/${reason}/${message}`;
    this.queue.push({ key, ref, type, reason, message, at: this.clock.now() });
    this.draining ??= this.drain().finally(() => {
      this.draining = undefined;
    });
  }

  /** Resolves when every queued event has been written (or failed). */
  async flush(): Promise<void> {
    while (this.draining !== undefined) await this.draining;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.flush();
  }

  private async drain(): Promise<void> {
    for (let next = this.queue.shift(); next !== undefined; next = this.queue.shift()) {
      try {
        await this.write(next);
      } catch (err) {
        this.dropped?.inc({ reason: 'error' });
        this.opts.logger.warn('could not write event', { err, reason: next.reason, object: next.ref.name });
      }
    }
  }

  private async write(p: Pending): Promise<void> {
    const now = new Date(p.at).toISOString().replace(/\.\d{3}Z$/, 'Z');
    const namespace = p.ref.namespace ?? 'default';
    const agg = this.cache.get(p.key);
    if (agg !== undefined) {
      try {
        await this.opts.client.patch(
          CoreResources.events,
          agg.name,
          { count: agg.count + 1, lastTimestamp: now },
          {
            type: 'merge',
            namespace: agg.namespace,
          },
        );
        agg.count++;
        // Refresh recency for the LRU.
        this.cache.delete(p.key);
        this.cache.set(p.key, agg);
        return;
      } catch (err) {
        if (!isNotFound(err)) throw err;
        this.cache.delete(p.key);
      }
    }
    // Like client-go: object name plus a nanosecond-style timestamp; the sequence keeps two events
    // recorded in the same millisecond apart.
    const name = `${p.ref.name ?? 'unknown'}.${(BigInt(p.at) * 1_000_000n + BigInt(this.seq++ % 1_000_000)).toString(16)}`;
    const ev: CoreEvent = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace },
      involvedObject: p.ref,
      reason: p.reason,
      message: p.message,
      type: p.type,
      count: 1,
      firstTimestamp: now,
      lastTimestamp: now,
      source: { component: this.opts.component, host: this.opts.host ?? hostname() },
      reportingComponent: this.opts.component,
      reportingInstance: this.opts.host ?? hostname(),
    };
    await this.opts.client.create(CoreResources.events, ev, { namespace });
    this.cache.set(p.key, { name, namespace, count: 1, firstTimestamp: now });
    if (this.cache.size > (this.opts.cacheSize ?? 4096)) {
      const oldest = this.cache.keys().next().value;
      if (oldest !== undefined) this.cache.delete(oldest);
    }
  }
}

export interface RecordedEvent {
  subject: { kind?: string | undefined; namespace?: string | undefined; name?: string | undefined };
  type: EventType;
  reason: string;
  message: string;
}

/** Records events in memory, for unit tests. */
export class FakeEventRecorder implements EventRecorder {
  readonly events: RecordedEvent[] = [];
  event(subject: EventSubject, type: EventType, reason: string, message: string): void {
    this.events.push({
      subject: { kind: subject.kind, namespace: subject.metadata.namespace, name: subject.metadata.name },
      type,
      reason,
      message,
    });
  }
  reasons(): string[] {
    return this.events.map((e) => e.reason);
  }
}
