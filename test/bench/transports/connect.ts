// Bench only: the GrpcTransport interface (lib/autoscaler/transport.ts) over @connectrpc/connect-node
// (its router behind node:http2, gRPC protocol only), so that `BENCH_CA_TRANSPORTS=connect npm run
// bench autoscaler` serves our handlers through connect.
//
// connect reads and writes messages only through @bufbuild/protobuf schemas, and our handlers take
// proto-loader objects and often answer pre-encoded Buffers. The cheapest honest bridge:
//
// - The schemas are built at run time from the proto-loader service definitions (the method paths
//   and streaming flags of protos/externalgrpc.proto and protos/health.proto), every method's input
//   and output being one empty message type, `Raw`. connect then decodes a request by walking its
//   top-level fields into `$unknown` (each a view of the request's bytes, tag excluded), from which
//   the adapter takes the whole request as one view (no copy) and decodes it with the service
//   definition's own decoder (proto-loader's, or the small NodeGroupGetOptions reader), as our
//   transport does.
// - An answer is a Raw message whose `$unknown` holds the answer's bytes as one field: its first
//   tag and everything after it, which toBinary writes back as the same bytes. A pre-encoded Buffer
//   is used as it is (and the Raw message is kept with it); any other answer is encoded by the
//   definition's serializer first, as our transport does.
//
// What this adds that a real port (handlers on bufbuild message types) would not have: the views
// above and one tag read per answer (a few µs at most); what it saves a real port: bufbuild's full
// decode of every request and toBinary of every answer (a port would encode each answer per call,
// or keep messages, not bytes). So this measures connect's per-call machinery with our codecs: if
// anything, in connect's favour. Written down in docs/performance.md ("Transport choice").

import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { TLSSocket, type PeerCertificate, type SecureContextOptions } from 'node:tls';

import { createFileRegistry, type DescMessage, type DescService } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, MethodDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { create } from '@bufbuild/protobuf';
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  type ConnectRouter,
  type HandlerContext,
} from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { status, type ServiceDefinition } from '@grpc/grpc-js';

import {
  DEFAULT_GRPC_LIMITS,
  type Authorize,
  type GrpcFailure,
  type GrpcServerLimits,
  type ServerStreamCall,
  type ServerStreamHandler,
  type UnaryCall,
  type UnaryHandler,
} from '../../../lib/autoscaler/grpc.js';
import type { GrpcTransport } from '../../../lib/autoscaler/transport.js';

/** grpc-js's and our receive limit: 4 MiB. */
const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

/** A message as connect hands it over or takes it: only unknown fields (views of the wire bytes). */
interface RawMessage {
  $typeName: string;
  $unknown?: { no: number; wireType: number; data: Uint8Array }[];
}

