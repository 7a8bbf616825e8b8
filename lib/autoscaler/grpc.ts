// The gRPC transport of the externalgrpc server: unary and server-streaming calls over node:http2,
// as the gRPC over HTTP/2 protocol has them, without @grpc/grpc-js's server: grpc-js's server has
// no hook for the limits below (the bytes of unfinished requests, a read timeout, keepalive
// enforcement, the allowlist before the body), and its per-call machinery (interceptor chain,
// metadata objects, several ticks between the request and the answer) made the autoscaler's loop
// of ~17,000 calls 1.09x as long (docs/performance.md, "Transport choice"). Here a call is read
// when its stream ends and answered in the same turn: headers, one message, trailers. One timer
// per call runs from its headers to its answer: its deadline, or the read timeout until its
// request is complete.
//
// What the server does for its clients, as grpc-js did: requests compressed with gzip or deflate
// are read; requests above the receive limit are refused; a call past its grpc-timeout answers
// DEADLINE_EXCEEDED; unknown methods answer UNIMPLEMENTED; failures are trailers-only responses;
// TLS verifies client certificates against the client CA and takes a new certificate, key and
// CA for the connections that follow (setSecureContext); shutdown lets running calls finish.
//
// And the limits of grpc-go's server, so that one client cannot take the leader down
// (GrpcServerLimits): concurrent streams per connection, the bytes all unfinished requests may
// hold, the deadline counted from a request's headers (and a read timeout without one), the
// client allowed before any byte of its body is read, keepalive enforcement (a ping flood gets
// GOAWAY ENHANCE_YOUR_CALM), and idle and age limits for connections.

import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { TLSSocket, type PeerCertificate, type SecureContextOptions } from 'node:tls';
import { gunzipSync, inflateSync } from 'node:zlib';

import { status, type ServiceDefinition } from '@grpc/grpc-js';

import { RequestBody } from './grpc-body.js';
import type { GrpcTransport } from './transport.js';

/** A call's outcome other than OK. */
export interface GrpcFailure {
  code: status;
  details: string;
}

/** grpc-js's default receive limit: 4 MiB. */
const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;
/** The longest delay a Node.js timer takes; a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** grpc-go: more than 2 pings against the policy close the connection. */
const MAX_PING_STRIKES = 2;
/** grpc-go: without streams (and not permitted), pings closer than 2 hours are strikes. */
const PING_WITHOUT_STREAM_MS = 2 * 3_600_000;
const ACCEPT_ENCODING = 'identity,deflate,gzip';
/**
 * What an open stream whose request is not complete costs the server besides the request's bytes
 * (node's stream objects, nghttp2's stream state, this server's timers): on Node 26 a fresh manager
 * holding 6,697 to 8,207 such streams open over 100 connections grew by 76 to 82 MiB, sessions
 * included (`npm run bench grpc-flood`, its last row). Counted against --grpc-max-pending-request-bytes, so that many small stalled requests
 * are bounded as a few large ones are.
 */
export const OPEN_REQUEST_COST = 10 * 1024;
/**
 * Past --grpc-max-pending-request-bytes, what a connection may still hold: its share of the cap
 * (the cap over the open connections), at most this much: enough for a few small calls.
 */
const MAX_SHARE_PAST_CAP = 64 * 1024;
/** How long a client still sending after its failure was answered has before its stream is reset. */
const REFUSED_STREAM_LINGER_MS = 1000;

const CONTENT_TYPE = 'application/grpc+proto';
const OK_HEADERS: http2.OutgoingHttpHeaders = {
  ':status': 200,
  'content-type': CONTENT_TYPE,
  'grpc-accept-encoding': ACCEPT_ENCODING,
  'grpc-encoding': 'identity',
};
const OK_TRAILERS: http2.OutgoingHttpHeaders = { 'grpc-status': '0', 'grpc-message': 'OK' };
const WAIT_FOR_TRAILERS = { waitForTrailers: true };
const END_STREAM = { endStream: true };

