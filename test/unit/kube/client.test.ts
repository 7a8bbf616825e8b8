import { getEventListeners } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import type { KubeObject } from '../../../lib/kube/types.js';
import { KubeClient } from '../../../lib/kube/client.js';
import { MAX_REQUEST_CONNECTIONS } from '../../../lib/kube/credentials.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { LeaseFence } from '../../../lib/kube/fence.js';
import {
  ConflictError,
  FencedError,
  NotFoundError,
  TooManyRequestsError,
  WatchStalledError,
} from '../../../lib/kube/errors.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import { MachineResource } from '../../../lib/api/types.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';
import { eventually } from '../helpers/eventually.js';
import { dependantsOf } from '../helpers/signals.js';

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

type Handler = (req: Seen, res: http.ServerResponse) => void;

/** A tiny HTTP server standing in for the apiserver's wire behaviour (status codes, streams). */
class StubServer {
  readonly seen: Seen[] = [];
  handler: Handler = (_req, res) => {
    res.end('{}');
  };
  private server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      const s = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body };
      this.seen.push(s);
      this.handler(s, res);
    });
  });
  port = 0;
  /** TCP connections open now, and the most open at once. */
  open = 0;
  peakOpen = 0;
  async start(): Promise<void> {
    this.server.on('connection', (socket) => {
      this.open++;
      this.peakOpen = Math.max(this.peakOpen, this.open);
      socket.once('close', () => this.open--);
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
  }
  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) =>
      this.server.close(() => {
        r();
      }),
    );
  }
}