/** Bytes of a varint. */
function varintLength(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

const EMPTY = Buffer.alloc(0);

/** The whole request, as a view of the bytes connect read (its fields are contiguous). */
function requestBytes(m: RawMessage): Buffer {
  const fields = m.$unknown;
  if (fields === undefined || fields.length === 0) return EMPTY;
  const first = fields[0] as { no: number; wireType: number; data: Uint8Array };
  const last = fields[fields.length - 1] as { data: Uint8Array };
  const start = first.data.byteOffset - varintLength(first.no * 8 + first.wireType);
  return Buffer.from(first.data.buffer, start, last.data.byteOffset + last.data.byteLength - start);
}

/** A Raw message that toBinary writes as exactly these bytes. */
function rawMessage(typeName: string, bytes: Buffer): RawMessage {
  if (bytes.length === 0) return { $typeName: typeName };
  let tag = 0;
  let i = 0;
  for (let shift = 1; ; shift *= 128) {
    const b = bytes[i++] ?? 0;
    tag += (b & 0x7f) * shift;
    if ((b & 0x80) === 0) break;
  }
  return {
    $typeName: typeName,
    $unknown: [{ no: Math.floor(tag / 8), wireType: tag & 7, data: bytes.subarray(i) }],
  };
}

/** Pre-encoded answers are sent many times: their Raw messages are kept as long as they live. */
const rawAnswers = new WeakMap<Buffer, RawMessage>();

function answerOf(typeName: string, encode: (v: unknown) => Buffer, value: unknown): RawMessage {
  if (!Buffer.isBuffer(value)) return rawMessage(typeName, encode(value));
  let m = rawAnswers.get(value);
  if (m === undefined) {
    m = rawMessage(typeName, value);
    rawAnswers.set(value, m);
  }
  return m;
}

/** The bufbuild service of a proto-loader definition, every message being `<package>.Raw`. */
function rawService(definition: ServiceDefinition): { service: DescService; raw: DescMessage } {
  const methods = Object.entries(definition);
  const firstPath = methods[0]?.[1].path ?? '';
  const serviceName = firstPath.slice(1, firstPath.lastIndexOf('/'));
  const dot = serviceName.lastIndexOf('.');
  const pkg = serviceName.slice(0, dot);
  const file = create(FileDescriptorProtoSchema, {
    name: `bench-raw/${serviceName}.proto`,
    package: pkg,
    syntax: 'proto3',
    messageType: [{ name: 'Raw' }],
    service: [
      {
        name: serviceName.slice(dot + 1),
        method: methods.map(([name, def]) =>
          create(MethodDescriptorProtoSchema, {
            name,
            inputType: `.${pkg}.Raw`,
            outputType: `.${pkg}.Raw`,
            clientStreaming: def.requestStream,
            serverStreaming: def.responseStream,
          }),
        ),
      },
    ],
  });
  const registry = createFileRegistry(file, () => undefined);
  const service = registry.getService(serviceName);
  const raw = registry.getMessage(`${pkg}.Raw`);
  if (service === undefined || raw === undefined) throw new Error(`${serviceName}: no descriptors`);
  return { service, raw };
}

const PEER = createContextKey<PeerCertificate | undefined>(undefined);

/** gRPC's status codes are connect's Code values (the same numbers). */
const CODES = new Map<number, Code>(
  Object.values(Code)
    .filter((v): v is Code => typeof v === 'number')
    .map((c) => [c, c]),
);

function failure(f: GrpcFailure): ConnectError {
  return new ConnectError(f.details, CODES.get(f.code) ?? Code.Unknown);
}

function deadlineOf(ctx: HandlerContext): number {
  const ms = ctx.timeoutMs();
  return ms === undefined ? Infinity : Date.now() + ms;
}

type Impl = (req: RawMessage, ctx: HandlerContext) => unknown;

export class ConnectTransport implements GrpcTransport {
  private readonly limits: GrpcServerLimits;
  private readonly services: { service: DescService; impl: Record<string, Impl> }[] = [];
  private server: http2.Http2Server | http2.Http2SecureServer | undefined;
  private readonly sessions = new Set<http2.ServerHttp2Session>();

  constructor(
    limits: Partial<GrpcServerLimits> | undefined,
    private readonly authorize: Authorize | undefined,
  ) {
    this.limits = { ...DEFAULT_GRPC_LIMITS, ...limits };
  }

  addService(
    definition: ServiceDefinition,
    handlers: Readonly<Record<string, UnaryHandler | ServerStreamHandler>>,
  ): void {
    const { service, raw } = rawService(definition);
    const typeName = raw.typeName;
    const impl: Record<string, Impl> = {};
    for (const [name, def] of Object.entries(definition)) {
      const handler = handlers[name];
      // connect finds an implementation by the method's local name (lowerCamelCase).
      const local = service.methods.find((m) => m.name === name)?.localName;
      if (handler === undefined || local === undefined) continue;
      const decode = (m: RawMessage): unknown => def.requestDeserialize(requestBytes(m)) as unknown;
      const encode = (v: unknown): Buffer => def.responseSerialize(v);
      const path = def.path;
      const check = (ctx: HandlerContext): void => {
        const refused = this.authorize?.(path, ctx.values.get(PEER));
        if (refused !== undefined) throw failure(refused);
      };
      if (def.responseStream) {
        impl[local] = (req, ctx) => {
          check(ctx);
          return serverStream(handler as ServerStreamHandler, decode(req), ctx, (v) =>
            answerOf(typeName, encode, v),
          );
        };
      } else {
        impl[local] = (req, ctx) => {
          if (this.authorize !== undefined) check(ctx);
          return new Promise<RawMessage>((resolve, reject) => {
            let done = false;
            const call: UnaryCall = {
              request: decode(req),
              deadline: deadlineOf(ctx),
              peerCertificate: () => ctx.values.get(PEER),
              answer(value: unknown): void {
                if (done) return;
                done = true;
                try {
                  resolve(answerOf(typeName, encode, value));
                } catch {
                  reject(new ConnectError('Error serializing response', Code.Internal));
                }
              },
              fail(f: GrpcFailure): void {
                if (done) return;
                done = true;
                reject(failure(f));
              },
            };
            try {
              (handler as UnaryHandler)(call);
            } catch (err) {
              call.fail({ code: status.INTERNAL, details: `handler failed: ${String(err)}` });
            }
          });
        };
      }
    }
    this.services.push({ service, impl });
  }

  listen(address: string, tls: SecureContextOptions | undefined): Promise<number> {
    const colon = address.lastIndexOf(':');
    const port = Number(address.slice(colon + 1));
    const host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    const handler = connectNodeAdapter({
      routes: (router: ConnectRouter) => {
        for (const s of this.services) router.service(s.service, s.impl as never);
      },
      // The autoscaler speaks gRPC only: the Connect and gRPC-web protocols are not matched.
      grpc: true,
      grpcWeb: false,
      connect: false,
      readMaxBytes: MAX_RECEIVE_BYTES,
      // Requests may come compressed (gzip), answers never are, as ours.
      compressMinBytes: Number.MAX_SAFE_INTEGER,
      // The peer's certificate only when the handlers may ask for it (a context per call otherwise).
      ...(tls === undefined
        ? {}
        : {
            contextValues: (req: { socket?: unknown }) => {
              const socket = req.socket;
              const cert =
                socket instanceof TLSSocket && socket.authorized ? socket.getPeerCertificate() : undefined;
              return createContextValues().set(PEER, cert);
            },
          }),
    });
    const options: http2.ServerOptions = {
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
      settings: { maxConcurrentStreams: this.limits.maxConcurrentStreams },
    };
    const server =
      tls === undefined
        ? http2.createServer(options, handler)
        : http2.createSecureServer(
            { ...options, ...tls, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] },
            handler,
          );
    server.on('connection', (socket: Socket) => socket.on('error', () => undefined));
    server.on('session', (s: http2.ServerHttp2Session) => {
      this.sessions.add(s);
      s.once('close', () => this.sessions.delete(s));
    });
    this.server = server;
    return new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host === '' ? undefined : host, () => {
        server.removeListener('error', reject);
        const a = server.address();
        resolve(typeof a === 'object' && a !== null ? a.port : port);
      });
    });
  }

  setSecureContext(tls: SecureContextOptions): void {
    const server = this.server;
    if (server !== undefined && 'setSecureContext' in server) server.setSecureContext(tls);
  }

  async shutdown(graceMs: number): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
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
}

