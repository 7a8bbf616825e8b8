// A test client of the externalgrpc CloudProvider service, loaded from the project's proto with
// @grpc/proto-loader: each RPC as a promise.

import path from 'node:path';

import {
  credentials,
  loadPackageDefinition,
  type ChannelCredentials,
  type ChannelOptions,
  type Client,
  type ServiceError,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

import { repoRoot } from './tools.js';

export type Rpc = (req?: Record<string, unknown>) => Promise<Record<string, unknown>>;

export interface CloudProviderClient {
  /** One call; `deadlineMs` is its gRPC deadline from now (default 10 s), as the autoscaler's grpc_timeout. */
  call(
    method: string,
    req?: Record<string, unknown>,
    opts?: { deadlineMs?: number },
  ): Promise<Record<string, unknown>>;
  close(): void;
}

export function cloudProviderClient(
  address: string,
  creds: ChannelCredentials = credentials.createInsecure(),
  options: ChannelOptions = {},
): CloudProviderClient {
  const def = loadSync(path.join(repoRoot, 'protos', 'externalgrpc.proto'), {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = loadPackageDefinition(def) as unknown as {
    clusterautoscaler: {
      cloudprovider: {
        v1: {
          externalgrpc: {
            CloudProvider: new (a: string, c: ChannelCredentials, o: ChannelOptions) => Client;
          };
        };
      };
    };
  };
  const client = new pkg.clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider(
    address,
    creds,
    options,
  ) as Client &
    Record<
      string,
      (
        req: unknown,
        opts: unknown,
        cb: (err: ServiceError | null, res: Record<string, unknown>) => void,
      ) => void
    >;
  return {
    call: (method, req = {}, opts = {}) =>
      new Promise((resolve, reject) => {
        const fn = client[method];
        if (typeof fn !== 'function') {
          reject(new Error(`no method ${method}`));
          return;
        }
        fn.call(client, req, { deadline: Date.now() + (opts.deadlineMs ?? 10_000) }, (err, res) => {
          err === null ? resolve(res) : reject(err);
        });
      }),
    close: () => {
      client.close();
    },
  };
}

/** The gRPC status code of a failed call (or undefined when it did not fail with one). */
export function grpcCode(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? Number(err.code) : undefined;
}

/** A gRPC message frame: uncompressed (or compressed) flag, big-endian length, the message. */
export function grpcFrame(message: Buffer, compressed = false): Buffer {
  const head = Buffer.alloc(5);
  head[0] = compressed ? 1 : 0;
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}
