import https from 'node:https';
import http from 'node:http';
import tls from 'node:tls';
import { URL } from 'node:url';

import type { KubeConfigSource } from './kubeconfig.js';
import { Counter, Histogram, type Registry } from 'prom-client';

import type { Logger } from '../observability/logger.js';
import type { KubeList, KubeObject, Scale } from './types.js';
import { RealClock, type Clock, type TimerHandle } from './clock.js';
import {
  AbortedError,
  FencedError,
  KubeApiError,
  TimeoutError,
  UnavailableError,
  WatchStalledError,
  errorFromResponse,
} from './errors.js';
import { ClientCredentials, agentOptions } from './credentials.js';
import { linkSignals } from './signals.js';
import { OutageLog } from './outage.js';
import type { WriteFence } from './fence.js';
import { TokenBucket } from './ratelimit.js';
import { CoreResources, resourceLabel, resourcePath, type ResourceType } from './resources.js';

export type PatchType = 'merge' | 'json' | 'strategic' | 'apply';

const patchContentType: Record<PatchType, string> = {
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  apply: 'application/apply-patch+yaml',
};

export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  resourceVersionMatch?: 'Exact' | 'NotOlderThan';
  signal?: AbortSignal;
}

export interface WriteOptions {
  namespace?: string;
  dryRun?: boolean;
  fieldManager?: string;
  signal?: AbortSignal;
}

export interface PatchOptions extends WriteOptions {
  type: PatchType;
  subresource?: 'status' | 'scale';
  /** Server-side apply only: take ownership of conflicting fields. */
  force?: boolean;
}

export interface DeleteOptions {
  namespace?: string;
  /** The delete only happens if the object still has this UID / resourceVersion. */
  preconditions?: { uid?: string; resourceVersion?: string };
  propagationPolicy?: 'Orphan' | 'Background' | 'Foreground';
  gracePeriodSeconds?: number;
  dryRun?: boolean;
  signal?: AbortSignal;
}