/** What one connection and all requests together may use; every field is a flag of the manager. */
export interface GrpcServerLimits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: more streams on one connection are refused (REFUSED_STREAM). */
  maxConcurrentStreams: number;
  /** Bytes all requests not yet complete may hold together; a request beyond it: RESOURCE_EXHAUSTED. */
  maxPendingRequestBytes: number;
  /** A request without grpc-timeout must be complete this long after its headers (DEADLINE_EXCEEDED). */
  requestReadTimeoutMs: number;
  /** Keepalive enforcement: a ping sooner than this after the last, with nothing sent between, is a strike. */
  keepaliveMinTimeMs: number;
  /** Whether pings are allowed on a connection without streams (else 2 hours apart at least). */
  keepalivePermitWithoutStream: boolean;
  /** A connection without streams for this long is told to go away (0: never). */
  maxConnectionIdleMs: number;
  /** A connection this old (±10 %) is told to go away (0: never)... */
  maxConnectionAgeMs: number;
  /** ...and closed this long after, its calls cut. */
  maxConnectionAgeGraceMs: number;
}

export const DEFAULT_GRPC_LIMITS: Readonly<GrpcServerLimits> = {
  maxConcurrentStreams: 100,
  maxPendingRequestBytes: 64 * 1024 * 1024,
  requestReadTimeoutMs: 30_000,
  keepaliveMinTimeMs: 5 * 60_000,
  keepalivePermitWithoutStream: false,
  maxConnectionIdleMs: 0,
  maxConnectionAgeMs: 0,
  maxConnectionAgeGraceMs: 30_000,
};

/**
 * Decides when a stream opens, before any byte of its body is read, whether its client may call
 * the method (path `/package.Service/Method`); the certificate is the connection's verified one.
 */
export type Authorize = (path: string, peer: PeerCertificate | undefined) => GrpcFailure | undefined;

/**
 * Runs fn at an instant (epoch ms) however far away it is: a Node.js timer takes at most ~24.8 days
 * (a longer delay fires after 1 ms), so a far one is re-armed until it is due.
 */
class Alarm {
  private timer: NodeJS.Timeout;

  constructor(
    private readonly at: number,
    private readonly fn: () => void,
  ) {
    this.timer = this.arm();
  }

  private arm(): NodeJS.Timeout {
    const delay = this.at - Date.now();
    return setTimeout(
      () => {
        if (delay > MAX_TIMER_MS) this.timer = this.arm();
        else this.fn();
      },
      Math.max(0, Math.min(delay, MAX_TIMER_MS)),
    );
  }

  cancel(): void {
    clearTimeout(this.timer);
  }
}

/** Sends OK trailers; a 'wantTrailers' listener (the stream is `this`), shared by every call. */
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

function ignore(): void {
  // Errors of a stream or session end in its 'close'; nothing is left to answer then.
}

/** grpc-timeout units: milliseconds per unit, or units per millisecond (below one). */
const TIMEOUT_UNITS: Readonly<Record<string, { times: number } | { per: number }>> = {
  H: { times: 3_600_000 },
  M: { times: 60_000 },
  S: { times: 1000 },
  m: { times: 1 },
  u: { per: 1000 },
  n: { per: 1_000_000 },
};

const TIMEOUT_DIGITS = /^\d{1,8}$/;

/**
 * grpc-timeout (1 to 8 digits and a unit) in whole milliseconds, rounded down as grpc-js does (Go
 * clients send microseconds: "9999873u"); NaN when malformed.
 */
export function parseGrpcTimeout(value: string): number {
  const unit = TIMEOUT_UNITS[value.charAt(value.length - 1)];
  const digits = value.slice(0, -1);
  if (unit === undefined || !TIMEOUT_DIGITS.test(digits)) return Number.NaN;
  return 'times' in unit ? Number(digits) * unit.times : Math.floor(Number(digits) / unit.per);
}

