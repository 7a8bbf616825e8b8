import { randomUUID } from 'node:crypto';

import type { KubeList, KubeObject, LabelSelectorRequirement, Scale } from '../../lib/kube/types.js';
import {
  AsyncChannel,
  type DeleteOptions,
  type KubeApi,
  type ListOptions,
  type PatchOptions,
  type WatchEvent,
  type WatchOptions,
  type WriteOptions,
} from '../../lib/kube/client.js';
import {
  AlreadyExistsError,
  ConflictError,
  GoneError,
  InvalidError,
  NotFoundError,
} from '../../lib/kube/errors.js';
import { selectorMatches } from '../../lib/kube/labels.js';
import { CoreResources, resourceLabel, type ResourceType } from '../../lib/kube/resources.js';

/** One API call the fake received (for asserting the exact writes a reconcile made). */
export interface RecordedAction {
  verb: 'get' | 'list' | 'create' | 'update' | 'patch' | 'delete' | 'watch';
  resource: string;
  namespace: string | undefined;
  name: string | undefined;
  subresource?: string | undefined;
  body?: unknown;
  patchType?: string;
}

/** Returns an error to fail the call with, or undefined to let it through. */
export type Reactor = (action: RecordedAction) => Error | undefined;

interface StoredEvent {
  rv: number;
  res: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: KubeObject;
}

interface Watcher {
  res: string;
  opts: WatchOptions;
  channel: AsyncChannel<WatchEvent<unknown>>;
}

function keyOf(namespace: string | undefined, name: string): string {
  return namespace === undefined || namespace === '' ? name : `${namespace}/${name}`;
}

/** Parses the equality subset of label selector strings: "a=b,c!=d,e,!f,g in (x,y)". */
export function parseSelector(s: string): {
  matchLabels: Record<string, string>;
  matchExpressions: LabelSelectorRequirement[];
} {
  const matchLabels: Record<string, string> = {};
  const matchExpressions: LabelSelectorRequirement[] = [];
  const parts = s.match(/[^,(]+(\([^)]*\))?/g) ?? [];
  for (const raw of parts) {
    const p = raw.trim();
    if (p === '') continue;
    let m = /^(\S+)\s+(in|notin)\s+\((.*)\)$/.exec(p);
    if (m?.[1] !== undefined && m[2] !== undefined && m[3] !== undefined) {
      matchExpressions.push({
        key: m[1],
        operator: m[2] === 'in' ? 'In' : 'NotIn',
        values: m[3].split(',').map((v) => v.trim()),
      });
      continue;
    }
    m = /^([^!=]+)!=(.*)$/.exec(p);
    if (m?.[1] !== undefined && m[2] !== undefined) {
      matchExpressions.push({ key: m[1], operator: 'NotIn', values: [m[2]] });
      continue;
    }
    m = /^([^=]+)==?(.*)$/.exec(p);
    if (m?.[1] !== undefined && m[2] !== undefined) {
      matchLabels[m[1]] = m[2];
      continue;
    }
    if (p.startsWith('!')) matchExpressions.push({ key: p.slice(1), operator: 'DoesNotExist' });
    else matchExpressions.push({ key: p, operator: 'Exists' });
  }
  return { matchLabels, matchExpressions };
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return structuredClone(patch);
  const out: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) Reflect.deleteProperty(out, k);
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/**
 * The strategic-merge subset controllers use: a merge patch, except that lists of objects keyed by
 * `type` (conditions) merge item by item instead of being replaced.
 */
function strategicPatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return structuredClone(patch);
  const out: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    const cur = out[k];
    if (v === null) Reflect.deleteProperty(out, k);
    else if (k === 'conditions' && Array.isArray(v) && Array.isArray(cur)) {
      const merged = [...(cur as { type?: string }[])].map((c) => ({ ...c }));
      for (const item of v as { type?: string }[]) {
        const i = merged.findIndex((c) => c.type === item.type);
        if (i >= 0) merged[i] = { ...merged[i], ...item };
        else merged.push(structuredClone(item));
      }
      out[k] = merged;
    } else out[k] = strategicPatch(cur, v);
  }
  return out;
}