export interface WatchOptions {
  namespace?: string;
  resourceVersion?: string;
  labelSelector?: string;
  fieldSelector?: string;
  allowWatchBookmarks?: boolean;
  /** Server closes the stream cleanly after this long. */
  timeoutSeconds?: number;
  /** Fail the stream with WatchStalledError when no bytes arrive for this long. */
  idleTimeoutMs?: number;
  signal?: AbortSignal;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

export interface WatchEvent<T> {
  type: WatchEventType;
  /** The object; for ERROR events a metav1.Status. */
  object: T;
}

export interface KubeClientOptions {
  kubeConfig: KubeConfigSource;
  /**
   * Sustained requests per second (--kube-api-qps). Like client-go clientsets in gardener MCM, the
   * machine.sapcloud.io API and the other APIs each get a token bucket of this size.
   */
  qps?: number;
  /** Requests allowed in a burst (--kube-api-burst), per bucket. */
  burst?: number;
  registry?: Registry;
  userAgent?: string;
  /**
   * Which client of the process this is ("control", "target", "cloud-control" …): names it in
   * outage log lines, since several clients may share a server and a user agent.
   */
  name?: string;
  /**
   * When set, no write (any method but GET) leaves the client unless the fence allows it at the
   * moment it is sent, and writes waiting for a token or in flight are cancelled when it closes.
   */
  fence?: WriteFence | undefined;
  clock?: Clock;
  /** Timeout for non-watch requests. */
  requestTimeoutMs?: number;
  /** How many times a 429 (or 5xx with Retry-After) is retried after the delay the server asks for. */
  maxRetryAfter?: number;
  /** How often the kubeconfig's CA, certificate and key files are checked for a change. */
  credentialCheckIntervalMs?: number;
  /** Reports credential reloads; optional. */
  logger?: Logger;
}

interface ClientMetrics {
  requests: Counter<'code' | 'method'>;
  duration: Histogram<'verb' | 'resource'>;
}

const metricsByRegistry = new WeakMap<Registry, ClientMetrics>();

function clientMetrics(registry: Registry | undefined): ClientMetrics | undefined {
  if (registry === undefined) return undefined;
  let m = metricsByRegistry.get(registry);
  if (m === undefined) {
    m = {
      requests: new Counter({
        name: 'rest_client_requests_total',
        help: 'Number of HTTP requests to the Kubernetes API, partitioned by status code and method.',
        labelNames: ['code', 'method'],
        registers: [registry],
      }),
      duration: new Histogram({
        name: 'rest_client_request_duration_seconds',
        help: 'Request latency to the Kubernetes API in seconds, by verb and resource.',
        labelNames: ['verb', 'resource'],
        buckets: [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
        registers: [registry],
      }),
    };
    metricsByRegistry.set(registry, m);
  }
  return m;
}

interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * Requests under this path (the machine.sapcloud.io API group; lib/kube does not import lib/api)
 * take the machine API's token bucket.
 */
const MACHINE_API_PREFIX = '/apis/machine.sapcloud.io/';
/** How outage log lines name the two APIs a client budgets separately. */
const MACHINE_API_GROUP_NAME = 'machine.sapcloud.io API';
const OTHER_APIS_NAME = 'other APIs';

interface RequestSpec {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  verb: string;
  resource: string;
  signal?: AbortSignal | undefined;
  /** Fail at once on 429 instead of retrying after the server's delay (evictions: 429 is an answer). */
  noRetry?: boolean;
}

function parseRetryAfter(h: string | string[] | undefined): number | undefined {
  const v = Array.isArray(h) ? h[0] : h;
  if (v === undefined) return undefined;
  const secs = Number(v);
  return Number.isFinite(secs) && secs >= 0 ? secs * 1000 : undefined;
}

/** Small push/pull queue turning stream callbacks into an async iterator. */
export class AsyncChannel<T> implements AsyncIterableIterator<T> {
  private items: T[] = [];
  private waiting: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  private ended = false;
  private error: unknown;
  private failed = false;

  constructor(private readonly onReturn: () => void = () => undefined) {}

  push(item: T): void {
    if (this.ended) return;
    if (this.waiting !== undefined) {
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve({ value: item, done: false });
    } else {
      this.items.push(item);
    }
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.waiting !== undefined && this.items.length === 0) {
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve({ value: undefined, done: true });
    }
  }

  fail(err: unknown): void {
    if (this.ended) return;
    this.failed = true;
    this.error = err;
    this.ended = true;
    if (this.waiting !== undefined && this.items.length === 0) {
      const w = this.waiting;
      this.waiting = undefined;
      w.reject(err);
    }
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.ended) {
      if (this.failed) {
        this.failed = false;
        return Promise.reject(this.error instanceof Error ? this.error : new Error(String(this.error)));
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.ended = true;
    this.items = [];
    this.onReturn();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}

/** The API operations controllers use; KubeClient implements it, test fakes too. */
export interface KubeApi {
  get<T extends KubeObject>(
    res: ResourceType,
    name: string,
    namespace?: string,
    signal?: AbortSignal,
  ): Promise<T>;
  list<T extends KubeObject>(res: ResourceType, opts?: ListOptions): Promise<KubeList<T>>;
  listAll<T extends KubeObject>(
    res: ResourceType,
    opts?: Omit<ListOptions, 'continue'> & { pageSize?: number; onPage?: (items: T[]) => void },
  ): Promise<{ items: T[]; resourceVersion: string }>;
  create<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T>;
  update<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T>;
  updateStatus<T extends KubeObject>(res: ResourceType, obj: T, opts?: WriteOptions): Promise<T>;
  patch<T extends KubeObject>(
    res: ResourceType,
    name: string,
    patch: unknown,
    opts: PatchOptions,
  ): Promise<T>;
  delete(res: ResourceType, name: string, opts?: DeleteOptions): Promise<unknown>;
  getScale(res: ResourceType, name: string, namespace: string): Promise<Scale>;
  /**
   * Evicts a pod through the Eviction API (policy/v1), which honours PodDisruptionBudgets: a
   * budget that allows no disruption now answers TooManyRequestsError (not retried here).
   */
  evict(
    namespace: string,
    name: string,
    opts?: { gracePeriodSeconds?: number; signal?: AbortSignal },
  ): Promise<void>;
  scale(res: ResourceType, name: string, namespace: string, replicas: number): Promise<Scale>;
  watch<T>(res: ResourceType, opts?: WatchOptions): Promise<AsyncIterableIterator<WatchEvent<T>>>;
}

/**
 * A Kubernetes REST client built on the kubeconfig's auth from @kubernetes/client-node, with one
 * keep-alive agent, a client-side token bucket, typed errors and request metrics. Objects are plain
 * JSON; callers choose the type they expect.
 */
export class KubeClient implements KubeApi {
  private readonly server: URL;
  /** Plain-HTTP agents (an http:// server): requests', watch streams'. */
  private readonly agent: http.Agent;
  private readonly streamAgent: http.Agent;
  /** Token bucket of the machine.sapcloud.io API. */
  private readonly machineBucket: TokenBucket;
  /** Token bucket of every other API (core, coordination, policy, storage …). */
  private readonly coreBucket: TokenBucket;
  private readonly metrics: ClientMetrics | undefined;
  private readonly clock: Clock;
  private readonly userAgent: string;
  private readonly requestTimeoutMs: number;
  private readonly maxRetryAfter: number;
  private readonly credentials: ClientCredentials;
  /** Outage logs of the machine.sapcloud.io API and of the other APIs (they queue separately). */
  private readonly machineOutage: OutageLog | undefined;
  private readonly coreOutage: OutageLog | undefined;

  constructor(private readonly opts: KubeClientOptions) {
    const cluster = opts.kubeConfig.getCurrentCluster();
    if (cluster === null) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
    this.clock = opts.clock ?? new RealClock();
    this.machineBucket = new TokenBucket(opts.qps ?? 20, opts.burst ?? 30, this.clock);
    this.coreBucket = new TokenBucket(opts.qps ?? 20, opts.burst ?? 30, this.clock);
    this.metrics = clientMetrics(opts.registry);
    this.userAgent = opts.userAgent ?? 'machine-controller-manager-ts';
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.maxRetryAfter = opts.maxRetryAfter ?? 5;
    this.agent = new http.Agent(agentOptions(false));
    this.streamAgent = new http.Agent(agentOptions(true));
    const outageLog = (api: string): OutageLog | undefined => {
      if (opts.logger === undefined) return undefined;
      const client = opts.name ?? this.userAgent;
      return new OutageLog({
        what: `${client} client: ${api} requests`,
        log: opts.logger.child({ client, api, server: this.server.origin }),
        clock: this.clock,
      });
    };
    this.machineOutage = outageLog(MACHINE_API_GROUP_NAME);
    this.coreOutage = outageLog(OTHER_APIS_NAME);
    this.credentials = new ClientCredentials(opts.kubeConfig, {
      clock: this.clock,
      checkIntervalMs: opts.credentialCheckIntervalMs,
      logger: opts.logger,
    });
  }

  /** The API server URL this client talks to. */
  get serverUrl(): string {
    return this.server.toString();
  }

  /**
   * The agent for the next request (or watch stream, whose connections are apart from the
   * requests' bounded pool): for https, one carrying the current TLS material (cached, reloaded
   * when its files change; see ClientCredentials).
   */
  private getAgent(streams: boolean): Promise<https.Agent | http.Agent> {
    if (this.server.protocol === 'http:') return Promise.resolve(streams ? this.streamAgent : this.agent);
    return this.credentials.agent(streams);
  }

  private buildUrl(path: string, query?: RequestSpec['query']): URL {
    const url = new URL(path, this.server);
    // Keep any path prefix of the server URL (e.g. a proxy at https://host/k8s).
    if (this.server.pathname !== '/' && this.server.pathname !== '') {
      url.pathname = this.server.pathname.replace(/\/$/, '') + path;
    }
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    }
    return url;
  }

  /**
   * Sends a request and resolves with the response once its headers arrive. timeoutMs bounds
   * socket inactivity; for streams it only covers the wait for the headers.
   */
  private async open(spec: RequestSpec, timeoutMs: number, streaming = false): Promise<http.IncomingMessage> {
    if (spec.signal?.aborted === true) {
      throw new AbortedError(`${spec.method} ${spec.path}: aborted`, 0, 'Aborted');
    }
    const fence = spec.method === 'GET' ? undefined : this.opts.fence;
    const what = `${spec.method} ${spec.path}`;
    fence?.check(what);
    // The write's own signal and the fence's, linked until the request is over (see signals.ts).
    const linked =
      spec.signal === undefined && fence === undefined ? undefined : linkSignals(spec.signal, fence?.signal);
    const signal = linked?.signal;
    const bucket = spec.path.startsWith(MACHINE_API_PREFIX) ? this.machineBucket : this.coreBucket;
    let agent: https.Agent | http.Agent;
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': this.userAgent };
    try {
      try {
        await bucket.take(signal);
      } catch (err) {
        fence?.check(what);
        throw err;
      }
      agent = await this.getAgent(streaming);
      Object.assign(headers, await this.credentials.headers());
    } catch (err) {
      linked?.dispose();
      throw err;
    }
    // Checked again as late as possible: the token wait may have outlived the right to write.
    fence?.check(what);
    let payload: string | undefined;
    if (spec.body !== undefined) {
      payload = typeof spec.body === 'string' ? spec.body : JSON.stringify(spec.body);
      headers['Content-Type'] = spec.contentType ?? 'application/json';
      headers['Content-Length'] = String(Buffer.byteLength(payload));
    }
    const url = this.buildUrl(spec.path, spec.query);
    const lib = url.protocol === 'https:' ? https : http;
    const response = new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = lib.request(url, { method: spec.method, headers, agent, signal }, (res) => {
        // A watch may legitimately be quiet for minutes; its own idle watchdog takes over.
        if (streaming) req.setTimeout(0);
        resolve(res);
      });
      if (linked !== undefined) req.once('close', linked.dispose);
      req.setTimeout(timeoutMs, () => {
        req.destroy(
          new TimeoutError(`${spec.method} ${spec.path}: client timeout after ${timeoutMs} ms`, 0, 'Timeout'),
        );
      });
      req.on('error', (err) => {
        if (err instanceof KubeApiError) reject(err);
        else if (fence?.signal.aborted === true && spec.signal?.aborted !== true) {
          reject(
            new FencedError(`${what}: cancelled, the write fence closed`, 0, 'Fenced', undefined, {
              cause: err,
            }),
          );
        } else if (err.name === 'AbortError' || signal?.aborted === true) {
          reject(
            new AbortedError(`${spec.method} ${spec.path}: aborted`, 0, 'Aborted', undefined, { cause: err }),
          );
        } else {
          reject(
            new UnavailableError(
              `${spec.method} ${spec.path}: ${err.message}`,
              0,
              'ServiceUnavailable',
              undefined,
              {
                cause: err,
              },
            ),
          );
        }
      });
      const send = (): void => {
        if (payload !== undefined) req.write(payload);
        req.end();
      };
      if (fence === undefined) send();
      else {
        // Nothing is handed to the socket before the fence is checked where it is usable: the
        // socket comes a tick later, and a new connection connects (and shakes hands, for TLS)
        // later still; a body written before that would wait in the socket and go out once
        // connected, after however long a freeze in between. So a write is checked when its
        // socket is assigned and, on a new connection, again once connected, and only then sent.
        const refuse = (): void => {
          req.destroy(new FencedError(`${what}: refused, the write fence closed`, 0, 'Fenced'));
        };
        req.once('socket', (socket) => {
          if (!fence.allowed()) refuse();
          else if (!socket.connecting) send();
          else
            socket.once(socket instanceof tls.TLSSocket ? 'secureConnect' : 'connect', () => {
              if (fence.allowed()) send();
              else refuse();
            });
        });
      }
    });
    return this.observeOutcome(
      response,
      spec,
      bucket === this.machineBucket ? this.machineOutage : this.coreOutage,
    );
  }

