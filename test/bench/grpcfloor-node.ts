// The Node floor of `npm run bench autoscaler`: the cheapest server of cluster-autoscaler's
// externalgrpc protocol we can write in Node, to tell what Node itself costs per call from what
// our server adds. node:http2 directly (as our server's transport, lib/autoscaler/grpc.ts), one
// unary call per stream, every answer encoded once at start-up and looked up per call, as the Go
// floor (test/bench/anchor/grpcfloor) does with grpc-go. It serves the same groups (GROUPS
// deployments NAMESPACE/pool-G of PER_GROUP nodes pool-G-mI with providerID PREFIX+pool-G-mI)
// and, from the answers file the benchmark writes (--answers: our server's answers, recorded),
// the same prices, per-group options, templates and scale-up refusal as our server and the Go
// floor, so the autoscaler makes the same calls against all three. Plaintext only, no deadlines,
// no health service, no scaling writes: a measuring stick, not a server anyone should run.
//
// node dist/test/bench/grpcfloor-node.js --address=127.0.0.1:0 --groups=100 --per-group=50
//   [--namespace=default] [--provider-prefix=virtual://bench/] [--answers=FILE]
// Prints "listening on HOST:PORT" once serving; on SIGUSR1 one line "stats cpu_us=CPU METHOD=CALLS
// ..." (its CPU time and the calls served by method since start), the Go floor's format.

import { readFileSync } from 'node:fs';
import http2 from 'node:http2';

import { InstanceState } from '../../lib/autoscaler/instances.js';
import { decodeDefaults, encodeGetOptionsResponse } from '../../lib/autoscaler/options-wire.js';
import { mergeOptions, type OptionOverrides } from '../../lib/autoscaler/options.js';
import { CLOUD_PROVIDER_SERVICE, encodeResponse } from '../../lib/autoscaler/proto.js';

const SERVICE_PATH = `/${CLOUD_PROVIDER_SERVICE}/`;

function flag(name: string, fallback: string): string {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  return arg === undefined ? fallback : arg.slice(name.length + 3);
}

// ---- protobuf ----------------------------------------------------------------------------------
// Answers are encoded once at start-up by our server's own encoder; requests are read per call by
// field number (protos/externalgrpc.proto), as the Go floor reads them.

/** A gRPC message frame: uncompressed flag, big-endian length, the message. */
function frame(m: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(m.length, 1);
  return Buffer.concat([head, m]);
}

function readVarint(b: Buffer, at: number): [number, number] {
  let v = 0;
  let scale = 1;
  let i = at;
  for (;;) {
    const c = b[i++];
    if (c === undefined) return [v, -1];
    v += (c & 127) * scale;
    if ((c & 128) === 0) return [v, i];
    scale *= 128;
  }
}

/** The bytes of the first length-delimited field `num` of a message, or undefined. */
function field(b: Buffer, num: number): Buffer | undefined {
  let i = 0;
  while (i >= 0 && i < b.length) {
    const [tag, next] = readVarint(b, i);
    if (next < 0) return undefined;
    i = next;
    const wire = tag & 7;
    if (wire === 0) [, i] = readVarint(b, i);
    else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else if (wire === 2) {
      const [len, start] = readVarint(b, i);
      if (start < 0) return undefined;
      if (tag >>> 3 === num) return b.subarray(start, start + len);
      i = start + len;
    } else return undefined;
  }
  return undefined;
}

// ---- the answers -----------------------------------------------------------------------------------

const namespace = flag('namespace', 'default');
const groups = Number(flag('groups', '100'));
const perGroup = Number(flag('per-group', '50'));
const prefix = flag('provider-prefix', 'virtual://bench/');

/**
 * What the benchmark hands the floors (--answers; the Go floor reads the same file): our server's
 * answers for what depends on objects a floor does not read, recorded before the autoscaler starts.
 */
export interface FloorAnswers {
  /** By group id. */
  groups: Record<
    string,
    {
      /** Price of one node per hour; absent: NOT_FOUND. */
      nodePrice?: number;
      /** NodeGroupTemplateNodeInfoResponse, base64; absent: UNIMPLEMENTED. */
      template?: string;
      /** What the group's annotations set; absent: no options (the autoscaler's defaults apply). */
      options?: OptionOverrides;
    }
  >;
  /** Price per hour by pod name, '*' for any other pod; none: NOT_FOUND. */
  podPrices: Record<string, number>;
  /** Set: IncreaseSize answers UNAVAILABLE with this message (the API server refuses our writes). */
  refuseIncrease?: string;
}

