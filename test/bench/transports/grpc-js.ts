// Bench only: the GrpcTransport interface (lib/autoscaler/transport.ts) over @grpc/grpc-js's Server,
// so that `BENCH_CA_TRANSPORTS=grpc-js npm run bench autoscaler` serves our handlers through
// grpc-js, as the server did before issue #38. The service definitions are the ones our own
// transport gets (lib/autoscaler/proto.ts: a Buffer answer is sent as it is, NodeGroupGetOptions
// requests are read by their small reader), so what differs is grpc-js's per-call machinery.
//
// Tuned as far as grpc-js goes (docs/performance.md, "Transport choice"): channelz off, no
// interceptors, no per-call metric recording, the session memory cap off as ours, the concurrent
// streams of our limits, and the size checks left at their defaults. Nothing else of grpc-js's
// per-call work (a Metadata object from the headers, a deadline timer per call, the interceptor
// chain and its state machine, a stream decoder) can be turned off by an option.

import type { PeerCertificate, SecureContextOptions } from 'node:tls';

import {
  Server,
  ServerCredentials,
  status,
  type ChannelOptions,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
  type sendUnaryData,
} from '@grpc/grpc-js';

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

/**
 * The server options: each one's effect on the per-call cost is in docs/performance.md. Overridable
 * (BENCH_GRPCJS_OPTIONS, a JSON object merged over these) to measure them one by one.
 */
export function grpcJsOptions(limits: GrpcServerLimits): ChannelOptions {
  const base: ChannelOptions = {
    // Otherwise every call is counted (call tracker: two clock reads and counters per call).
    'grpc.enable_channelz': 0,
    // grpc-js's own default too: no cap on a session's buffered memory (node's default cap drops a
    // connection under a burst of calls); ours does the same.
    'grpc-node.max_session_memory': Number.MAX_SAFE_INTEGER,
    // The same SETTINGS_MAX_CONCURRENT_STREAMS as our transport.
    'grpc.max_concurrent_streams': limits.maxConcurrentStreams,
    // Off by default: an ORCA metrics recorder per call.
    'grpc.server_call_metric_recording': 0,
  };
  const extra = process.env.BENCH_GRPCJS_OPTIONS;
  return extra === undefined ? base : { ...base, ...(JSON.parse(extra) as ChannelOptions) };
}

function deadlineOf(call: { getDeadline(): Date | number }): number {
  const d = call.getDeadline();
  const ms = d instanceof Date ? d.getTime() : d;
  return Number.isFinite(ms) ? ms : Infinity;
}

interface AuthContextCall {
  getAuthContext?: () => { sslPeerCertificate?: PeerCertificate };
}

function peerOf(call: unknown): PeerCertificate | undefined {
  return (call as AuthContextCall).getAuthContext?.().sslPeerCertificate;
}

export class GrpcJsTransport implements GrpcTransport {
  private readonly server: Server;
  private readonly limits: GrpcServerLimits;
  private tls: SecureContextOptions | undefined;

  constructor(
    limits: Partial<GrpcServerLimits> | undefined,
    private readonly authorize: Authorize | undefined,
  ) {
    this.limits = { ...DEFAULT_GRPC_LIMITS, ...limits };
    this.server = new Server(grpcJsOptions(this.limits));
  }

  addService(
    definition: ServiceDefinition,
    handlers: Readonly<Record<string, UnaryHandler | ServerStreamHandler>>,
  ): void {
    const impl: UntypedServiceImplementation = {};
    for (const [name, def] of Object.entries(definition)) {
      const handler = handlers[name];
      if (handler === undefined) continue;
      const path = def.path;
      if (def.responseStream) {
        impl[name] = (call: ServerWritableStream<unknown, unknown>) => {
          const refused = this.authorize?.(path, peerOf(call));
          if (refused !== undefined) {
            call.emit('error', { code: refused.code, details: refused.details });
            return;
          }
          (handler as ServerStreamHandler)(streamCall(call));
        };
      } else {
        impl[name] = (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
          const refused = this.authorize?.(path, peerOf(call));
          if (refused !== undefined) {
            callback({ code: refused.code, details: refused.details });
            return;
          }
          const u = unaryCall(call, callback);
          try {
            (handler as UnaryHandler)(u);
          } catch (err) {
            u.fail({ code: status.INTERNAL, details: `handler failed: ${String(err)}` });
          }
        };
      }
    }
    this.server.addService(definition, impl);
  }

  listen(address: string, tls: SecureContextOptions | undefined): Promise<number> {
    this.tls = tls;
    const creds = tls === undefined ? ServerCredentials.createInsecure() : credentialsOf(tls);
    return new Promise((resolve, reject) => {
      this.server.bindAsync(address, creds, (err, port) => {
        if (err !== null) reject(err);
        else resolve(port);
      });
    });
  }

  setSecureContext(tls: SecureContextOptions): void {
    // grpc-js takes new credentials only by rebinding; the bench runs plaintext.
    this.tls = tls;
  }

  shutdown(graceMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

function credentialsOf(tls: SecureContextOptions): ServerCredentials {
  const buf = (v: unknown): Buffer => (Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
  return ServerCredentials.createSsl(
    tls.ca === undefined ? null : buf(tls.ca),
    [{ private_key: buf(tls.key), cert_chain: buf(tls.cert) }],
    true,
  );
}

function unaryCall(call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>): UnaryCall {
  let done = false;
  return {
    request: call.request,
    deadline: deadlineOf(call),
    peerCertificate: () => peerOf(call),
    answer(value: unknown): void {
      if (done) return;
      done = true;
      callback(null, value);
    },
    fail(failure: GrpcFailure): void {
      if (done) return;
      done = true;
      callback({ code: failure.code, details: failure.details });
    },
  };
}

function streamCall(call: ServerWritableStream<unknown, unknown>): ServerStreamCall {
  let ended = false;
  const s = {
    request: call.request,
    deadline: deadlineOf(call),
    get cancelled(): boolean {
      return call.cancelled;
    },
    peerCertificate: () => peerOf(call),
    write(value: unknown): void {
      if (!ended && !call.cancelled) call.write(value);
    },
    end(): void {
      if (ended) return;
      ended = true;
      call.end();
    },
    onCancelled(listener: () => void): void {
      call.on('cancelled', listener);
    },
  };
  return s;
}
