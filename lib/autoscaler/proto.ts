// Loading of the project's .proto files (protos/ at the package root): the externalgrpc service and
// the gRPC health service (proto-loader definitions: paths, encoders and decoders, for our server in
// grpc.ts and for grpc-js clients), and the Kubernetes Node and Pod subsets.

import path from 'node:path';
import { fileURLToPath } from 'node:url';

import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import protobuf from 'protobufjs';

import { quantityNanos } from '../api/quantity.js';
import type { Node } from '../kube/types.js';
import { readGetOptionsRequest } from './options-wire.js';

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

/**
 * Requests read by a reader of their own instead of the generated decoder: NodeGroupGetOptions
 * comes for every node in every loop, and only its id and the bytes of its defaults matter.
 */
const REQUEST_READERS: Record<string, (buf: Buffer) => unknown> = {
  NodeGroupGetOptions: (buf) => readGetOptionsRequest(buf),
};

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
            ...(REQUEST_READERS[name] === undefined ? {} : { requestDeserialize: REQUEST_READERS[name] }),
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

let optionsType: protobuf.Type | undefined;

/** Decodes a NodeGroupAutoscalingOptions message (the defaults of a GetOptions request). */
export function decodeOptionsMessage(bytes: Uint8Array): Record<string, unknown> {
  optionsType ??= protobuf
    .loadSync(path.join(protosDir(), 'externalgrpc.proto'))
    .lookupType('clusterautoscaler.cloudprovider.v1.externalgrpc.NodeGroupAutoscalingOptions');
  return optionsType.toObject(optionsType.decode(bytes), { longs: Number, defaults: false });
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

let podType: protobuf.Type | undefined;

interface WirePod {
  metadata?: { name?: string; namespace?: string };
  spec?: {
    containers?: WireContainer[];
    initContainers?: WireContainer[];
    overhead?: Record<string, { string?: string }>;
  };
}

interface WireContainer {
  resources?: { requests?: Record<string, { string?: string }> };
  restartPolicy?: string;
}

function amount(list: Record<string, { string?: string }> | undefined, name: string): number {
  const q = list?.[name]?.string;
  if (q === undefined) return 0;
  const n = quantityNanos(q);
  return n === undefined || n < 0n ? 0 : Number(n) / 1e9;
}

/**
 * The CPU (cores) and memory (bytes) a pod requests, from its protobuf encoding (Go's
 * v1.Pod.Marshal): the containers and sidecar init containers together, or the largest regular
 * init container if that is more, plus the pod overhead (the scheduler's rule).
 */
export function decodePodRequests(bytes: Uint8Array): { name: string; cpu: number; memory: number } {
  podType ??= protobuf.loadSync(path.join(protosDir(), 'k8s-pod.proto')).lookupType('k8s.io.api.core.v1.Pod');
  const pod = podType.toObject(podType.decode(bytes), { longs: Number, defaults: false }) as WirePod;
  const total = { cpu: 0, memory: 0 };
  const init = { cpu: 0, memory: 0 };
  const running = [
    ...(pod.spec?.containers ?? []),
    ...(pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always'),
  ];
  for (const c of running) {
    total.cpu += amount(c.resources?.requests, 'cpu');
    total.memory += amount(c.resources?.requests, 'memory');
  }
  for (const c of pod.spec?.initContainers ?? []) {
    if (c.restartPolicy === 'Always') continue;
    init.cpu = Math.max(init.cpu, amount(c.resources?.requests, 'cpu'));
    init.memory = Math.max(init.memory, amount(c.resources?.requests, 'memory'));
  }
  return {
    name: `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`,
    cpu: Math.max(total.cpu, init.cpu) + amount(pod.spec?.overhead, 'cpu'),
    memory: Math.max(total.memory, init.memory) + amount(pod.spec?.overhead, 'memory'),
  };
}
