// Loading of the project's .proto files (protos/ at the package root): the externalgrpc service and
// the gRPC health service for @grpc/grpc-js, and the Kubernetes Node subset for encoding templates.

import path from 'node:path';
import { fileURLToPath } from 'node:url';

import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import protobuf from 'protobufjs';

import type { Node } from '../kube/types.js';

/** protos/ at the package root; this module runs as dist/lib/autoscaler/proto.js. */
function protosDir(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'protos');
}

const LOADER_OPTIONS = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

export const CLOUD_PROVIDER_SERVICE = 'clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

const loadedServices = new Map<string, ServiceDefinition>();

function serviceOf(file: string, name: string): ServiceDefinition {
  const cached = loadedServices.get(name);
  if (cached !== undefined) return cached;
  const pkg = loadSync(path.join(protosDir(), file), LOADER_OPTIONS);
  const def = pkg[name];
  if (def === undefined || 'format' in def) throw new Error(`${name} not found in ${file}`);
  loadedServices.set(name, def);
  return def;
}

let cloudProvider: ServiceDefinition | undefined;
let health: ServiceDefinition | undefined;

/** Methods whose answer never depends on the request: it is not decoded. */
const REQUEST_IGNORED = new Set(['NodeGroupGetOptions']);

/**
 * The CloudProvider service definition (loaded once), tuned for the autoscaler's call pattern:
 * a handler may answer with a Buffer it encoded before (encodeResponse), which is sent as it is,
 * and requests whose content no answer depends on are not decoded.
 */
export function cloudProviderService(): ServiceDefinition {
  if (cloudProvider === undefined) {
    const loaded = serviceOf('externalgrpc.proto', CLOUD_PROVIDER_SERVICE);
    cloudProvider = Object.fromEntries(
      Object.entries(loaded).map(([name, def]) => {
        const serialize = def.responseSerialize;
        return [
          name,
          {
            ...def,
            responseSerialize: (value: unknown) => (Buffer.isBuffer(value) ? value : serialize(value)),
            ...(REQUEST_IGNORED.has(name) ? { requestDeserialize: () => ({}) } : {}),
          },
        ];
      }),
    );
  }
  return cloudProvider;
}

/** The encoded answer of a CloudProvider method, to be built once and sent many times. */
export function encodeResponse(method: string, value: Record<string, unknown>): Buffer {
  const def = serviceOf('externalgrpc.proto', CLOUD_PROVIDER_SERVICE)[method];
  if (def === undefined) throw new Error(`${CLOUD_PROVIDER_SERVICE} has no method ${method}`);
  return def.responseSerialize(value);
}

export function healthService(): ServiceDefinition {
  health ??= serviceOf('health.proto', HEALTH_SERVICE);
  return health;
}

let nodeType: protobuf.Type | undefined;

function nodeMessage(): protobuf.Type {
  nodeType ??= protobuf
    .loadSync(path.join(protosDir(), 'k8s-node.proto'))
    .lookupType('k8s.io.api.core.v1.Node');
  return nodeType;
}

function protoTime(rfc3339: string | undefined): { seconds: number; nanos: number } | undefined {
  if (rfc3339 === undefined) return undefined;
  const ms = Date.parse(rfc3339);
  return Number.isNaN(ms) ? undefined : { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 };
}

function quantities(list: Record<string, string> | undefined): Record<string, { string: string }> {
  const out: Record<string, { string: string }> = {};
  for (const [k, v] of Object.entries(list ?? {})) out[k] = { string: v };
  return out;
}

/**
 * The protobuf encoding of a Node (Go's v1.Node.Marshal, without the API server's `k8s\0`
 * envelope), for NodeGroupTemplateNodeInfoResponse.
 */
export function encodeNode(node: Node): Buffer {
  const type = nodeMessage();
  const message = {
    metadata: {
      name: node.metadata.name,
      labels: node.metadata.labels ?? {},
      annotations: node.metadata.annotations ?? {},
      creationTimestamp: protoTime(node.metadata.creationTimestamp),
    },
    spec: {
      providerID: node.spec?.providerID,
      unschedulable: node.spec?.unschedulable,
      taints: (node.spec?.taints ?? []).map((t) => ({
        key: t.key,
        value: t.value,
        effect: t.effect,
        timeAdded: protoTime(t.timeAdded),
      })),
    },
    status: {
      capacity: quantities(node.status?.capacity),
      allocatable: quantities(node.status?.allocatable),
      conditions: (node.status?.conditions ?? []).map((c) => ({
        type: c.type,
        status: c.status,
        reason: c.reason,
        message: c.message,
        lastHeartbeatTime: protoTime(c.lastHeartbeatTime),
        lastTransitionTime: protoTime(c.lastTransitionTime),
      })),
      nodeInfo: {
        operatingSystem: node.status?.nodeInfo?.operatingSystem,
        architecture: node.status?.nodeInfo?.architecture,
      },
    },
  };
  const err = type.verify(message);
  if (err !== null) throw new Error(`template node does not fit the Node schema: ${err}`);
  return Buffer.from(type.encode(type.fromObject(message)).finish());
}

/** Decodes what encodeNode wrote (tests and debugging). */
export function decodeNode(bytes: Uint8Array): Record<string, unknown> {
  const type = nodeMessage();
  return type.toObject(type.decode(bytes), { longs: Number, defaults: false });
}