interface Group {
  forNode: Buffer;
  targetSize: Buffer;
  nodes: Buffer;
  nodePrice: Buffer | undefined;
  template: Buffer | undefined;
  options: OptionOverrides | undefined;
  /** NodeGroupGetOptions answers by the defaults they were asked with, built on first sight. */
  optionAnswers: Map<string, Buffer>;
}

const answersPath = flag('answers', '');
const answersFile: FloorAnswers =
  answersPath === ''
    ? { groups: {}, podPrices: {} }
    : (JSON.parse(readFileSync(answersPath, 'utf8')) as FloorAnswers);

const answer = (method: string, value: Record<string, unknown>): Buffer =>
  frame(encodeResponse(method, value));
const byId = new Map<string, Group>();
const byNode = new Map<string, Group>();
const list: Record<string, unknown>[] = [];
for (let gi = 0; gi < groups; gi++) {
  const name = `pool-${gi}`;
  const id = `${namespace}/${name}`;
  const max = perGroup * 2;
  // The group as our server words it.
  const nodeGroup = { id, minSize: 0, maxSize: max, debug: `${id} (0:${max}, replicas=${perGroup})` };
  const instances: Record<string, unknown>[] = [];
  const recorded = answersFile.groups[id];
  const g: Group = {
    forNode: answer('NodeGroupForNode', { nodeGroup }),
    targetSize: answer('NodeGroupTargetSize', { targetSize: perGroup }),
    nodes: Buffer.alloc(0),
    nodePrice:
      recorded?.nodePrice === undefined
        ? undefined
        : answer('PricingNodePrice', { price: recorded.nodePrice }),
    template: recorded?.template === undefined ? undefined : frame(Buffer.from(recorded.template, 'base64')),
    options: recorded?.options,
    optionAnswers: new Map(),
  };
  for (let mi = 0; mi < perGroup; mi++) {
    const node = `${name}-m${mi}`;
    byNode.set(prefix + node, g);
    byNode.set(node, g);
    instances.push({ id: prefix + node, status: { instanceState: InstanceState.Running } });
  }
  g.nodes = answer('NodeGroupNodes', { instances });
  byId.set(id, g);
  list.push(nodeGroup);
}
const nodeGroups = answer('NodeGroups', { nodeGroups: list });
const empty = frame(Buffer.alloc(0));
const notServed = answer('NodeGroupForNode', { nodeGroup: { id: '' } });

/** A refusal: the headers of a trailers-only response (the status in the one HEADERS frame). */
type Refusal = Record<string, string | number>;

/** grpc-message is percent-encoded outside printable ASCII, and '%' itself (the gRPC spec). */
function refusal(code: number, message: string): Refusal {
  const encoded = message.replace(/[^\x20-\x24\x26-\x7e]+/g, (c) => encodeURIComponent(c));
  return {
    ':status': 200,
    'content-type': 'application/grpc',
    'grpc-status': String(code),
    'grpc-message': encoded,
  };
}

const UNIMPLEMENTED = 12;
const NOT_FOUND = 5;
const UNAVAILABLE = 14;
const noPrice = refusal(NOT_FOUND, 'no price for this node or pod');
const noTemplate = refusal(UNIMPLEMENTED, "no template: the group's MachineClass has no nodeTemplate");
const noGroup = refusal(NOT_FOUND, 'node group is not served');
const noScaling =
  answersFile.refuseIncrease === undefined
    ? refusal(UNIMPLEMENTED, 'the Node floor does not scale')
    : refusal(UNAVAILABLE, answersFile.refuseIncrease);

const podPrices = new Map(
  Object.entries(answersFile.podPrices).map(([name, p]) => [name, answer('PricingPodPrice', { price: p })]),
);
const anyPodPrice = podPrices.get('*');

const text = (b: Buffer | undefined): string => (b === undefined ? '' : b.toString('utf8'));

/** The group in the name the autoscaler gives the template nodes it prices (template-node-for-<id>-<n>). */
function templateGroup(name: string): string {
  const prefix = 'template-node-for-';
  if (!name.startsWith(prefix)) return '';
  const rest = name.slice(prefix.length);
  const i = rest.lastIndexOf('-');
  return i > 0 ? rest.slice(0, i) : '';
}