function jsonPointer(path: string): string[] {
  return path
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function jsonPatch(doc: unknown, ops: { op: string; path: string; value?: unknown }[]): unknown {
  const root = structuredClone(doc) as Record<string, unknown>;
  for (const op of ops) {
    const parts = jsonPointer(op.path);
    const last = parts.pop();
    if (last === undefined) throw new InvalidError('empty json patch path', 422, 'Invalid');
    let parent: unknown = root;
    for (const p of parts) {
      parent = (parent as Record<string, unknown>)[p];
      if (parent === undefined || parent === null) {
        throw new InvalidError(`json patch: path ${op.path} does not exist`, 422, 'Invalid');
      }
    }
    const container = parent as Record<string, unknown>;
    switch (op.op) {
      case 'test':
        if (JSON.stringify(container[last]) !== JSON.stringify(op.value)) {
          throw new InvalidError(`json patch test failed at ${op.path}`, 422, 'Invalid');
        }
        break;
      case 'remove':
        if (Array.isArray(container)) (container as unknown[]).splice(Number(last), 1);
        else Reflect.deleteProperty(container, last);
        break;
      case 'add':
        if (Array.isArray(container)) {
          const arr = container as unknown[];
          if (last === '-') arr.push(op.value);
          else arr.splice(Number(last), 0, op.value);
        } else container[last] = op.value;
        break;
      case 'replace':
        container[last] = op.value;
        break;
      default:
        throw new InvalidError(`json patch op ${op.op} not supported by the fake`, 422, 'Invalid');
    }
  }
  return root;
}

function specOf(o: KubeObject): string {
  const { metadata: _m, status: _s, ...rest } = o as KubeObject & { status?: unknown };
  return JSON.stringify(rest);
}

export interface FakeKubeOptions {
  /** Whether a resource has a status subresource (default: every custom resource, nodes and pods). */
  statusSubresource?: (res: ResourceType) => boolean;
  now?: () => number;
}

/**
 * An in-memory Kubernetes API for unit tests: resourceVersions, optimistic concurrency,
 * generateName, generation bumps on spec changes, status subresources, finalizers and
 * deletionTimestamp, merge and JSON patches, watches, and a record of every call.
 */
export class FakeKube implements KubeApi {
  readonly actions: RecordedAction[] = [];
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private readonly log: StoredEvent[] = [];
  private readonly watchers = new Set<Watcher>();
  private reactors: Reactor[] = [];
  private rv = 100;
  private compactedRV = 0;
  private held: { w: Watcher; ev: StoredEvent }[] | undefined;
  private readonly statusSub: (res: ResourceType) => boolean;
  private readonly now: () => number;

  constructor(opts: FakeKubeOptions = {}) {
    this.statusSub =
      opts.statusSubresource ??
      ((res) => res.group !== '' || res.plural === 'nodes' || res.plural === 'pods');
    this.now = opts.now ?? Date.now;
  }

  /** Adds a reactor; it sees every call before the fake handles it. */
  react(r: Reactor): void {
    this.reactors.push(r);
  }

  clearReactors(): void {
    this.reactors = [];
  }

  /** Writes (create/update/patch/delete) recorded since the last call to clearActions(). */
  writes(): RecordedAction[] {
    return this.actions.filter((a) => a.verb !== 'get' && a.verb !== 'list' && a.verb !== 'watch');
  }

  clearActions(): void {
    this.actions.length = 0;
  }

  /** Seeds objects without recording actions. */
  seed(res: ResourceType, ...objs: KubeObject[]): void {
    for (const o of objs) this.store(res, this.stamp(structuredClone(o), o.metadata.namespace), 'ADDED');
  }

  /** The stored object (a copy), or undefined. */
  peek<T extends KubeObject>(res: ResourceType, name: string, namespace?: string): T | undefined {
    const o = this.bucket(res).get(keyOf(res.namespaced ? namespace : undefined, name));
    return o === undefined ? undefined : (structuredClone(o) as T);
  }

  all<T extends KubeObject>(res: ResourceType, namespace?: string): T[] {
    return [...this.bucket(res).values()]
      .filter((o) => namespace === undefined || o.metadata.namespace === namespace)
      .map((o) => structuredClone(o) as T);
  }

  private bucket(res: ResourceType): Map<string, KubeObject> {
    const k = resourceLabel(res);
    let b = this.objects.get(k);
    if (b === undefined) {
      b = new Map();
      this.objects.set(k, b);
    }
    return b;
  }

  private record(action: RecordedAction): void {
    this.actions.push(action);
    for (const r of this.reactors) {
      const err = r(action);
      if (err !== undefined) throw err;
    }
  }

  private nextRV(): string {
    this.rv++;
    return String(this.rv);
  }

  private stamp(o: KubeObject, namespace: string | undefined): KubeObject {
    if (namespace === undefined) delete o.metadata.namespace;
    else o.metadata.namespace = namespace;
    o.metadata.uid ??= randomUUID();
    o.metadata.creationTimestamp ??= new Date(this.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
    o.metadata.generation ??= 1;
    o.metadata.resourceVersion = this.nextRV();
    return o;
  }

  private store(res: ResourceType, o: KubeObject, type: StoredEvent['type']): void {
    const key = keyOf(o.metadata.namespace, o.metadata.name ?? '');
    if (type === 'DELETED') this.bucket(res).delete(key);
    else this.bucket(res).set(key, o);
    const ev: StoredEvent = {
      rv: Number(o.metadata.resourceVersion),
      res: resourceLabel(res),
      type,
      object: o,
    };
    this.log.push(ev);
    for (const w of this.watchers) this.deliver(w, ev);
  }

  private matches(
    o: KubeObject,
    opts: { namespace?: string; labelSelector?: string; fieldSelector?: string },
  ): boolean {
    if (opts.namespace !== undefined && opts.namespace !== '' && o.metadata.namespace !== opts.namespace)
      return false;
    if (opts.labelSelector !== undefined && opts.labelSelector !== '') {
      if (!selectorMatches(parseSelector(opts.labelSelector), o.metadata.labels)) return false;
    }
    if (opts.fieldSelector !== undefined && opts.fieldSelector !== '') {
      for (const term of opts.fieldSelector.split(',')) {
        const [field, value] = term.split('=');
        if (field === 'metadata.name' && o.metadata.name !== value) return false;
        if (field === 'metadata.namespace' && o.metadata.namespace !== value) return false;
      }
    }
    return true;
  }

  private deliver(w: Watcher, ev: StoredEvent): void {
    if (ev.res !== w.res || !this.matches(ev.object, w.opts)) return;
    if (this.held !== undefined) {
      this.held.push({ w, ev });
      return;
    }
    w.channel.push({ type: ev.type, object: structuredClone(ev.object) });
  }

  /** Holds back watch events (a lagging cache) until releaseWatches(). */
  holdWatches(): void {
    this.held ??= [];
  }

  /**
   * Delivers the held events (in order); with `only`, just that resource's events, and the others
   * stay held (one watch lagging behind another).
   */
  releaseWatches(only?: ResourceType): void {
    const held = this.held ?? [];
    const label = only === undefined ? undefined : resourceLabel(only);
    const release = held.filter(({ ev }) => label === undefined || ev.res === label);
    this.held = label === undefined ? undefined : held.filter(({ ev }) => ev.res !== label);
    for (const { w, ev } of release) w.channel.push({ type: ev.type, object: structuredClone(ev.object) });
  }

  private existing(res: ResourceType, name: string, namespace: string | undefined): KubeObject {
    const ns = res.namespaced ? namespace : undefined;
    const o = this.bucket(res).get(keyOf(ns, name));
    if (o === undefined) {
      throw new NotFoundError(`${resourceLabel(res)} "${name}" not found`, 404, 'NotFound', {
        kind: 'Status',
        reason: 'NotFound',
        code: 404,
      });
    }
    return o;
  }

  get<T extends KubeObject>(res: ResourceType, name: string, namespace?: string): Promise<T> {
    try {
      this.record({ verb: 'get', resource: resourceLabel(res), namespace, name });
      return Promise.resolve(structuredClone(this.existing(res, name, namespace)) as T);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  list<T extends KubeObject>(res: ResourceType, opts: ListOptions = {}): Promise<KubeList<T>> {
    try {
      this.record({ verb: 'list', resource: resourceLabel(res), namespace: opts.namespace, name: undefined });
      const items = [...this.bucket(res).values()].filter((o) => this.matches(o, opts));
      return Promise.resolve({
        metadata: { resourceVersion: String(this.rv) },
        items: items.map((o) => structuredClone(o) as T),
      });
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  async listAll<T extends KubeObject>(
    res: ResourceType,
    opts: Omit<ListOptions, 'continue'> & { pageSize?: number; onPage?: (items: T[]) => void } = {},
  ): Promise<{ items: T[]; resourceVersion: string }> {
    const l = await this.list<T>(res, opts);
    opts.onPage?.(l.items);
    return { items: l.items, resourceVersion: l.metadata.resourceVersion ?? '' };
  }

  create<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    try {
      const namespace = res.namespaced ? (opts.namespace ?? obj.metadata.namespace) : undefined;
      this.record({
        verb: 'create',
        resource: resourceLabel(res),
        namespace,
        name: obj.metadata.name ?? obj.metadata.generateName,
        body: structuredClone(obj),
      });
      const o = structuredClone(obj) as KubeObject;
      if (o.metadata.name === undefined || o.metadata.name === '') {
        if (o.metadata.generateName === undefined)
          throw new InvalidError('name or generateName is required', 422, 'Invalid');
        o.metadata.name = o.metadata.generateName + Math.random().toString(36).slice(2, 7);
      }
      if (o.metadata.resourceVersion !== undefined && o.metadata.resourceVersion !== '') {
        throw new BadResourceVersion();
      }
      if (this.bucket(res).has(keyOf(namespace, o.metadata.name))) {
        throw new AlreadyExistsError(
          `${resourceLabel(res)} "${o.metadata.name}" already exists`,
          409,
          'AlreadyExists',
        );
      }
      delete o.metadata.uid;
      delete o.metadata.creationTimestamp;
      delete o.metadata.generation;
      delete o.metadata.deletionTimestamp;
      if (opts.dryRun === true) return Promise.resolve(o as T);
      this.store(res, this.stamp(o, namespace), 'ADDED');
      return Promise.resolve(structuredClone(o) as T);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private replace(res: ResourceType, next: KubeObject, subresource: 'status' | undefined): KubeObject {
    const name = next.metadata.name ?? '';
    const current = this.existing(res, name, next.metadata.namespace);
    const rv = next.metadata.resourceVersion;
    if (rv !== undefined && rv !== '' && rv !== current.metadata.resourceVersion) {
      throw new ConflictError(
        `Operation cannot be fulfilled on ${resourceLabel(res)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        409,
        'Conflict',
      );
    }
    let o: KubeObject & { status?: unknown };
    if (subresource === 'status') {
      o = structuredClone(current);
      const status = (next as { status?: unknown }).status;
      if (status === undefined) delete o.status;
      else o.status = structuredClone(status);
    } else {
      o = structuredClone(next);
      // Immutable metadata is kept from the stored object.
      for (const k of ['uid', 'creationTimestamp', 'namespace', 'generation', 'deletionTimestamp'] as const) {
        const v = current.metadata[k];
        if (v === undefined) Reflect.deleteProperty(o.metadata, k);
        else (o.metadata as Record<string, unknown>)[k] = v;
      }
      if (this.statusSub(res)) {
        const status = (current as { status?: unknown }).status;
        if (status === undefined) delete o.status;
        else o.status = structuredClone(status);
      }
      if (specOf(o) !== specOf(current)) o.metadata.generation = (current.metadata.generation ?? 1) + 1;
    }
    o.metadata.resourceVersion = this.nextRV();
    if (o.metadata.deletionTimestamp !== undefined && (o.metadata.finalizers ?? []).length === 0) {
      this.store(res, o, 'DELETED');
    } else {
      this.store(res, o, 'MODIFIED');
    }
    return o;
  }

  update<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    try {
      this.record({
        verb: 'update',
        resource: resourceLabel(res),
        namespace: opts.namespace ?? obj.metadata.namespace,
        name: obj.metadata.name,
        body: structuredClone(obj),
      });
      return Promise.resolve(structuredClone(this.replace(res, structuredClone(obj), undefined)) as T);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  updateStatus<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    try {
      this.record({
        verb: 'update',
        subresource: 'status',
        resource: resourceLabel(res),
        namespace: opts.namespace ?? obj.metadata.namespace,
        name: obj.metadata.name,
        body: structuredClone(obj),
      });
      return Promise.resolve(structuredClone(this.replace(res, structuredClone(obj), 'status')) as T);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  patch<T extends KubeObject>(
    res: ResourceType,
    name: string,
    patch: unknown,
    opts: PatchOptions,
  ): Promise<T> {
    try {
      this.record({
        verb: 'patch',
        resource: resourceLabel(res),
        namespace: opts.namespace,
        name,
        subresource: opts.subresource,
        body: structuredClone(patch),
        patchType: opts.type,
      });
      const current = this.existing(res, name, opts.namespace);
      let next: unknown;
      if (opts.type === 'merge') next = mergePatch(current, patch);
      else if (opts.type === 'strategic') next = strategicPatch(current, patch);
      else if (opts.type === 'json') next = jsonPatch(current, patch as { op: string; path: string }[]);
      else
        throw new InvalidError(
          `patch type ${opts.type} is not supported by the fake`,
          415,
          'UnsupportedMediaType',
        );
      const nextObj = next as KubeObject;
      // A merge patch without resourceVersion is unconditional.
      const patchRV = (patch as { metadata?: { resourceVersion?: string } } | null)?.metadata
        ?.resourceVersion;
      if (patchRV === undefined && current.metadata.resourceVersion !== undefined) {
        nextObj.metadata.resourceVersion = current.metadata.resourceVersion;
      }
      if (opts.subresource === 'scale') throw new InvalidError('use scale()', 400, 'BadRequest');
      return Promise.resolve(
        structuredClone(
          this.replace(res, nextObj, opts.subresource === 'status' ? 'status' : undefined),
        ) as T,
      );
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  delete(res: ResourceType, name: string, opts: DeleteOptions = {}): Promise<unknown> {
    try {
      this.record({
        verb: 'delete',
        resource: resourceLabel(res),
        namespace: opts.namespace,
        name,
        body: opts,
      });
      const current = this.existing(res, name, opts.namespace);
      const pre = opts.preconditions;
      if (pre?.uid !== undefined && pre.uid !== current.metadata.uid) {
        throw new ConflictError(`precondition failed: UID in precondition: ${pre.uid}`, 409, 'Conflict');
      }
      if (pre?.resourceVersion !== undefined && pre.resourceVersion !== current.metadata.resourceVersion) {
        throw new ConflictError('precondition failed: resourceVersion', 409, 'Conflict');
      }
      if (opts.dryRun === true) return Promise.resolve(structuredClone(current));
      const o = structuredClone(current);
      o.metadata.resourceVersion = this.nextRV();
      if ((o.metadata.finalizers ?? []).length > 0) {
        o.metadata.deletionTimestamp ??= new Date(this.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
        this.store(res, o, 'MODIFIED');
        return Promise.resolve(structuredClone(o));
      }
      this.store(res, o, 'DELETED');
      return Promise.resolve({ kind: 'Status', status: 'Success' });
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** Evicts by deleting the pod; a reactor can answer 429 (a PodDisruptionBudget) instead. */
  async evict(namespace: string, name: string): Promise<void> {
    this.record({ verb: 'create', resource: 'pods', namespace, name, subresource: 'eviction' });
    await this.delete(CoreResources.pods, name, { namespace });
  }

  getScale(res: ResourceType, name: string, namespace: string): Promise<Scale> {
    try {
      this.record({ verb: 'get', resource: resourceLabel(res), namespace, name, subresource: 'scale' });
      const o = this.existing(res, name, namespace) as KubeObject & {
        spec?: { replicas?: number };
        status?: { replicas?: number; labelSelector?: string };
      };
      return Promise.resolve({
        apiVersion: 'autoscaling/v1',
        kind: 'Scale',
        metadata: { name, namespace },
        spec: { replicas: o.spec?.replicas ?? 0 },
        status: {
          replicas: o.status?.replicas ?? 0,
          ...(o.status?.labelSelector === undefined ? {} : { selector: o.status.labelSelector }),
        },
      });
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  async scale(res: ResourceType, name: string, namespace: string, replicas: number): Promise<Scale> {
    this.record({
      verb: 'patch',
      resource: resourceLabel(res),
      namespace,
      name,
      subresource: 'scale',
      body: { replicas },
    });
    const current = this.existing(res, name, namespace);
    const next = mergePatch(current, { spec: { replicas } }) as KubeObject;
    this.replace(res, next, undefined);
    return this.getScale(res, name, namespace);
  }

  watch<T>(res: ResourceType, opts: WatchOptions = {}): Promise<AsyncIterableIterator<WatchEvent<T>>> {
    try {
      this.record({
        verb: 'watch',
        resource: resourceLabel(res),
        namespace: opts.namespace,
        name: undefined,
      });
      const w: Watcher = {
        res: resourceLabel(res),
        opts,
        channel: new AsyncChannel(() => this.watchers.delete(w)),
      };
      const from =
        opts.resourceVersion === undefined || opts.resourceVersion === ''
          ? this.rv
          : Number(opts.resourceVersion);
      if (from < this.compactedRV) throw new GoneError(`too old resource version: ${from}`, 410, 'Expired');
      for (const ev of this.log) if (ev.rv > from) this.deliver(w, ev);
      this.watchers.add(w);
      opts.signal?.addEventListener('abort', () => {
        this.watchers.delete(w);
        w.channel.end();
      });
      return Promise.resolve(w.channel as AsyncIterableIterator<WatchEvent<T>>);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** Ends every open watch (as a server-side timeout would). */
  closeWatches(): void {
    for (const w of this.watchers) w.channel.end();
    this.watchers.clear();
  }

  /** Forgets the event history so watches from older resourceVersions get 410 Gone. */
  compact(): void {
    this.log.length = 0;
    this.compactedRV = this.rv;
  }
}

class BadResourceVersion extends InvalidError {
  constructor() {
    super('resourceVersion should not be set on objects to be created', 422, 'Invalid');
  }
}
