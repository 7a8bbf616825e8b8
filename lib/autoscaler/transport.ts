// What the externalgrpc server (server.ts) needs of a gRPC server: its own transport (grpc.ts,
// GrpcServer) satisfies it, and so can an adapter over a library's server, which is how the
// benchmark compares transports (test/bench/transports/, docs/performance.md "Transport choice").

import type { SecureContextOptions } from 'node:tls';

import type { ServiceDefinition } from '@grpc/grpc-js';

import type { Authorize, GrpcServerLimits, ServerStreamHandler, UnaryHandler } from './grpc.js';

export interface GrpcTransport {
  /** Serves the service's methods; a method without a handler answers UNIMPLEMENTED. */
  addService(
    definition: ServiceDefinition,
    handlers: Readonly<Record<string, UnaryHandler | ServerStreamHandler>>,
  ): void;
  /** Listens on HOST:PORT (port 0: any free port), plaintext or mutual TLS; resolves with the port. */
  listen(address: string, tls: SecureContextOptions | undefined): Promise<number>;
  /** New certificate, key or client CA for the connections that follow. */
  setSecureContext(tls: SecureContextOptions): void;
  /** Takes no new calls, lets running ones finish for up to graceMs, then closes. */
  shutdown(graceMs: number): Promise<void>;
}

/** Makes the transport of a server: its limits (unset fields: the defaults) and its allowlist. */
export type GrpcTransportFactory = (
  limits: Partial<GrpcServerLimits> | undefined,
  authorize: Authorize | undefined,
) => GrpcTransport;
