// A controller's own writes that its cache does not show yet.
//
// A controller writes an object, and the watch brings the write back into its cache a moment
// later. A reconcile of that object that starts in between (another event enqueued it: a Node of
// the machine appeared, say) sees the object as it was before the write and redoes the work the
// write finished: it calls the cloud again, and its conditional write is refused as a conflict and
// retried. OwnWrites remembers the resourceVersion of each object's last write, and the controller
// skips a reconcile whose object is older: the watch event of the write enqueues it again.
//
// The resourceVersion is compared for equality only (it is opaque). Two cases never show the
// written version in the cache: a later write by someone else already delivered when ours is
// recorded, and a re-list that skips it. The wait therefore ends after `waitMs` whatever the cache
// shows, so a lost event costs a short delay, never a stuck object.

import type { Clock } from './clock.js';
import type {
  DeleteOptions,
  KubeApi,
  ListOptions,
  PatchOptions,
  WatchEvent,
  WatchOptions,
  WriteOptions,
} from './client.js';
import { objectKey } from './informer.js';
import type { ResourceType } from './resources.js';
import type { KubeList, KubeObject, Scale } from './types.js';

/** How long a reconcile waits at most for the cache to show the controller's last write. */
export const OWN_WRITE_WAIT_MS = 5_000;

/** The last write per object key that the cache has not shown yet. */
export class OwnWrites {
  private readonly pending = new Map<string, { rv: string; at: number }>();

  constructor(
    private readonly clock: Clock,
    /** The resourceVersion the cache shows for a key now (undefined: not there). */
    private readonly cachedVersion: (key: string) => string | undefined,
    private readonly waitMs = OWN_WRITE_WAIT_MS,
  ) {}

  /** The controller wrote the object; `rv` is the version the API server answered with. */
  wrote(key: string, rv: string | undefined): void {
    if (rv === undefined || rv === '' || this.cachedVersion(key) === rv) {
      this.pending.delete(key);
      return;
    }
    this.pending.set(key, { rv, at: this.clock.now() });
  }

  /** The cache shows this version of the object now (an informer's add or update). */
  seen(key: string, rv: string | undefined): void {
    if (this.pending.get(key)?.rv === rv) this.pending.delete(key);
  }

  /**
   * How long to wait for the cache to show the last write before reconciling from `cachedRv`;
   * undefined when it shows it (or the wait is over).
   */
  waitFor(key: string, cachedRv: string | undefined): number | undefined {
    const p = this.pending.get(key);
    if (p === undefined) return undefined;
    const left = p.at + this.waitMs - this.clock.now();
    if (p.rv === cachedRv || left <= 0) {
      this.pending.delete(key);
      return undefined;
    }
    return left;
  }

  forget(key: string): void {
    this.pending.delete(key);
  }

  /** How many writes are awaited (for tests). */
  get size(): number {
    return this.pending.size;
  }
}

/**
 * A client that tells `writes` the version of every object of `resource` it writes (create,
 * update, patch, status included; dry runs not) and otherwise is `client`.
 */
export class OwnWritesClient implements KubeApi {
  constructor(
    private readonly client: KubeApi,
    private readonly resource: ResourceType,
    private readonly writes: OwnWrites,
  ) {}

  private async noted<T extends KubeObject>(
    res: ResourceType,
    opts: WriteOptions | undefined,
    write: Promise<T>,
  ): Promise<T> {
    const obj = await write;
    // A write answers with the object; an empty answer (a fake, say) is noted as nothing.
    const written = obj as Partial<T> | undefined;
    if (
      written?.metadata !== undefined &&
      res.group === this.resource.group &&
      res.plural === this.resource.plural &&
      opts?.dryRun !== true
    )
      this.writes.wrote(objectKey(obj), written.metadata.resourceVersion);
    return obj;
  }

  get<T extends KubeObject>(
    res: ResourceType,
    name: string,
    namespace?: string,
    signal?: AbortSignal,
  ): Promise<T> {
    return this.client.get<T>(res, name, namespace, signal);
  }

  list<T extends KubeObject>(res: ResourceType, opts?: ListOptions): Promise<KubeList<T>> {
    return this.client.list<T>(res, opts);
  }

  listAll<T extends KubeObject>(
    res: ResourceType,
    opts?: Omit<ListOptions, 'continue'> & { pageSize?: number; onPage?: (items: T[]) => void },
  ): Promise<{ items: T[]; resourceVersion: string }> {
    return this.client.listAll<T>(res, opts);
  }

  create<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T> {
    return this.noted(res, opts, this.client.create<T>(res, obj, opts));
  }

  update<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T> {
    return this.noted(res, opts, this.client.update<T>(res, obj, opts));
  }

  updateStatus<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T> {
    return this.noted(res, opts, this.client.updateStatus<T>(res, obj, opts));
  }

  patch<T extends KubeObject>(
    res: ResourceType,
    name: string,
    patch: unknown,
    opts: PatchOptions,
  ): Promise<T> {
    return this.noted(res, opts, this.client.patch<T>(res, name, patch, opts));
  }

  delete(res: ResourceType, name: string, opts?: DeleteOptions): Promise<unknown> {
    return this.client.delete(res, name, opts);
  }

  getScale(res: ResourceType, name: string, namespace: string): Promise<Scale> {
    return this.client.getScale(res, name, namespace);
  }

  evict(
    namespace: string,
    name: string,
    opts?: { gracePeriodSeconds?: number; signal?: AbortSignal },
  ): Promise<void> {
    return this.client.evict(namespace, name, opts);
  }

  scale(res: ResourceType, name: string, namespace: string, replicas: number): Promise<Scale> {
    return this.client.scale(res, name, namespace, replicas);
  }

  watch<T>(res: ResourceType, opts?: WatchOptions): Promise<AsyncIterableIterator<WatchEvent<T>>> {
    return this.client.watch<T>(res, opts);
  }
}
