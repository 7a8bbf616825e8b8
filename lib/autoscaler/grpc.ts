// The gRPC transport of the externalgrpc server: unary and server-streaming calls over node:http2,
// as the gRPC over HTTP/2 protocol has them, without @grpc/grpc-js's server. The autoscaler calls
// ~17,000 times per loop at 5,000 nodes, one call after the other, and grpc-js's per-call
// machinery (interceptor chain, metadata objects, a deadline timer and a metrics recorder for
// every call, several ticks between the request and the answer) doubled what each call cost.
// Here a call is read when its stream ends and answered in the same turn: headers, one message,
// trailers. A deadline timer exists only while an answer is pending (the scaling writes).
//
// What the server does for its clients, as grpc-js did: requests compressed with gzip or deflate
// are read; requests above the receive limit are refused; a call past its grpc-timeout answers
// DEADLINE_EXCEEDED; unknown methods answer UNIMPLEMENTED; failures are trailers-only responses;
// TLS verifies client certificates against the client CA and takes a new certificate, key and
// CA for the connections that follow (setSecureContext); shutdown lets running calls finish.

import http2 from 'node:http2';
import { TLSSocket, type PeerCertificate, type SecureContextOptions } from 'node:tls';
import { gunzipSync, inflateSync } from 'node:zlib';

import { status, type ServiceDefinition } from '@grpc/grpc-js';

/** A call's outcome other than OK. */
export interface GrpcFailure {
  code: status;
  details: string;
}

/** grpc-js's default receive limit: 4 MiB. */
const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

const CONTENT_TYPE = 'application/grpc+proto';
const OK_HEADERS: http2.OutgoingHttpHeaders = {
  ':status': 200,
  'content-type': CONTENT_TYPE,
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
};
const OK_TRAILERS: http2.OutgoingHttpHeaders = { 'grpc-status': '0', 'grpc-message': 'OK' };
const WAIT_FOR_TRAILERS = { waitForTrailers: true };
const END_STREAM = { endStream: true };

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
  private timer: NodeJS.Timeout | undefined;
  private cancelListeners: (() => void)[] | undefined;
  cancelled = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly method: Method,
    readonly request: unknown,
    readonly deadline: number,
  ) {}

  peerCertificate(): PeerCertificate | undefined {
    const socket = this.stream.session?.socket;
    if (!(socket instanceof TLSSocket) || !socket.authorized) return undefined;
    const cert = socket.getPeerCertificate();
    return Object.keys(cert).length === 0 ? undefined : cert;
  }

  /**
   * Runs the handler. Most calls are answered before it returns; one that is not (a scaling
   * write) or that streams learns of its client going away, and a unary call still unanswered at
   * its deadline answers DEADLINE_EXCEEDED.
   */
  run(): void {
    if (this.method.streaming) {
      this.stream.once('close', () => {
        this.closed();
      });
    }
    try {
      (this.method.handler as (call: Call) => void)(this);
    } catch (err) {
      this.fail({ code: status.INTERNAL, details: `handler failed: ${String(err)}` });
      return;
    }
    if (this.done || this.method.streaming) return;
    this.stream.once('close', () => {
      this.closed();
    });
    if (this.deadline === Infinity) return;
    this.timer = setTimeout(
      () => {
        this.fail({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      },
      Math.max(0, this.deadline - Date.now()),
    );
  }

  private finish(): boolean {
    if (this.done) return false;
    this.done = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
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
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.done) return;
    this.done = true;
    this.cancelled = true;
    for (const l of this.cancelListeners ?? []) l();
  }
}

/** A trailers-only response: the status in the one HEADERS frame. */
function respondFailure(stream: http2.ServerHttp2Stream, failure: GrpcFailure): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond(
    {
      ':status': 200,
      'content-type': CONTENT_TYPE,
      'grpc-status': String(failure.code),
      'grpc-message': encodeMessage(failure.details),
    },
    END_STREAM,
  );
}

/** A gRPC server for the methods of proto-loader service definitions. */
export class GrpcServer {
  private readonly methods = new Map<string, Method>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private http2Server: http2.Http2Server | http2.Http2SecureServer | undefined;

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
    // As grpc-js: no cap on a session's buffered memory (its default cap answers a burst of calls
    // with ENHANCE_YOUR_CALM and drops the connection).
    const options = { maxSessionMemory: Number.MAX_SAFE_INTEGER };
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
    server.on('session', (session) => {
      this.sessions.add(session);
      session.on('error', ignore);
      session.once('close', () => this.sessions.delete(session));
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
    for (const s of this.sessions) s.close();
    const timer = setTimeout(() => {
      for (const s of this.sessions) s.destroy();
    }, graceMs);
    await closed;
    clearTimeout(timer);
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', ignore);
    const contentType = headers['content-type'];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      stream.respond({ ':status': 415 }, END_STREAM);
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
    const encoding = headers['grpc-encoding'];
    if (encoding !== undefined && encoding !== 'identity' && encoding !== 'gzip' && encoding !== 'deflate') {
      respondFailure(stream, {
        code: status.UNIMPLEMENTED,
        details: `Received message compressed with unsupported encoding "${String(encoding)}"`,
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
    let body: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      if (size < 0) return;
      size += chunk.length;
      if (size > MAX_RECEIVE_BYTES + 5) {
        // Refused at once; what else arrives is dropped.
        size = -1;
        body = chunks = undefined;
        respondFailure(stream, {
          code: status.RESOURCE_EXHAUSTED,
          details: `Received message larger than max (more than ${MAX_RECEIVE_BYTES} bytes)`,
        });
        return;
      }
      if (body === undefined) body = chunk;
      else (chunks ??= [body]).push(chunk);
    });
    stream.on('end', () => {
      if (size < 0) return;
      if (chunks !== undefined) body = Buffer.concat(chunks, size);
      this.dispatch(stream, method, body, encoding, deadline);
    });
  }

  private dispatch(
    stream: http2.ServerHttp2Stream,
    method: Method,
    body: Buffer | undefined,
    encoding: string | undefined,
    deadline: number,
  ): void {
    if (stream.destroyed || stream.closed) return;
    const message = readMessage(body, encoding);
    if ('code' in message) {
      respondFailure(stream, message);
      return;
    }
    let request: unknown;
    try {
      request = method.decode(message.bytes);
    } catch (err) {
      respondFailure(stream, {
        code: status.INTERNAL,
        details: `Error deserializing request: ${err instanceof Error ? err.message : String(err)}`,
      });
      return;
    }
    new Call(stream, method, request, deadline).run();
  }
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
  if (body[0] === 0) return { bytes };
  try {
    if (encoding === 'gzip') return { bytes: gunzipSync(bytes, { maxOutputLength: MAX_RECEIVE_BYTES }) };
    if (encoding === 'deflate') return { bytes: inflateSync(bytes, { maxOutputLength: MAX_RECEIVE_BYTES }) };
  } catch (err) {
    return {
      code: status.INTERNAL,
      details: `Received a compressed message that does not decompress: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
  return { code: status.INTERNAL, details: 'Received a compressed message without a grpc-encoding' };
}