function optionsAnswer(g: Group, defaults: Buffer): Buffer {
  if (g.options === undefined) return empty;
  const key = defaults.toString('latin1');
  let a = g.optionAnswers.get(key);
  if (a === undefined) {
    a = frame(encodeGetOptionsResponse(mergeOptions(decodeDefaults(defaults), g.options)));
    g.optionAnswers.set(key, a);
  }
  return a;
}

const answers: Record<string, (req: Buffer) => Buffer | Refusal> = {
  NodeGroups: () => nodeGroups,
  NodeGroupForNode: (req) => {
    const node = field(req, 1) ?? Buffer.alloc(0);
    return (byNode.get(text(field(node, 1))) ?? byNode.get(text(field(node, 2))))?.forNode ?? notServed;
  },
  PricingNodePrice: (req) => {
    const node = field(req, 1) ?? Buffer.alloc(0);
    const name = text(field(node, 2));
    const g = byNode.get(text(field(node, 1))) ?? byNode.get(name) ?? byId.get(templateGroup(name));
    return g?.nodePrice ?? noPrice;
  },
  PricingPodPrice: (req) => {
    const pod = field(req, 4) ?? field(req, 1) ?? Buffer.alloc(0);
    const name = text(field(field(pod, 1) ?? Buffer.alloc(0), 1));
    return podPrices.get(name) ?? anyPodPrice ?? noPrice;
  },
  GPULabel: () => empty,
  GetAvailableGPUTypes: () => empty,
  Cleanup: () => empty,
  Refresh: () => empty,
  NodeGroupTargetSize: (req) => byId.get(text(field(req, 1)))?.targetSize ?? noGroup,
  NodeGroupNodes: (req) => byId.get(text(field(req, 1)))?.nodes ?? noGroup,
  NodeGroupTemplateNodeInfo: (req) => {
    const g = byId.get(text(field(req, 1)));
    return g === undefined ? noGroup : (g.template ?? noTemplate);
  },
  NodeGroupGetOptions: (req) => {
    const g = byId.get(text(field(req, 1)));
    return g === undefined ? noGroup : optionsAnswer(g, field(req, 2) ?? Buffer.alloc(0));
  },
  NodeGroupIncreaseSize: () => noScaling,
};

// ---- the server ------------------------------------------------------------------------------------

const calls = new Map<string, number>();
const OK_HEADERS = { ':status': 200, 'content-type': 'application/grpc' };
const OK_TRAILERS = { 'grpc-status': '0' };

const server = http2.createServer();
server.on('stream', (stream, headers) => {
  const path = headers[':path'] ?? '';
  const method = path.startsWith(SERVICE_PATH) ? path.slice(SERVICE_PATH.length) : '';
  const chunks: Buffer[] = [];
  // A stream the client reset (its deadline passed) errors; nothing is left to answer then.
  stream.on('error', () => undefined);
  stream.on('data', (c: Buffer) => chunks.push(c));
  stream.on('end', () => {
    if (stream.destroyed) return;
    const body = chunks.length === 1 ? (chunks[0] ?? Buffer.alloc(0)) : Buffer.concat(chunks);
    const handler = answers[method];
    calls.set(method, (calls.get(method) ?? 0) + 1);
    const res =
      handler === undefined ? refusal(UNIMPLEMENTED, `unknown method ${method}`) : handler(body.subarray(5));
    if (Buffer.isBuffer(res)) {
      stream.respond(OK_HEADERS, { waitForTrailers: true });
      stream.once('wantTrailers', () => {
        stream.sendTrailers(OK_TRAILERS);
      });
      stream.end(res);
    } else {
      stream.respond(res, { endStream: true });
    }
  });
});

const address = flag('address', '127.0.0.1:0');
const colon = address.lastIndexOf(':');
server.listen(Number(address.slice(colon + 1)), address.slice(0, colon), () => {
  const a = server.address();
  const port = typeof a === 'object' && a !== null ? a.port : 0;
  console.log(`listening on ${address.slice(0, colon)}:${port}`);
});

function stats(): void {
  const u = process.cpuUsage();
  const counts = [...calls].sort(([a], [b]) => a.localeCompare(b));
  console.log(`stats cpu_us=${u.user + u.system}${counts.map(([m, n]) => ` ${m}=${n}`).join('')}`);
}
process.on('SIGUSR1', stats);
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    stats();
    server.close();
    process.exit(0);
  });
}
