// The Node floor of `npm run bench autoscaler`: the cheapest server of cluster-autoscaler's
// externalgrpc protocol we can write in Node, to tell what Node itself costs per call from what
// grpc-js and our server add. No grpc-js: node:http2 directly, one unary call per stream, every
// answer encoded once at start-up and looked up per call, as the Go floor
// (test/bench/anchor/grpcfloor) does with grpc-go. It serves the same groups (GROUPS deployments
// NAMESPACE/pool-G of PER_GROUP nodes pool-G-mI with providerID PREFIX+pool-G-mI) and refuses what
// our server and the Go floor refuse (pricing, per-group options, templates), so the autoscaler
// makes the same calls against all three. Plaintext only, no deadlines, no health service, no
// scaling calls: a measuring stick, not a server anyone should run.
//
// node dist/test/bench/grpcfloor-node.js --address=127.0.0.1:0 --groups=100 --per-group=50
//   [--namespace=default] [--provider-prefix=virtual://bench/]
// Prints "listening on HOST:PORT" once serving; on SIGUSR1 one line "stats cpu_us=CPU METHOD=CALLS
// ..." (its CPU time and the calls served by method since start), the Go floor's format.

import http2 from 'node:http2';

const SERVICE_PATH = '/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/';

function flag(name: string, fallback: string): string {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  return arg === undefined ? fallback : arg.slice(name.length + 3);
}

// ---- protobuf, by field number (protos/externalgrpc.proto) ---------------------------------------

function varint(v: number): number[] {
  const out: number[] = [];
  let n = v;
  while (n > 127) {
    out.push((n & 127) | 128);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

function stringField(num: number, s: string): Buffer {
  if (s === '') return Buffer.alloc(0);
  const data = Buffer.from(s, 'utf8');
  return Buffer.concat([Buffer.from([...varint((num << 3) | 2), ...varint(data.length)]), data]);
}

function varintField(num: number, v: number): Buffer {
  return v === 0 ? Buffer.alloc(0) : Buffer.from([...varint(num << 3), ...varint(v)]);
}

function messageField(num: number, m: Buffer): Buffer {
  return Buffer.concat([Buffer.from([...varint((num << 3) | 2), ...varint(m.length)]), m]);
}

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

interface Group {
  nodeGroup: Buffer;
  forNode: Buffer;
  targetSize: Buffer;
  nodes: Buffer;
}

const byId = new Map<string, Group>();
const byNode = new Map<string, Group>();
const list: Buffer[] = [];
for (let gi = 0; gi < groups; gi++) {
  const name = `pool-${gi}`;
  const id = `${namespace}/${name}`;
  const max = perGroup * 2;
  // NodeGroup{id, minSize 0, maxSize, debug} as our server words it.
  const nodeGroup = Buffer.concat([
    stringField(1, id),
    varintField(3, max),
    stringField(4, `${id} (0:${max}, replicas=${perGroup})`),
  ]);
  const instances: Buffer[] = [];
  const g: Group = {
    nodeGroup,
    forNode: frame(messageField(1, nodeGroup)),
    targetSize: frame(varintField(1, perGroup)),
    nodes: Buffer.alloc(0),
  };
  for (let mi = 0; mi < perGroup; mi++) {
    const node = `${name}-m${mi}`;
    byNode.set(prefix + node, g);
    byNode.set(node, g);
    // Instance{id, status{instanceState: running}}
    instances.push(
      messageField(1, Buffer.concat([stringField(1, prefix + node), messageField(2, varintField(1, 1))])),
    );
  }
  g.nodes = frame(Buffer.concat(instances));
  byId.set(id, g);
  list.push(messageField(1, nodeGroup));
}
const nodeGroups = frame(Buffer.concat(list));
const empty = frame(Buffer.alloc(0));
const notServed = frame(messageField(1, Buffer.alloc(0)));

interface Refusal {
  code: number;
  message: string;
}
const UNIMPLEMENTED = 12;
const NOT_FOUND = 5;
const noPricing: Refusal = { code: UNIMPLEMENTED, message: 'pricing is not served' };
const noOptions: Refusal = { code: UNIMPLEMENTED, message: 'per-group autoscaling options are not served' };
const noTemplate: Refusal = { code: UNIMPLEMENTED, message: 'no template: the MachineClass does not exist' };
const noGroup: Refusal = { code: NOT_FOUND, message: 'node group is not served' };

const text = (b: Buffer | undefined): string => (b === undefined ? '' : b.toString('utf8'));

const answers: Record<string, (req: Buffer) => Buffer | Refusal> = {
  NodeGroups: () => nodeGroups,
  NodeGroupForNode: (req) => {
    const node = field(req, 1) ?? Buffer.alloc(0);
    return (byNode.get(text(field(node, 1))) ?? byNode.get(text(field(node, 2))))?.forNode ?? notServed;
  },
  PricingNodePrice: () => noPricing,
  PricingPodPrice: () => noPricing,
  GPULabel: () => empty,
  GetAvailableGPUTypes: () => empty,
  Cleanup: () => empty,
  Refresh: () => empty,
  NodeGroupTargetSize: (req) => byId.get(text(field(req, 1)))?.targetSize ?? noGroup,
  NodeGroupNodes: (req) => byId.get(text(field(req, 1)))?.nodes ?? noGroup,
  NodeGroupTemplateNodeInfo: () => noTemplate,
  NodeGroupGetOptions: () => noOptions,
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
    const answer = answers[method];
    calls.set(method, (calls.get(method) ?? 0) + 1);
    const res =
      answer === undefined
        ? { code: UNIMPLEMENTED, message: `unknown method ${method}` }
        : answer(body.subarray(5));
    if (Buffer.isBuffer(res)) {
      stream.respond(OK_HEADERS, { waitForTrailers: true });
      stream.once('wantTrailers', () => {
        stream.sendTrailers(OK_TRAILERS);
      });
      stream.end(res);
    } else {
      // Trailers-only: the status in the one HEADERS frame that ends the stream.
      stream.respond(
        { ...OK_HEADERS, 'grpc-status': String(res.code), 'grpc-message': encodeURIComponent(res.message) },
        { endStream: true },
      );
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