function kubeConfig(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

const json = (
  res: http.ServerResponse,
  code: number,
  body: unknown,
  headers: Record<string, string> = {},
): void => {
  res.writeHead(code, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

describe('KubeClient (against a stub HTTP server)', () => {
  let server: StubServer;
  let client: KubeClient;
  let clock: FakeClock;

  beforeEach(async () => {
    server = new StubServer();
    await server.start();
    clock = new FakeClock();
  });

  afterEach(async () => {
    client.close();
    await server.stop();
  });

  it('sends the bearer token and builds core and namespaced paths', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port) });
    server.handler = (_r, res) => {
      json(res, 200, { metadata: { name: 'n1' } });
    };
    await client.get(CoreResources.nodes, 'n1');
    await client.get(CoreResources.pods, 'p1', 'kube-system');
    expect(server.seen.map((s) => s.url)).to.deep.equal([
      '/api/v1/nodes/n1',
      '/api/v1/namespaces/kube-system/pods/p1',
    ]);
    expect(server.seen[0]?.headers.authorization).to.equal('Bearer secret-token');
  });

  it('maps a 409 Status to ConflictError and a 404 to NotFoundError', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port) });
    server.handler = (r, res) => {
      if (r.method === 'PUT')
        json(res, 409, { kind: 'Status', code: 409, reason: 'Conflict', message: 'modified' });
      else json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: 'nope' });
    };
    const obj: KubeObject = { metadata: { name: 'x', namespace: 'd', resourceVersion: '1' } };
    let err: unknown = await client.update(CoreResources.configMaps, obj).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(ConflictError);
    err = await client.get(CoreResources.configMaps, 'x', 'd').catch((e: unknown) => e);
    expect(err).to.be.instanceOf(NotFoundError);
  });

  it('warns when requests fail repeatedly (5xx) and logs the recovery once at info; a 404 is an answer', async () => {
    const logger = new CapturingLogger();
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), logger });
    let failing = 3;
    server.handler = (_r, res) => {
      if (failing > 0) {
        failing--;
        json(res, 503, { kind: 'Status', code: 503, reason: 'ServiceUnavailable', message: 'etcd down' });
      } else json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: 'nope' });
    };
    for (let i = 0; i < 5; i++) await client.get(CoreResources.nodes, 'n1').catch(() => undefined);
    expect(logger.lines.map((l) => `${l.level}: ${l.msg}`)).to.deep.equal([
      'warn: machine-controller-manager-ts client: other APIs requests failing repeatedly',
      'info: machine-controller-manager-ts client: other APIs requests recovered',
    ]);
  });

  it('names the client and the API in outage lines, so clients sharing a server and user agent stay apart', async () => {
    const logger = new CapturingLogger();
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), logger, name: 'control' });
    const target = new KubeClient({ kubeConfig: kubeConfig(server.port), logger, name: 'target' });
    try {
      let down = true;
      server.handler = (_r, res) => {
        if (down)
          json(res, 503, { kind: 'Status', code: 503, reason: 'ServiceUnavailable', message: 'down' });
        else json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: 'nope' });
      };
      const machine = (c: KubeClient): Promise<unknown> =>
        c.get(MachineResource, 'm1', 'default').catch(() => undefined);
      const node = (c: KubeClient): Promise<unknown> =>
        c.get(CoreResources.nodes, 'n1').catch(() => undefined);
      for (let i = 0; i < 2; i++) {
        await machine(client);
        await node(client);
        await node(target);
      }
      down = false;
      await machine(client);
      await node(client);
      await node(target);
      const lines = logger.lines.map((l) => `${l.level} ${String(l.fields.client)}/${String(l.fields.api)}`);
      expect(lines).to.deep.equal([
        'warn control/machine.sapcloud.io API',
        'warn control/other APIs',
        'warn target/other APIs',
        'info control/machine.sapcloud.io API',
        'info control/other APIs',
        'info target/other APIs',
      ]);
    } finally {
      target.close();
    }
  });

  it('sends no write while the fence is closed, reads still, and cancels writes queued for a token when it closes', async () => {
    const fence = new LeaseFence(clock);
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, qps: 1, burst: 1, fence });
    server.handler = (_r, res) => {
      json(res, 200, { metadata: { name: 'n1' } });
    };
    const node = { metadata: { name: 'n1' } };
    // Not leading yet: reads pass, writes never reach the server.
    await client.get(CoreResources.nodes, 'n1');
    const refused = await client.create(CoreResources.nodes, node).catch((e: unknown) => e);
    expect(refused).to.be.instanceOf(FencedError);
    expect(server.seen.map((r) => r.method)).to.deep.equal(['GET']);
    // Leading: a write goes out; the next two wait for tokens (1 qps).
    fence.grant(clock.monotonic(), 10_000);
    await clock.advance(1000);
    await client.patch(CoreResources.nodes, 'n1', { spec: {} }, { type: 'merge' });
    const queued = [
      client.delete(CoreResources.nodes, 'n1').catch((e: unknown) => e),
      client.patch(CoreResources.nodes, 'n1', { spec: {} }, { type: 'merge' }).catch((e: unknown) => e),
    ];
    await clock.advance(100);
    fence.revoke('leadership was lost');
    await clock.advance(5000);
    for (const err of await Promise.all(queued)) expect(err).to.be.instanceOf(FencedError);
    expect(
      server.seen.map((r) => r.method),
      'the queued writes never left',
    ).to.deep.equal(['GET', 'PATCH']);
  });

  it('checks the fence again once a new connection is connected: a freeze between socket and connect sends nothing', async () => {
    const fence = new LeaseFence(clock);
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, fence });
    fence.grant(clock.monotonic(), 10_000);
    // The process freezes after the socket was assigned and before its TCP connection is up (a GC
    // pause, SIGSTOP): when it resumes, the fence's deadline has passed but its timer has not run.
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const createConnection = http.Agent.prototype.createConnection;
    http.Agent.prototype.createConnection = function (this: http.Agent, ...args) {
      const socket = createConnection.apply(this, args);
      socket?.prependOnceListener('connect', () => {
        clock.stall(60_000);
      });
      return socket;
    };
    try {
      const refused = await client
        .patch(CoreResources.nodes, 'n1', { spec: {} }, { type: 'merge' })
        .catch((e: unknown) => e);
      expect(refused).to.be.instanceOf(FencedError);
    } finally {
      http.Agent.prototype.createConnection = createConnection;
    }
    // Give a request that did leave time to arrive.
    await new Promise((r) => setTimeout(r, 100));
    expect(server.seen, 'the write never reached the server').to.deep.equal([]);
  });

  it('leaves nothing registered with the fence signal once its writes are over', async () => {
    const fence = new LeaseFence(clock);
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, fence, qps: 1000, burst: 100 });
    fence.grant(clock.monotonic(), 60_000);
    for (let i = 0; i < 50; i++) {
      await client.patch(
        CoreResources.nodes,
        'n1',
        { spec: {} },
        { type: 'merge', signal: new AbortController().signal },
      );
    }
    expect(server.seen).to.have.length(50);
    expect(dependantsOf(fence.signal)).to.equal(0);
    expect(getEventListeners(fence.signal, 'abort')).to.have.length(0);
  });

  it('retries a 429 after the Retry-After delay the server asked for', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock });
    let calls = 0;
    server.handler = (_r, res) => {
      calls++;
      if (calls === 1)
        json(res, 429, { kind: 'Status', code: 429, reason: 'TooManyRequests' }, { 'Retry-After': '3' });
      else json(res, 200, { metadata: { name: 'x' } });
    };
    const p = client.get(CoreResources.configMaps, 'x', 'd');
    await eventually(() => calls === 1, 'first attempt');
    await clock.advance(2900);
    expect(calls).to.equal(1);
    await clock.advance(200);
    await eventually(() => calls === 2, 'retry after 3s');
    expect((await p).metadata.name).to.equal('x');
  });

  it('surfaces TooManyRequestsError with the delay once its retries are used up', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, maxRetryAfter: 1 });
    server.handler = (_r, res) => {
      json(res, 429, { kind: 'Status', code: 429, reason: 'TooManyRequests' }, { 'Retry-After': '1' });
    };
    const p = client.get(CoreResources.configMaps, 'x', 'd').catch((e: unknown) => e);
    await eventually(() => server.seen.length === 1, 'first attempt');
    await clock.advance(1000);
    const err = await p;
    expect(err).to.be.instanceOf(TooManyRequestsError);
    expect((err as TooManyRequestsError).retryAfterMs).to.equal(1000);
    expect(server.seen).to.have.length(2);
  });

  it('holds requests beyond the burst until the token bucket refills at qps', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, qps: 1, burst: 2 });
    server.handler = (_r, res) => {
      json(res, 200, { metadata: {} });
    };
    const all = Promise.all([0, 1, 2].map(() => client.get(CoreResources.nodes, 'n')));
    await eventually(() => server.seen.length === 2, 'burst of two');
    for (let i = 0; i < 50; i++) await new Promise<void>((r) => setImmediate(r));
    expect(server.seen).to.have.length(2);
    await clock.advance(1000);
    await all;
    expect(server.seen).to.have.length(3);
  });

  it('gives the machine.sapcloud.io API and the other APIs a token bucket each, like client-go clientsets', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock, qps: 1, burst: 1 });
    server.handler = (_r, res) => {
      json(res, 200, { metadata: {} });
    };
    const machines = Promise.all([0, 1].map(() => client.get(MachineResource, 'm', 'default')));
    const nodes = Promise.all([0, 1].map(() => client.get(CoreResources.nodes, 'n')));
    await eventually(() => server.seen.length === 2, 'one request from each bucket');
    for (let i = 0; i < 50; i++) await new Promise<void>((r) => setImmediate(r));
    expect(server.seen.map((s) => s.url).sort()).to.deep.equal([
      '/api/v1/nodes/n',
      '/apis/machine.sapcloud.io/v1alpha1/namespaces/default/machines/m',
    ]);
    await clock.advance(1000);
    await Promise.all([machines, nodes]);
    expect(server.seen).to.have.length(4);
  });

  it('sends patches with the content type of the patch strategy and deletes with preconditions', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port) });
    server.handler = (_r, res) => {
      json(res, 200, { metadata: {} });
    };
    await client.patch(CoreResources.nodes, 'n', { spec: { unschedulable: true } }, { type: 'merge' });
    await client.patch(CoreResources.nodes, 'n', [{ op: 'remove', path: '/spec/taints/0' }], {
      type: 'json',
    });
    await client.patch(
      CoreResources.nodes,
      'n',
      { metadata: {} },
      { type: 'apply', fieldManager: 'mcm', force: true },
    );
    await client.delete(CoreResources.pods, 'p', {
      namespace: 'd',
      preconditions: { uid: 'u1' },
      propagationPolicy: 'Foreground',
    });
    expect(server.seen.map((s) => s.headers['content-type'])).to.deep.equal([
      'application/merge-patch+json',
      'application/json-patch+json',
      'application/apply-patch+yaml',
      'application/json',
    ]);
    expect(server.seen[2]?.url).to.equal('/api/v1/nodes/n?fieldManager=mcm&force=true');
    expect(JSON.parse(server.seen[3]?.body ?? '{}')).to.deep.include({
      preconditions: { uid: 'u1' },
      propagationPolicy: 'Foreground',
    });
  });

  it('counts requests by code and method', async () => {
    const registry = newRegistry();
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), registry });
    server.handler = (r, res) => {
      if (r.url.endsWith('/missing')) json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound' });
      else json(res, 200, { metadata: {} });
    };
    await client.get(CoreResources.nodes, 'a');
    await client.get(CoreResources.nodes, 'missing').catch(() => undefined);
    const text = await registry.getSingleMetricAsString('rest_client_requests_total');
    expect(text).to.contain('rest_client_requests_total{code="200",method="GET"} 1');
    expect(text).to.contain('rest_client_requests_total{code="404",method="GET"} 1');
  });

  it('streams watch events line by line and ends when the server closes the stream', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port) });
    server.handler = (_r, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}\n{"type":"MOD');
      setTimeout(() => {
        res.write('IFIED","object":{"metadata":{"name":"a","resourceVersion":"6"}}}\n');
        res.end('{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n');
      }, 5);
    };
    const events: string[] = [];
    for await (const ev of await client.watch<KubeObject>(CoreResources.nodes, {
      resourceVersion: '4',
      allowWatchBookmarks: true,
      timeoutSeconds: 60,
    })) {
      events.push(`${ev.type}:${ev.object.metadata.resourceVersion ?? ''}`);
    }
    expect(events).to.deep.equal(['ADDED:5', 'MODIFIED:6', 'BOOKMARK:9']);
    expect(server.seen[0]?.url).to.equal(
      '/api/v1/nodes?watch=true&resourceVersion=4&allowWatchBookmarks=true&timeoutSeconds=60',
    );
  });

  it('fails a watch that goes silent for longer than the idle timeout with WatchStalledError', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), clock });
    server.handler = (_r, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n');
      // then nothing, connection stays open
    };
    const it = await client.watch<KubeObject>(CoreResources.nodes, { idleTimeoutMs: 60_000 });
    const first = await it.next();
    expect(first.done).to.equal(false);
    let outcome: unknown = 'pending';
    const next = it.next().then(
      () => 'an event',
      (e: unknown) => e,
    );
    void next.then((o) => (outcome = o));
    await clock.advance(59_999);
    expect(outcome, 'still waiting just before the idle timeout').to.equal('pending');
    await clock.advance(1);
    expect(await next).to.be.instanceOf(WatchStalledError);
  });

  it(`keeps at most ${MAX_REQUEST_CONNECTIONS} connections for a burst of requests (the rest wait for one), and a watch does not wait behind them`, async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port), qps: 1000, burst: 2000 });
    const held: http.ServerResponse[] = [];
    server.handler = (r, res) => {
      if (r.url.includes('watch=true')) {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write('{"type":"ADDED","object":{"metadata":{"name":"w","resourceVersion":"1"}}}\n');
        return;
      }
      held.push(res);
    };
    const burst = MAX_REQUEST_CONNECTIONS * 3;
    const gets = Array.from({ length: burst }, (_, i) => client.get(CoreResources.nodes, `n${i}`));
    await eventually(() => held.length >= MAX_REQUEST_CONNECTIONS, 'the bound of requests in flight');
    expect(held).to.have.length(MAX_REQUEST_CONNECTIONS);
    // Every request connection is busy: a watch still gets its own and its first event.
    const watch = await client.watch<KubeObject>(CoreResources.nodes, { idleTimeoutMs: 60_000 });
    const first = await watch.next();
    expect(first.done, 'the watch streams while the requests wait').to.equal(false);
    expect(held, 'no request went past the bound meanwhile').to.have.length(MAX_REQUEST_CONNECTIONS);
    // Answer as they come: the waiting requests go out on the freed connections.
    server.handler = (_r, res) => {
      json(res, 200, { metadata: { name: 'n' } });
    };
    for (const res of held.splice(0)) json(res, 200, { metadata: { name: 'n' } });
    await Promise.all(gets);
    expect(server.seen.filter((r) => !r.url.includes('watch=true'))).to.have.length(burst);
    expect(server.peakOpen, 'connections open at once: the requests’, plus the watch’s').to.equal(
      MAX_REQUEST_CONNECTIONS + 1,
    );
  });

  it('ends a watch quietly when its signal aborts', async () => {
    client = new KubeClient({ kubeConfig: kubeConfig(server.port) });
    server.handler = (_r, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('\n');
    };
    const abort = new AbortController();
    const it = await client.watch<KubeObject>(CoreResources.nodes, { signal: abort.signal });
    const pending = it.next();
    abort.abort();
    const r = await pending;
    expect(r.done).to.equal(true);
  });
});
