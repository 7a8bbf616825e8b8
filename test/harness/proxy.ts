import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

/**
 * A TCP proxy on loopback in front of the apiserver, for tests that need a network fault between
 * a client and the server while the server keeps serving others: pause() freezes every byte in
 * both directions without closing anything (a silently stalled connection), cut() resets all
 * connections, resume() lets traffic flow again.
 */
export class FaultProxy {
  private server: net.Server | undefined;
  private readonly pairs = new Set<{ client: net.Socket; upstream: net.Socket; piped: boolean }>();
  private paused = false;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<number> {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      const pair = { client, upstream, piped: false };
      this.pairs.add(pair);
      if (this.paused) {
        client.pause();
        upstream.pause();
      } else {
        this.connect(pair);
      }
      const close = (): void => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
      client.on('close', close);
      upstream.on('close', close);
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const addr = this.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('proxy has no port');
    this.port = addr.port;
    return this.port;
  }

  private connect(pair: { client: net.Socket; upstream: net.Socket; piped: boolean }): void {
    pair.client.pipe(pair.upstream);
    pair.upstream.pipe(pair.client);
    pair.piped = true;
  }

  /** Stops forwarding in both directions; connections stay open and silent. */
  pause(): void {
    this.paused = true;
    for (const pair of this.pairs) {
      pair.client.unpipe(pair.upstream);
      pair.upstream.unpipe(pair.client);
      pair.piped = false;
      pair.client.pause();
      pair.upstream.pause();
    }
  }

  resume(): void {
    this.paused = false;
    for (const pair of this.pairs) {
      if (!pair.piped) this.connect(pair);
    }
  }

  /** Resets every open connection. */
  cut(): void {
    for (const { client, upstream } of this.pairs) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  connections(): number {
    return this.pairs.size;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => {
      if (this.server === undefined) resolve();
      else
        this.server.close(() => {
          resolve();
        });
    });
  }
}

/** What HttpFaultProxy does with watch requests. */
export type WatchFault =
  /** Forward them. */
  | 'none'
  /** Answer 410 Gone (reason Expired), as an apiserver does for a resourceVersion it no longer has. */
  | 'gone'
  /** Answer 200 and end the stream at once, without an event. */
  | 'close';

/** One request the HTTP proxy saw. */
export interface ProxiedRequest {
  method: string;
  path: string;
  watch: boolean;
  userAgent: string;
  /** When it reached the proxy (Date.now()). */
  at: number;
  /**
   * When the proxy sent it on to the apiserver; undefined while held by a stall, and for ever
   * when its client gave up first (the apiserver never saw it).
   */
  forwardedAt?: number;
  /** True when a stall held it back (it reached the proxy while the connection was stalled). */
  held?: boolean;
}

/**
 * An HTTP proxy on loopback in front of the apiserver's HTTPS port, for faults a TCP proxy cannot
 * make because they are about requests: it can answer every watch with 410 Gone or end it at once
 * (see WatchFault), and it records every request it sees. Clients speak plain HTTP to it with their
 * usual bearer token, which it passes on to the apiserver over TLS.
 */
export class HttpFaultProxy {
  private server: http.Server | undefined;
  private fault: WatchFault = 'none';
  /** Watch streams being forwarded, so that a new fault also ends the ones already open. */
  private readonly openWatches = new Set<() => void>();
  /** While stalled: requests held back, and responses being streamed (paused). */
  private stalled = false;
  private readonly held: (() => void)[] = [];
  private readonly streaming = new Set<http.IncomingMessage>();
  readonly requests: ProxiedRequest[] = [];
  port = 0;

  constructor(
    private readonly target: URL,
    /** The apiserver's CA (PEM). */
    private readonly ca: string | Buffer,
  ) {}

  async start(): Promise<number> {
    this.server = http.createServer((req, res) => {
      this.handle(req, res);
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const addr = this.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('proxy has no port');
    this.port = addr.port;
    return this.port;
  }

  /** Sets what happens to watches from now on, and ends (cleanly) the watches being forwarded. */
  setWatchFault(fault: WatchFault): void {
    this.fault = fault;
    for (const end of [...this.openWatches]) end();
  }

  /**
   * Stalls the connection like a network that stops delivering: new requests are held (not sent
   * on), and responses in progress stop. Nothing is closed.
   */
  stall(): void {
    this.stalled = true;
    for (const up of this.streaming) up.pause();
  }

  /** Delivers again: held requests whose client is still waiting are sent on, responses resume. */
  unstall(): void {
    this.stalled = false;
    for (const up of this.streaming) up.resume();
    for (const send of this.held.splice(0)) send();
  }

  /** Watch streams being forwarded now. */
  watchesOpen(): number {
    return this.openWatches.size;
  }

  /** Requests seen since index `from` (an earlier requests.length), by kind. */
  countSince(from: number): { lists: number; watches: number } {
    const seen = this.requests.slice(from).filter((r) => r.method === 'GET');
    return { lists: seen.filter((r) => !r.watch).length, watches: seen.filter((r) => r.watch).length };
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const watch = ['true', '1'].includes(url.searchParams.get('watch') ?? '');
    const record: ProxiedRequest = {
      method: req.method ?? '',
      path: url.pathname,
      watch,
      userAgent: req.headers['user-agent'] ?? '',
      at: Date.now(),
    };
    this.requests.push(record);
    if (watch && this.fault === 'gone') {
      const status = {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: 'too old resource version (injected by the test proxy)',
        reason: 'Expired',
        code: 410,
      };
      res.writeHead(410, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(status));
      return;
    }
    if (watch && this.fault === 'close') {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
      res.end();
      return;
    }
    // The body is read in full before anything goes upstream, so a held request is sent whole or
    // not at all.
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const send = (): void => {
        if (res.destroyed || res.writableEnded || req.socket.destroyed) return;
        this.forward(req, res, record, Buffer.concat(chunks));
      };
      if (this.stalled) {
        record.held = true;
        this.held.push(send);
      } else send();
    });
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    record: ProxiedRequest,
    body: Buffer,
  ): void {
    record.forwardedAt = Date.now();
    const upstream = https.request(
      {
        host: this.target.hostname,
        port: this.target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: this.target.host },
        ca: this.ca,
      },
      (up) => {
        this.streaming.add(up);
        up.on('close', () => this.streaming.delete(up));
        if (this.stalled) up.pause();
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
        if (!record.watch) return;
        const end = (): void => {
          this.openWatches.delete(end);
          up.unpipe(res);
          res.end();
          upstream.destroy();
        };
        this.openWatches.add(end);
        res.on('close', () => this.openWatches.delete(end));
      },
    );
    upstream.on('error', () => res.destroy());
    res.on('close', () => upstream.destroy());
    upstream.end(body);
  }

  async stop(): Promise<void> {
    for (const end of [...this.openWatches]) end();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => {
      if (this.server === undefined) resolve();
      else
        this.server.close(() => {
          resolve();
        });
    });
  }
}