/** A server stream: what the handler writes is yielded until it ends or the client goes away. */
async function* serverStream(
  handler: ServerStreamHandler,
  request: unknown,
  ctx: HandlerContext,
  toMessage: (v: unknown) => RawMessage,
): AsyncGenerator<RawMessage> {
  const queue: RawMessage[] = [];
  // Set by the handler's end() and by the client going away, between the generator's awaits.
  const state = { ended: false, cancelled: false };
  let wake: (() => void) | undefined;
  const listeners: (() => void)[] = [];
  const poke = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const onAbort = (): void => {
    if (state.ended || state.cancelled) return;
    state.cancelled = true;
    for (const l of listeners) l();
    poke();
  };
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  const call: ServerStreamCall = {
    request,
    deadline: deadlineOf(ctx),
    get cancelled(): boolean {
      return state.cancelled;
    },
    peerCertificate: () => ctx.values.get(PEER),
    write(value: unknown): void {
      if (state.ended || state.cancelled) return;
      queue.push(toMessage(value));
      poke();
    },
    end(): void {
      state.ended = true;
      poke();
    },
    onCancelled(listener: () => void): void {
      listeners.push(listener);
    },
  };
  handler(call);
  try {
    for (;;) {
      while (queue.length > 0) yield queue.shift() as RawMessage;
      if (state.ended || state.cancelled) return;
      await new Promise<void>((r) => (wake = r));
    }
  } finally {
    ctx.signal.removeEventListener('abort', onAbort);
    onAbort();
  }
}