/** grpc-message is percent-encoded (grpc-js writes encodeURI's form, which Go's client reads). */
function encodeMessage(details: string): string {
  try {
    return encodeURI(details);
  } catch {
    return encodeURI(details.replace(/[\uD800-\uDFFF]/g, '\uFFFD'));
  }
}

/** A message with its gRPC frame header (uncompressed flag, big-endian length). */
function frame(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(message.length + 5);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

/** What the handlers see of a call. */
export interface GrpcCall {
  readonly request: unknown;
  /** Epoch milliseconds; Infinity when the client set no deadline. */
  readonly deadline: number;
  /** The verified client certificate of a mutual-TLS connection, else undefined. */
  peerCertificate(): PeerCertificate | undefined;
}

export interface UnaryCall extends GrpcCall {
  /** Answers OK with this message (a Buffer is the encoded message, sent as it is). */
  answer(value: unknown): void;
  fail(failure: GrpcFailure): void;
}

export interface ServerStreamCall extends GrpcCall {
  readonly cancelled: boolean;
  write(value: unknown): void;
  /** Ends the call with OK. */
  end(): void;
  /** Called once when the client goes away before end(). */
  onCancelled(listener: () => void): void;
}

export type UnaryHandler = (call: UnaryCall) => void;
export type ServerStreamHandler = (call: ServerStreamCall) => void;

interface Method {
  path: string;
  streaming: boolean;
  handler: UnaryHandler | ServerStreamHandler;
  decode: (message: Buffer) => unknown;
  encode: (value: unknown) => Buffer;
}

/**
 * Answers are often the same Buffer every time (the server encodes them once per object version):
 * their frames are kept as long as the Buffer lives.
 */
const frames = new WeakMap<Buffer, Buffer>();

function framed(method: Method, value: unknown): Buffer {
  if (!Buffer.isBuffer(value)) return frame(method.encode(value));
  let f = frames.get(value);
  if (f === undefined) {
    f = frame(value);
    frames.set(value, f);
  }
  return f;
}

class Call implements UnaryCall, ServerStreamCall {
  private done = false;
  private headersSent = false;
  private cancelListeners: (() => void)[] | undefined;
  cancelled = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly method: Method,
    readonly request: unknown,
    readonly deadline: number,
    /** The call's deadline timer, started at its headers (none without a deadline). */
    private readonly alarm: Alarm | undefined,
  ) {}

  peerCertificate(): PeerCertificate | undefined {
    return verifiedPeer(this.stream.session);
  }

  /**
   * Runs the handler. Most calls are answered before it returns; one that is not (a scaling
   * write) or that streams learns of its client going away (closed()), and a unary call still
   * unanswered at its deadline answers DEADLINE_EXCEEDED (expire()).
   */
  run(): void {
    try {
      (this.method.handler as (call: Call) => void)(this);
    } catch (err) {
      this.fail({ code: status.INTERNAL, details: `handler failed: ${String(err)}` });
    }
  }

  /** The deadline passed (the alarm's callback). */
  expire(): void {
    if (this.method.streaming) return;
    this.fail({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
  }

  private finish(): boolean {
    if (this.done) return false;
    this.done = true;
    this.alarm?.cancel();
    return !this.stream.destroyed && !this.stream.closed;
  }

  answer(value: unknown): void {
    if (!this.finish()) return;
    let message: Buffer;
    try {
      message = framed(this.method, value);
    } catch {
      this.respondFailure({ code: status.INTERNAL, details: 'Error serializing response' });
      return;
    }
    this.stream.respond(OK_HEADERS, WAIT_FOR_TRAILERS);
    this.stream.once('wantTrailers', sendOkTrailers);
    this.stream.end(message);
  }

  fail(failure: GrpcFailure): void {
    if (!this.finish()) return;
    if (this.headersSent) {
      // A stream that already sent messages ends with the status in its trailers.
      this.stream.removeListener('wantTrailers', sendOkTrailers);
      this.stream.once('wantTrailers', () => {
        this.stream.sendTrailers({
          'grpc-status': String(failure.code),
          'grpc-message': encodeMessage(failure.details),
        });
      });
      this.stream.end();
      return;
    }
    this.respondFailure(failure);
  }

  private respondFailure(failure: GrpcFailure): void {
    respondFailure(this.stream, failure);
  }

  write(value: unknown): void {
    if (this.done || this.stream.destroyed || this.stream.closed) return;
    if (!this.headersSent) {
      this.headersSent = true;
      this.stream.respond(OK_HEADERS, WAIT_FOR_TRAILERS);
      this.stream.once('wantTrailers', sendOkTrailers);
    }
    this.stream.write(framed(this.method, value));
  }

  end(): void {
    if (!this.headersSent) {
      if (!this.finish()) return;
      this.stream.respond({ ...OK_HEADERS, ...OK_TRAILERS }, END_STREAM);
      return;
    }
    if (!this.finish()) return;
    this.stream.end();
  }

  onCancelled(listener: () => void): void {
    (this.cancelListeners ??= []).push(listener);
  }

  /** The stream closed: a call that had not ended was cancelled by its client. */
  closed(): void {
    this.alarm?.cancel();
    if (this.done) return;
    this.done = true;
    this.cancelled = true;
    for (const l of this.cancelListeners ?? []) l();
  }
}

/** A trailers-only response: the status in the one HEADERS frame. */
function respondFailure(
  stream: http2.ServerHttp2Stream,
  failure: GrpcFailure,
  extra?: http2.OutgoingHttpHeaders,
): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond(
    {
      ':status': 200,
      'content-type': CONTENT_TYPE,
      'grpc-status': String(failure.code),
      'grpc-message': encodeMessage(failure.details),
      ...extra,
    },
    END_STREAM,
  );
  // A client still sending (a refused, stalled or oversized request) is told to stop: RST_STREAM
  // NO_ERROR after the complete response, as HTTP/2 allows and grpc-go does, so the stream does
  // not hold a slot of its connection. Not in the same turn: a reset that reaches the client with
  // the response (node 22's and 26's http2) makes it drop the response it has not delivered yet.
  if (!stream.readableEnded) {
    const timer = setTimeout(() => {
      if (!stream.closed && !stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    }, REFUSED_STREAM_LINGER_MS);
    stream.once('close', () => {
      clearTimeout(timer);
    });
  }
}

/** The verified client certificate of a mutual-TLS connection, read once per connection. */
const peers = new WeakMap<http2.Http2Session, PeerCertificate | null>();

function verifiedPeer(session: http2.Http2Session | undefined): PeerCertificate | undefined {
  if (session === undefined) return undefined;
  let cert = peers.get(session);
  if (cert === undefined) {
    const socket = session.socket;
    const c = socket instanceof TLSSocket && socket.authorized ? socket.getPeerCertificate() : undefined;
    cert = c === undefined || Object.keys(c).length === 0 ? null : c;
    peers.set(session, cert);
  }
  return cert ?? undefined;
}

/** What the server keeps of one connection: its streams, pings and timers. */
interface Connection {
  session: http2.ServerHttp2Session;
  /** Streams open now. */
  active: number;
  /** What its unfinished requests hold (counted against the cap, as in GrpcServer.pendingBytes). */
  pending: number;
  /** When the last stream closed (epoch ms), for the idle limit. */
  idleSince: number;
  lastPingAt: number;
  pingStrikes: number;
  /** Set when the server sent something since the last ping: the next ping is no strike. */
  sentSincePing: boolean;
  idleTimer: NodeJS.Timeout | undefined;
  ageTimer: NodeJS.Timeout | undefined;
}

/** A gRPC server for the methods of proto-loader service definitions. */
export class GrpcServer implements GrpcTransport {
  private readonly methods = new Map<string, Method>();
  private readonly connections = new Map<http2.ServerHttp2Session, Connection>();
  private readonly limits: GrpcServerLimits;
  private http2Server: http2.Http2Server | http2.Http2SecureServer | undefined;
  /** Bytes held by requests whose body has not ended yet, over every connection. */
  private pendingBytes = 0;

  constructor(
    limits: Partial<GrpcServerLimits> = {},
    private readonly authorize?: Authorize,
  ) {
    this.limits = { ...DEFAULT_GRPC_LIMITS, ...limits };
  }

  /** What unfinished requests hold now, their open streams' cost included (for tests and metrics). */
  get pendingRequestBytes(): number {
    return this.pendingBytes;
  }

  /** Open connections now. */
  get connectionCount(): number {
    return this.connections.size;
  }

  /** Serves the service's methods; a method without a handler answers UNIMPLEMENTED. */
  addService(
    definition: ServiceDefinition,
    handlers: Readonly<Record<string, UnaryHandler | ServerStreamHandler>>,
  ): void {
    for (const [name, def] of Object.entries(definition)) {
      const handler = handlers[name];
      if (handler === undefined) continue;
      if (def.requestStream) throw new Error(`${def.path}: client streaming is not supported`);
      this.methods.set(def.path, {
        path: def.path,
        streaming: def.responseStream,
        handler,
        decode: (b): unknown => def.requestDeserialize(b) as unknown,
        encode: (v) => def.responseSerialize(v),
      });
    }
  }

  /**
   * Listens on HOST:PORT (port 0: any free port), in plaintext or with TLS that requires a client
   * certificate signed by `tls.ca`; resolves with the port.
   */
  async listen(address: string, tls: SecureContextOptions | undefined): Promise<number> {
    const colon = address.lastIndexOf(':');
    const port = Number(address.slice(colon + 1));
    if (colon < 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
      throw new Error(`gRPC address ${address}: expected HOST:PORT`);
    }
    const host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    // No cap on a session's buffered memory, as grpc-js (node's default cap answers a burst of
    // calls with ENHANCE_YOUR_CALM and drops the connection): the streams per connection and the
    // bytes of unfinished requests are capped instead.
    const options: http2.ServerOptions = {
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
      settings: { maxConcurrentStreams: this.limits.maxConcurrentStreams },
    };
    const server =
      tls === undefined
        ? http2.createServer(options)
        : http2.createSecureServer({
            ...options,
            ...tls,
            requestCert: true,
            rejectUnauthorized: true,
            ALPNProtocols: ['h2'],
          });
    // A socket error (a reset during the handshake or on an unknown protocol) must not become an
    // uncaught 'error': the connection just ends.
    server.on('secureConnection', (socket: TLSSocket) => socket.on('error', ignore));
    server.on('connection', (socket: Socket) => socket.on('error', ignore));
    server.on('tlsClientError', ignore);
    server.on('session', (session) => {
      this.onSession(session);
    });
    server.on('stream', (stream, headers) => {
      this.onStream(stream, headers);
    });
    this.http2Server = server;
    return new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host === '' ? undefined : host, () => {
        server.removeListener('error', reject);
        const a = server.address();
        resolve(typeof a === 'object' && a !== null ? a.port : port);
      });
    });
  }

  /** New certificate, key or client CA for the connections that follow. */
  setSecureContext(tls: SecureContextOptions): void {
    const server = this.http2Server;
    if (server !== undefined && 'setSecureContext' in server) server.setSecureContext(tls);
  }

  /**
   * Takes no new connections and lets the running calls finish (the clients are told to go away);
   * after graceMs the remaining connections are closed.
   */
  async shutdown(graceMs: number): Promise<void> {
    const server = this.http2Server;
    if (server === undefined) return;
    this.http2Server = undefined;
    const closed = new Promise<void>((resolve) => {
      server.close(() => {
        resolve();
      });
    });
    for (const s of this.connections.keys()) s.close();
    const timer = setTimeout(() => {
      for (const s of this.connections.keys()) s.destroy();
    }, graceMs);
    await closed;
    clearTimeout(timer);
  }

  private onSession(session: http2.ServerHttp2Session): void {
    const conn: Connection = {
      session,
      active: 0,
      pending: 0,
      idleSince: Date.now(),
      lastPingAt: 0,
      pingStrikes: 0,
      sentSincePing: false,
      idleTimer: undefined,
      ageTimer: undefined,
    };
    this.connections.set(session, conn);
    session.on('error', ignore);
    session.on('ping', () => {
      this.onPing(conn);
    });
    session.once('close', () => {
      this.connections.delete(session);
      clearTimeout(conn.idleTimer);
      clearTimeout(conn.ageTimer);
    });
    const { maxConnectionIdleMs: idle, maxConnectionAgeMs: age } = this.limits;
    if (idle > 0) this.watchIdle(conn, idle);
    if (age > 0) {
      // ±10 %, as grpc-go, so that connections made together do not all go at once; then the
      // grace for the calls under way, and the connection is closed.
      const at = Math.min(MAX_TIMER_MS, Math.round(age * (0.9 + Math.random() * 0.2)));
      conn.ageTimer = setTimeout(() => {
        goAway(session, http2.constants.NGHTTP2_NO_ERROR, 'max_age');
        conn.ageTimer = setTimeout(
          () => {
            session.destroy();
          },
          Math.min(MAX_TIMER_MS, this.limits.maxConnectionAgeGraceMs),
        );
      }, at);
    }
  }

  /** Tells a connection that had no stream for `idle` ms to go away; checked when it may be due. */
  private watchIdle(conn: Connection, idle: number): void {
    const check = (): void => {
      const due = conn.idleSince + idle - Date.now();
      if (conn.active === 0 && due <= 0) {
        goAway(conn.session, http2.constants.NGHTTP2_NO_ERROR, 'max_idle');
        return;
      }
      conn.idleTimer = setTimeout(check, Math.min(MAX_TIMER_MS, conn.active === 0 ? due : idle));
    };
    conn.idleTimer = setTimeout(check, Math.min(MAX_TIMER_MS, idle));
  }

  /**
   * Keepalive enforcement as grpc-go's server: a ping that comes sooner than the policy allows
   * after the previous one, with nothing sent by the server between, is a strike; the third
   * closes the connection with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
   */
  private onPing(conn: Connection): void {
    const now = Date.now();
    const last = conn.lastPingAt;
    conn.lastPingAt = now;
    if (conn.sentSincePing) {
      conn.sentSincePing = false;
      conn.pingStrikes = 0;
      return;
    }
    const { keepaliveMinTimeMs, keepalivePermitWithoutStream } = this.limits;
    const minTime =
      conn.active < 1 && !keepalivePermitWithoutStream ? PING_WITHOUT_STREAM_MS : keepaliveMinTimeMs;
    if (last + minTime > now) conn.pingStrikes++;
    if (conn.pingStrikes > MAX_PING_STRIKES) {
      goAway(conn.session, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'too_many_pings');
      conn.session.destroy();
    }
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', ignore);
    const conn = this.connections.get(stream.session as http2.ServerHttp2Session);
    if (conn !== undefined) {
      conn.active++;
      // The server answers every stream: what it sends resets the ping strikes (grpc-go resets
      // them on every HEADERS or DATA frame it writes).
      conn.sentSincePing = true;
      stream.once('close', () => {
        conn.active--;
        if (conn.active === 0) conn.idleSince = Date.now();
      });
    }
    const contentType = headers['content-type'];
    // Not gRPC: an HTTP error with a gRPC status beside it, as grpc-go answers (the content type
    // first, then the method).
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      respondFailure(
        stream,
        {
          code: status.INVALID_ARGUMENT,
          details: 'not a gRPC request: the content-type is not application/grpc',
        },
        { ':status': 415 },
      );
      return;
    }
    if (headers[':method'] !== 'POST') {
      respondFailure(
        stream,
        { code: status.INTERNAL, details: 'not a gRPC request: the method is not POST' },
        { ':status': 405 },
      );
      return;
    }
    const path = headers[':path'] ?? '';
    const method = this.methods.get(path);
    if (method === undefined) {
      respondFailure(stream, {
        code: status.UNIMPLEMENTED,
        details: `The server does not implement the method ${path}`,
      });
      return;
    }
    let deadline = Infinity;
    const timeout = headers['grpc-timeout'];
    if (typeof timeout === 'string') {
      const ms = parseGrpcTimeout(timeout);
      if (Number.isNaN(ms)) {
        respondFailure(stream, { code: status.INTERNAL, details: `Invalid grpc-timeout value "${timeout}"` });
        return;
      }
      deadline = Date.now() + ms;
    }
    if (this.authorize !== undefined) {
      // Before any byte of the body is read: a refused client holds no memory.
      const refused = this.authorize(path, verifiedPeer(stream.session));
      if (refused !== undefined) {
        respondFailure(stream, refused);
        return;
      }
    }
    const encoding = headers['grpc-encoding'];
    this.read(stream, conn, method, typeof encoding === 'string' ? encoding : undefined, deadline);
  }

  /**
   * Reads the request's body, counting its bytes against the server's cap, and dispatches it once
   * its stream ends; answers DEADLINE_EXCEEDED if its deadline (from the headers), or the read
   * timeout without one, passes first.
   */
  private read(
    stream: http2.ServerHttp2Stream,
    conn: Connection | undefined,
    method: Method,
    encoding: string | undefined,
    deadline: number,
  ): void {
    if (!this.hold(conn, OPEN_REQUEST_COST)) {
      respondFailure(stream, this.exhausted());
      return;
    }
    let body: RequestBody | undefined = new RequestBody(MAX_RECEIVE_BYTES);
    /** What this request counts against the cap: its open stream and what its body keeps. */
    let held = OPEN_REQUEST_COST;
    const hold = (bytes: number): boolean => {
      if (!this.hold(conn, bytes)) return false;
      held += bytes;
      return true;
    };
    /** Set once the request is complete, or refused: no more bytes are read or held. */
    let over = false;
    let call: Call | undefined;
    const release = (): void => {
      this.unhold(conn, held);
      held = 0;
      body = undefined;
    };
    const refuse = (failure: GrpcFailure): void => {
      over = true;
      release();
      alarm.cancel();
      respondFailure(stream, failure);
    };
    const readUntil = deadline === Infinity ? Date.now() + this.limits.requestReadTimeoutMs : deadline;
    const alarm = new Alarm(readUntil, () => {
      if (call !== undefined) call.expire();
      else if (deadline !== Infinity)
        refuse({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      else
        refuse({
          code: status.DEADLINE_EXCEEDED,
          details: `the request was not complete ${this.limits.requestReadTimeoutMs} ms after its headers`,
        });
    });
    stream.on('data', (chunk: Buffer) => {
      if (over || body === undefined) return;
      if (body.size + chunk.length > MAX_RECEIVE_BYTES + 5) {
        // Refused at once; what else arrives is dropped.
        refuse({
          code: status.RESOURCE_EXHAUSTED,
          details: `Received message larger than max (more than ${MAX_RECEIVE_BYTES} bytes)`,
        });
        return;
      }
      if (!body.take(chunk, hold)) refuse(this.exhausted());
    });
    stream.once('close', () => {
      if (call !== undefined) {
        call.closed();
        return;
      }
      if (!over) {
        over = true;
        release();
      }
      alarm.cancel();
    });
    stream.on('end', () => {
      if (over) return;
      over = true;
      const whole = body?.bytes();
      release();
      if (deadline === Infinity) alarm.cancel();
      call = this.dispatch(
        stream,
        method,
        whole,
        encoding,
        deadline,
        deadline === Infinity ? undefined : alarm,
      );
      if (call === undefined) alarm.cancel();
    });
  }

  /**
   * Counts bytes of an unfinished request against the cap; false when they do not fit. Past the
   * cap, a connection within its share of it (the cap over the open connections, at most 64 KiB)
   * may still hold more: a client that floods the server over many connections cannot starve
   * another's small calls.
   */
  private hold(conn: Connection | undefined, bytes: number): boolean {
    const cap = this.limits.maxPendingRequestBytes;
    if (this.pendingBytes + bytes > cap) {
      const share = Math.min(MAX_SHARE_PAST_CAP, cap / Math.max(1, this.connections.size));
      if (conn === undefined || conn.pending + bytes > share) return false;
    }
    this.pendingBytes += bytes;
    if (conn !== undefined) conn.pending += bytes;
    return true;
  }

  private unhold(conn: Connection | undefined, bytes: number): void {
    this.pendingBytes -= bytes;
    if (conn !== undefined) conn.pending -= bytes;
  }

  private exhausted(): GrpcFailure {
    return {
      code: status.RESOURCE_EXHAUSTED,
      details: `the server holds ${this.limits.maxPendingRequestBytes} bytes of unfinished requests already (--grpc-max-pending-request-bytes)`,
    };
  }

  private dispatch(
    stream: http2.ServerHttp2Stream,
    method: Method,
    body: Buffer | undefined,
    encoding: string | undefined,
    deadline: number,
    alarm: Alarm | undefined,
  ): Call | undefined {
    if (stream.destroyed || stream.closed) return undefined;
    const message = readMessage(body, encoding);
    if ('code' in message) {
      respondFailure(
        stream,
        message,
        message.code === status.UNIMPLEMENTED ? { 'grpc-accept-encoding': ACCEPT_ENCODING } : undefined,
      );
      return undefined;
    }
    let request: unknown;
    try {
      request = method.decode(message.bytes);
    } catch (err) {
      respondFailure(stream, {
        code: status.INTERNAL,
        details: `Error deserializing request: ${err instanceof Error ? err.message : String(err)}`,
      });
      return undefined;
    }
    const call = new Call(stream, method, request, deadline, alarm);
    call.run();
    return call;
  }
}

/** GOAWAY with a code and debug text, once per connection; the connection ends after its streams. */
function goAway(session: http2.ServerHttp2Session, code: number, debug: string): void {
  if (session.closed || session.destroyed) return;
  session.goaway(code, undefined, Buffer.from(debug));
  session.close();
}

/** The one message of a unary or server-streaming request, decompressed. */
function readMessage(
  body: Buffer | undefined,
  encoding: string | undefined,
): { bytes: Buffer } | GrpcFailure {
  if (body === undefined || body.length < 5) {
    return { code: status.INTERNAL, details: 'Received no request message' };
  }
  const length = body.readUInt32BE(1);
  if (length > MAX_RECEIVE_BYTES) {
    return {
      code: status.RESOURCE_EXHAUSTED,
      details: `Received message larger than max (${length} vs. ${MAX_RECEIVE_BYTES})`,
    };
  }
  if (body.length !== length + 5) {
    return { code: status.INTERNAL, details: 'Received more or less than one request message' };
  }
  const bytes = body.subarray(5);
  // An uncompressed message is read whatever grpc-encoding says (the spec: the encoding applies
  // to messages flagged compressed only).
  if (body[0] === 0) return { bytes };
  if (encoding === undefined || encoding === 'identity') {
    return { code: status.INTERNAL, details: 'Received a compressed message without a grpc-encoding' };
  }
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    return {
      code: status.UNIMPLEMENTED,
      details: `Received message compressed with unsupported encoding "${encoding}"`,
    };
  }
  try {
    const opts = { maxOutputLength: MAX_RECEIVE_BYTES };
    return { bytes: encoding === 'gzip' ? gunzipSync(bytes, opts) : inflateSync(bytes, opts) };
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
      return {
        code: status.RESOURCE_EXHAUSTED,
        details: `Received message that decompresses to more than ${MAX_RECEIVE_BYTES} bytes`,
      };
    }
    return {
      code: status.INTERNAL,
      details: `Received a compressed message that does not decompress: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
}