  /** Feeds the outage log: a 5xx or no answer is a failure, any other answer a success. */
  private async observeOutcome(
    response: Promise<http.IncomingMessage>,
    spec: RequestSpec,
    outage: OutageLog | undefined,
  ): Promise<http.IncomingMessage> {
    try {
      const res = await response;
      const code = res.statusCode ?? 0;
      if (code >= 500) outage?.failure(`${spec.method} ${spec.path}: HTTP ${code}`);
      else outage?.success();
      return res;
    } catch (err) {
      if (!(err instanceof AbortedError)) outage?.failure(err);
      throw err;
    }
  }

  private async roundTrip(spec: RequestSpec): Promise<RawResponse> {
    const started = this.clock.now();
    let code = '<error>';
    try {
      const res = await this.open(spec, this.requestTimeoutMs);
      code = String(res.statusCode ?? 0);
      const body = await new Promise<string>((resolve, reject) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          resolve(text);
        });
        res.on('error', reject);
      });
      return { status: res.statusCode ?? 0, headers: res.headers, body };
    } finally {
      this.metrics?.requests.inc({ code, method: spec.method });
      this.metrics?.duration.observe(
        { verb: spec.verb, resource: spec.resource },
        (this.clock.now() - started) / 1000,
      );
    }
  }

  /** Sends a request, retrying 429 (and 5xx carrying Retry-After) after the delay the server asks. */
  private async call<T>(spec: RequestSpec): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const res = await this.roundTrip(spec);
      if (res.status >= 200 && res.status < 300) {
        return (res.body === '' ? undefined : JSON.parse(res.body)) as T;
      }
      let parsed: unknown = res.body;
      try {
        parsed = JSON.parse(res.body);
      } catch {
        // plain-text error body
      }
      const retryAfter = parseRetryAfter(res.headers['retry-after']);
      const retryable = res.status === 429 || (res.status >= 500 && retryAfter !== undefined);
      if (retryable && spec.noRetry !== true && attempt < this.maxRetryAfter) {
        await this.clock.sleep(Math.min(retryAfter ?? 1000, 60_000), spec.signal);
        continue;
      }
      throw errorFromResponse(res.status, parsed, `${spec.method} ${spec.path}`, retryAfter);
    }
  }

  async get<T extends KubeObject>(
    res: ResourceType,
    name: string,
    namespace?: string,
    signal?: AbortSignal,
  ): Promise<T> {
    return this.call<T>({
      method: 'GET',
      path: resourcePath(res, namespace, name),
      verb: 'get',
      resource: resourceLabel(res),
      signal,
    });
  }

  /** One page of a list. */
  async list<T extends KubeObject>(res: ResourceType, opts: ListOptions = {}): Promise<KubeList<T>> {
    return this.call<KubeList<T>>({
      method: 'GET',
      path: resourcePath(res, opts.namespace),
      query: {
        labelSelector: opts.labelSelector,
        fieldSelector: opts.fieldSelector,
        limit: opts.limit,
        continue: opts.continue,
        resourceVersion: opts.resourceVersion,
        resourceVersionMatch: opts.resourceVersionMatch,
      },
      verb: 'list',
      resource: resourceLabel(res),
      signal: opts.signal,
    });
  }

  /** Every page of a list; the resourceVersion is that of the first page (a consistent snapshot). */
  async listAll<T extends KubeObject>(
    res: ResourceType,
    opts: Omit<ListOptions, 'continue'> & { pageSize?: number; onPage?: (items: T[]) => void } = {},
  ): Promise<{ items: T[]; resourceVersion: string }> {
    const items: T[] = [];
    let cont: string | undefined;
    let resourceVersion = '';
    do {
      const page = await this.list<T>(res, {
        ...opts,
        limit: opts.pageSize ?? 500,
        ...(cont === undefined ? {} : { continue: cont }),
      });
      if (resourceVersion === '') resourceVersion = page.metadata.resourceVersion ?? '';
      for (const item of page.items) items.push(item);
      opts.onPage?.(page.items);
      cont = page.metadata.continue === '' ? undefined : page.metadata.continue;
    } while (cont !== undefined);
    return { items, resourceVersion };
  }

  async create<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.call<T>({
      method: 'POST',
      path: resourcePath(res, opts.namespace ?? obj.metadata.namespace),
      query: { dryRun: opts.dryRun === true ? 'All' : undefined, fieldManager: opts.fieldManager },
      body: obj,
      verb: 'create',
      resource: resourceLabel(res),
      signal: opts.signal,
    });
  }

  /**
   * Replaces an object. Conditional: the apiserver rejects it with ConflictError when
   * obj.metadata.resourceVersion is stale.
   */
  async update<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.put(res, obj, undefined, opts);
  }

  /** Replaces the status subresource (conditional on resourceVersion like update). */
  async updateStatus<T extends KubeObject>(res: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.put(res, obj, 'status', opts);
  }

  private async put<T extends KubeObject>(
    res: ResourceType,
    obj: T,
    subresource: string | undefined,
    opts: WriteOptions,
  ): Promise<T> {
    const name = obj.metadata.name;
    if (name === undefined) throw new Error(`update ${res.kind}: metadata.name is required`);
    return this.call<T>({
      method: 'PUT',
      path: resourcePath(res, opts.namespace ?? obj.metadata.namespace, name, subresource),
      query: { dryRun: opts.dryRun === true ? 'All' : undefined, fieldManager: opts.fieldManager },
      body: obj,
      verb: 'update',
      resource: resourceLabel(res) + (subresource === undefined ? '' : `/${subresource}`),
      signal: opts.signal,
    });
  }

  async patch<T extends KubeObject>(
    res: ResourceType,
    name: string,
    patch: unknown,
    opts: PatchOptions,
  ): Promise<T> {
    if (opts.type === 'apply' && opts.fieldManager === undefined) {
      throw new Error('server-side apply needs a fieldManager');
    }
    return this.call<T>({
      method: 'PATCH',
      path: resourcePath(res, opts.namespace, name, opts.subresource),
      query: {
        dryRun: opts.dryRun === true ? 'All' : undefined,
        fieldManager: opts.fieldManager,
        force: opts.type === 'apply' && opts.force === true ? true : undefined,
      },
      body: patch,
      contentType: patchContentType[opts.type],
      verb: 'patch',
      resource: resourceLabel(res) + (opts.subresource === undefined ? '' : `/${opts.subresource}`),
      signal: opts.signal,
    });
  }

  /** Deletes an object; resolves with the object (when it has finalizers) or the Status. */
  async delete(res: ResourceType, name: string, opts: DeleteOptions = {}): Promise<unknown> {
    const body: Record<string, unknown> = { apiVersion: 'v1', kind: 'DeleteOptions' };
    if (opts.preconditions !== undefined) body.preconditions = opts.preconditions;
    if (opts.propagationPolicy !== undefined) body.propagationPolicy = opts.propagationPolicy;
    if (opts.gracePeriodSeconds !== undefined) body.gracePeriodSeconds = opts.gracePeriodSeconds;
    if (opts.dryRun === true) body.dryRun = ['All'];
    return this.call<unknown>({
      method: 'DELETE',
      path: resourcePath(res, opts.namespace, name),
      body,
      verb: 'delete',
      resource: resourceLabel(res),
      signal: opts.signal,
    });
  }

  async evict(
    namespace: string,
    name: string,
    opts: { gracePeriodSeconds?: number; signal?: AbortSignal } = {},
  ): Promise<void> {
    const body: Record<string, unknown> = {
      apiVersion: 'policy/v1',
      kind: 'Eviction',
      metadata: { name, namespace },
    };
    if (opts.gracePeriodSeconds !== undefined) {
      body.deleteOptions = {
        apiVersion: 'v1',
        kind: 'DeleteOptions',
        gracePeriodSeconds: opts.gracePeriodSeconds,
      };
    }
    await this.call<unknown>({
      method: 'POST',
      path: `${resourcePath(CoreResources.pods, namespace, name)}/eviction`,
      body,
      verb: 'create',
      resource: 'pods/eviction',
      signal: opts.signal,
      noRetry: true,
    });
  }

  async getScale(res: ResourceType, name: string, namespace: string): Promise<Scale> {
    return this.call<Scale>({
      method: 'GET',
      path: resourcePath(res, namespace, name, 'scale'),
      verb: 'get',
      resource: `${resourceLabel(res)}/scale`,
    });
  }

  /** Sets replicas through the scale subresource (merge patch, so no resourceVersion race). */
  async scale(res: ResourceType, name: string, namespace: string, replicas: number): Promise<Scale> {
    return this.call<Scale>({
      method: 'PATCH',
      path: resourcePath(res, namespace, name, 'scale'),
      body: { spec: { replicas } },
      contentType: patchContentType.merge,
      verb: 'patch',
      resource: `${resourceLabel(res)}/scale`,
    });
  }

  /**
   * Opens a watch stream. The iterator yields events until the server closes the stream
   * (normal end), the signal aborts (ends quietly), or an error occurs (thrown: typed HTTP errors,
   * UnavailableError for broken connections, WatchStalledError after idleTimeoutMs of silence).
   */
  async watch<T>(res: ResourceType, opts: WatchOptions = {}): Promise<AsyncIterableIterator<WatchEvent<T>>> {
    const controller = new AbortController();
    const onOuterAbort = (): void => {
      controller.abort();
    };
    opts.signal?.addEventListener('abort', onOuterAbort, { once: true });
    const spec: RequestSpec = {
      method: 'GET',
      path: resourcePath(res, opts.namespace),
      query: {
        watch: 'true',
        resourceVersion: opts.resourceVersion,
        labelSelector: opts.labelSelector,
        fieldSelector: opts.fieldSelector,
        allowWatchBookmarks: opts.allowWatchBookmarks === true ? 'true' : undefined,
        timeoutSeconds: opts.timeoutSeconds,
      },
      verb: 'watch',
      resource: resourceLabel(res),
      signal: controller.signal,
    };
    let response: http.IncomingMessage;
    let code = '<error>';
    try {
      response = await this.open(spec, this.requestTimeoutMs, true);
      code = String(response.statusCode ?? 0);
    } catch (err) {
      opts.signal?.removeEventListener('abort', onOuterAbort);
      throw err;
    } finally {
      this.metrics?.requests.inc({ code, method: 'GET' });
    }
    const status = response.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      const text = await new Promise<string>((resolve) => {
        let t = '';
        response.setEncoding('utf8');
        response.on('data', (d: string) => (t += d));
        response.on('end', () => {
          resolve(t);
        });
        response.on('error', () => {
          resolve(t);
        });
      });
      opts.signal?.removeEventListener('abort', onOuterAbort);
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON
      }
      throw errorFromResponse(
        status,
        parsed,
        `watch ${spec.path}`,
        parseRetryAfter(response.headers['retry-after']),
      );
    }

    let idleTimer: TimerHandle | undefined;
    const channel = new AsyncChannel<WatchEvent<T>>(() => {
      cleanup();
      response.destroy();
    });
    const cleanup = (): void => {
      idleTimer?.cancel();
      idleTimer = undefined;
      opts.signal?.removeEventListener('abort', onOuterAbort);
    };
    const armIdle = (): void => {
      if (opts.idleTimeoutMs === undefined) return;
      idleTimer?.cancel();
      idleTimer = this.clock.setTimeout(() => {
        cleanup();
        channel.fail(
          new WatchStalledError(
            `watch ${spec.path}: no data for ${opts.idleTimeoutMs ?? 0} ms`,
            0,
            'Stalled',
          ),
        );
        response.destroy();
      }, opts.idleTimeoutMs);
    };
    armIdle();
    let buffer = '';
    response.setEncoding('utf8');
    response.on('data', (chunk: string) => {
      armIdle();
      buffer += chunk;
      let nl = buffer.indexOf('\n');
      while (nl >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (line !== '') {
          try {
            channel.push(JSON.parse(line) as WatchEvent<T>);
          } catch (err) {
            cleanup();
            channel.fail(
              new UnavailableError(
                `watch ${spec.path}: undecodable event: ${String(err)}`,
                0,
                'InternalError',
              ),
            );
            response.destroy();
            return;
          }
        }
        nl = buffer.indexOf('\n');
      }
    });
    response.on('end', () => {
      cleanup();
      channel.end();
    });
    response.on('error', (err) => {
      cleanup();
      if (controller.signal.aborted) channel.end();
      else channel.fail(new UnavailableError(`watch ${spec.path}: ${err.message}`, 0, 'ServiceUnavailable'));
    });
    response.on('close', () => {
      cleanup();
      if (controller.signal.aborted) channel.end();
      else if (!response.complete) {
        channel.fail(new UnavailableError(`watch ${spec.path}: connection closed`, 0, 'ServiceUnavailable'));
      } else channel.end();
    });
    return channel;
  }

  /** Closes keep-alive sockets (call on shutdown). */
  close(): void {
    this.agent.destroy();
    this.streamAgent.destroy();
    this.credentials.close();
  }
}
