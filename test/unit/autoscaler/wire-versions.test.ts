import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';
import protobuf from 'protobufjs';

import { caWireResponses } from '../../../hack/ca-wire/responses.js';
import { decodeDefaults, encodeGetOptionsResponse } from '../../../lib/autoscaler/options-wire.js';
import type { WireOptions } from '../../../lib/autoscaler/options.js';
import { cloudProviderService, decodePodRequests } from '../../../lib/autoscaler/proto.js';

// The externalgrpc wire of every pinned cluster-autoscaler version, as each version's own Go client
// wrote and read it (hack/ca-wire.sh; test/fixtures/externalgrpc/README.md). The requests are
// decoded with the server's service definition; the answers are the bytes our encoders write, and
// read-back.json is what the client made of them.

const FIXTURES = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  '..',
  'test',
  'fixtures',
  'externalgrpc',
);

/** Where a version puts a value that 1.35 moved (kubernetes/autoscaler#8660). */
type Shape = 'legacy' | 'both' | 'new';

interface VersionWire {
  version: string;
  /** Pricing window: metav1.Time at 2/3 (legacy), Timestamp at 4/5 (node) and 5/6 (pod) (new). */
  window: Shape;
  /** The pod: an embedded v1.Pod at 1 (legacy), pod_bytes at 4 (new). */
  pod: Shape;
  /** GetOptions defaults' durations: metav1.Duration at 3–5 (legacy), Duration at 8–10 (new). */
  durations: Shape;
  /** The version's options struct beyond the proto's seven fields: zero whenever a provider answers. */
  unanswered: Record<string, number | boolean>;
}

const VERSIONS: VersionWire[] = [
  { version: '1.33.0', window: 'legacy', pod: 'legacy', durations: 'legacy', unanswered: {} },
  {
    version: '1.34.5',
    window: 'both',
    pod: 'both',
    durations: 'both',
    unanswered: { AllowNonAtomicScaleUpToMax: false },
  },
  {
    version: '1.35.2',
    window: 'new',
    pod: 'new',
    durations: 'new',
    unanswered: { MaxNodeStartupTime: 0, AllowNonAtomicScaleUpToMax: false },
  },
  {
    version: '1.36.1',
    window: 'new',
    pod: 'new',
    durations: 'new',
    unanswered: { MaxNodeStartupTime: 0, AllowNonAtomicScaleUpToMax: false },
  },
];

// The generator's inputs (hack/ca-wire/main.go), the same for every version.
const WINDOW_START = '2026-01-02T03:04:05.123456789Z';
const WINDOW_END = '2026-01-02T04:04:05.123456789Z';
const START_SECONDS = Date.UTC(2026, 0, 2, 3, 4, 5) / 1000;
const END_SECONDS = START_SECONDS + 3600;
const NANOS = 123456789;
const NODE = {
  providerID: 'aws:///eu-west-1a/i-0123456789abcdef0',
  name: 'ip-10-0-0-1.ec2.internal',
  labels: { 'node.kubernetes.io/instance-type': 'm5.large', 'topology.kubernetes.io/zone': 'eu-west-1a' },
  annotations: { 'example.com/wire': 'node' },
};
const requests = (cpu: string, memory: string): Record<string, { string: string }> => ({
  cpu: { string: cpu },
  memory: { string: memory },
});
const POD = {
  metadata: { name: 'web-0', namespace: 'default' },
  spec: {
    containers: [
      { name: 'app', resources: { requests: requests('500m', '256Mi') } },
      { name: 'sidecar', resources: { requests: requests('100m', '64Mi') } },
    ],
  },
};
const SENT_DEFAULTS: WireOptions = {
  scaleDownUtilizationThreshold: 0.5,
  scaleDownGpuUtilizationThreshold: 0.6,
  zeroOrMaxNodeScaling: false,
  ignoreDaemonSetsUtilization: true,
  scaleDownUnneededNs: 600e9,
  scaleDownUnreadyNs: 1200e9,
  maxNodeProvisionNs: 900e9,
};

// What the Go clients must have read back from the answers (hack/ca-wire/responses.ts), in the
// Go options struct's names and units (durations in nanoseconds).
const READ_OPTIONS = {
  ScaleDownUtilizationThreshold: 0.3,
  ScaleDownGpuUtilizationThreshold: 0.6,
  ScaleDownUnneededTime: 10e9,
  ScaleDownUnreadyTime: 1200e9,
  MaxNodeProvisionTime: 900e9,
  ZeroOrMaxNodeScaling: false,
  IgnoreDaemonSetsUtilization: true,
};

// Independent of the server's Pod subset: the upstream field numbers (k8s.io/api core/v1).
const podType = protobuf
  .parse(
    `syntax = "proto2";
     package wiretest;
     message Pod { optional Meta metadata = 1; optional Spec spec = 2; }
     message Meta { optional string name = 1; optional string namespace = 3; }
     message Spec { repeated Container containers = 2; }
     message Container { optional string name = 1; optional Resources resources = 8; }
     message Resources { map<string, Quantity> requests = 2; }
     message Quantity { optional string string = 1; }`,
    { keepCase: true },
  )
  .root.lookupType('wiretest.Pod');

interface Time {
  seconds: number;
  nanos: number;
}

interface NodePriceRequest {
  node: typeof NODE | null;
  startTime: Time | null;
  endTime: Time | null;
  startTimestamp: Time | null;
  endTimestamp: Time | null;
}

interface PodPriceRequest {
  pod: Buffer;
  pod_bytes: Buffer;
  startTime: Time | null;
  endTime: Time | null;
  startTimestamp: Time | null;
  endTimestamp: Time | null;
}

interface GetOptionsRequest {
  id: string;
  defaults: Buffer;
}

interface ReadBack {
  version: string;
  sent: { windowStart: string; windowEnd: string; defaults: Record<string, unknown> };
  nodeGroups: unknown[];
  nodePrice: { value?: unknown; error?: string };
  podPrice: { value?: unknown; error?: string };
  options: { value?: unknown; error?: string };
  calls: Record<string, number>;
}

function fixture(version: string, file: string): Buffer {
  return readFileSync(path.join(FIXTURES, version, file));
}

function decodeRequest<T>(method: string, bytes: Buffer): T {
  const def = cloudProviderService()[method];
  if (def === undefined) throw new Error(`the service has no method ${method}`);
  return def.requestDeserialize(bytes) as T;
}

interface WireField {
  field: number;
  /** A varint's value. */
  value?: number;
  /** A length-delimited field's bytes. */
  payload?: Buffer;
}

/** A message's top-level fields, in wire order. */
function fieldsOf(buf: Buffer): WireField[] {
  const out: WireField[] = [];
  let i = 0;
  const varint = (): number => {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      const b = buf[i++];
      if (b === undefined) throw new RangeError('truncated varint');
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value;
    }
  };
  while (i < buf.length) {
    const tag = varint();
    const field = Math.floor(tag / 8);
    const wire = tag % 8;
    if (wire === 0) {
      out.push({ field, value: varint() });
    } else if (wire === 1 || wire === 5) {
      i += wire === 1 ? 8 : 4;
      out.push({ field });
    } else if (wire === 2) {
      const len = varint();
      out.push({ field, payload: buf.subarray(i, i + len) });
      i += len;
    } else {
      throw new RangeError(`wire type ${wire}`);
    }
  }
  return out;
}

const fieldNumbers = (buf: Buffer): number[] => fieldsOf(buf).map((f) => f.field);

const SHAPE_NAMES: Record<Shape, string> = {
  legacy: 'the fields up to 1.34',
  both: 'the fields up to 1.34 and the 1.35 ones',
  new: 'the 1.35 fields',
};

const legacyExpected = (shape: Shape): boolean => shape !== 'new';
const newExpected = (shape: Shape): boolean => shape !== 'legacy';

for (const v of VERSIONS) {
  describe(`externalgrpc wire of cluster-autoscaler ${v.version} (bytes of its own client)`, () => {
    const readBack = JSON.parse(fixture(v.version, 'read-back.json').toString('utf8')) as ReadBack;

    it('was recorded with the inputs this test asserts', () => {
      expect(readBack.version).to.equal(v.version);
      expect(readBack.sent.windowStart).to.equal(WINDOW_START);
      expect(readBack.sent.windowEnd).to.equal(WINDOW_END);
      expect(readBack.sent.defaults).to.include({
        ScaleDownUtilizationThreshold: SENT_DEFAULTS.scaleDownUtilizationThreshold,
        ScaleDownGpuUtilizationThreshold: SENT_DEFAULTS.scaleDownGpuUtilizationThreshold,
        ScaleDownUnneededTime: SENT_DEFAULTS.scaleDownUnneededNs,
        ScaleDownUnreadyTime: SENT_DEFAULTS.scaleDownUnreadyNs,
        MaxNodeProvisionTime: SENT_DEFAULTS.maxNodeProvisionNs,
        ZeroOrMaxNodeScaling: SENT_DEFAULTS.zeroOrMaxNodeScaling,
        IgnoreDaemonSetsUtilization: SENT_DEFAULTS.ignoreDaemonSetsUtilization,
      });
      expect(readBack.calls).to.deep.equal({
        NodeGroups: 1,
        PricingNodePrice: 1,
        PricingPodPrice: 1,
        NodeGroupGetOptions: 1,
      });
    });

    it(`PricingNodePrice: the node, and the window in ${SHAPE_NAMES[v.window]}`, () => {
      const req = decodeRequest<NodePriceRequest>(
        'PricingNodePrice',
        fixture(v.version, 'PricingNodePrice.bin'),
      );
      expect(req.node).to.deep.equal(NODE);
      // metav1.Time goes on the wire in whole seconds (its protobuf form drops the nanoseconds).
      const legacy = legacyExpected(v.window);
      expect(req.startTime).to.deep.equal(legacy ? { seconds: START_SECONDS, nanos: 0 } : null);
      expect(req.endTime).to.deep.equal(legacy ? { seconds: END_SECONDS, nanos: 0 } : null);
      const fresh = newExpected(v.window);
      expect(req.startTimestamp).to.deep.equal(fresh ? { seconds: START_SECONDS, nanos: NANOS } : null);
      expect(req.endTimestamp).to.deep.equal(fresh ? { seconds: END_SECONDS, nanos: NANOS } : null);
    });

    it(`PricingPodPrice: the pod's bytes and the window in ${SHAPE_NAMES[v.pod]}`, () => {
      const req = decodeRequest<PodPriceRequest>(
        'PricingPodPrice',
        fixture(v.version, 'PricingPodPrice.bin'),
      );
      const bytes = newExpected(v.pod) ? req.pod_bytes : req.pod;
      expect(podType.toObject(podType.decode(bytes), { defaults: false })).to.deep.equal(POD);
      // What the price book is given: the containers' requests added up.
      expect(decodePodRequests(bytes)).to.deep.equal({
        name: 'default/web-0',
        cpu: 0.6,
        memory: 320 * 2 ** 20,
      });
      if (v.pod === 'both') expect(req.pod.equals(req.pod_bytes), 'the same bytes in both').to.equal(true);
      else expect((v.pod === 'new' ? req.pod : req.pod_bytes).length, 'the other field').to.equal(0);
      const legacy = legacyExpected(v.window);
      expect(req.startTime).to.deep.equal(legacy ? { seconds: START_SECONDS, nanos: 0 } : null);
      expect(req.endTime).to.deep.equal(legacy ? { seconds: END_SECONDS, nanos: 0 } : null);
      const fresh = newExpected(v.window);
      expect(req.startTimestamp).to.deep.equal(fresh ? { seconds: START_SECONDS, nanos: NANOS } : null);
      expect(req.endTimestamp).to.deep.equal(fresh ? { seconds: END_SECONDS, nanos: NANOS } : null);
    });

    it(`NodeGroupGetOptions: the group id, and the defaults with their durations in ${SHAPE_NAMES[v.durations]}`, () => {
      const req = decodeRequest<GetOptionsRequest>(
        'NodeGroupGetOptions',
        fixture(v.version, 'NodeGroupGetOptions.bin'),
      );
      expect(req.id).to.equal('ns/workers');
      const present = fieldNumbers(req.defaults);
      for (const f of [3, 4, 5])
        expect(present.includes(f), `field ${f}`).to.equal(legacyExpected(v.durations));
      for (const f of [8, 9, 10])
        expect(present.includes(f), `field ${f}`).to.equal(newExpected(v.durations));
      expect(decodeDefaults(req.defaults)).to.deep.equal(SENT_DEFAULTS);
    });

    it('our encoders still write exactly the answers the client was given', () => {
      const recorded = readdirSync(path.join(FIXTURES, v.version, 'responses')).sort();
      const answers = caWireResponses();
      expect(recorded).to.deep.equal(
        Object.keys(answers)
          .map((m) => `${m}.bin`)
          .sort(),
      );
      for (const [method, bytes] of Object.entries(answers)) {
        expect(bytes.toString('hex'), `${method} (rerun hack/ca-wire.sh)`).to.equal(
          fixture(v.version, `responses/${method}.bin`).toString('hex'),
        );
      }
    });

    it('the client read our answers as meant: the group, price 1.5, options with unneeded 10 s', () => {
      expect(readBack.nodeGroups).to.deep.equal([{ id: 'ns/workers', minSize: 0, maxSize: 10 }]);
      expect(readBack.nodePrice).to.deep.equal({ value: 1.5 });
      expect(readBack.podPrice).to.deep.equal({ value: 1.5 });
      // The struct's fields with no proto field come out zero (kubernetes/autoscaler#10245).
      expect(readBack.options).to.deep.equal({ value: { ...READ_OPTIONS, ...v.unanswered } });
    });
  });
}

describe('externalgrpc GetOptions answers for every version', () => {
  // 1.33 reads only the metav1.Duration fields and 1.34 falls back to them when a Duration field is
  // absent; neither checks for nil, so an answer without one of them crashes the autoscaler (seen
  // with hack/ca-wire's clients: nil pointer dereference in GetOptions). 1.35+ read only 8 to 10.
  const cases: [string, Partial<WireOptions>][] = [
    ['the fixtures’ options', {}],
    ['zero durations', { scaleDownUnneededNs: 0, scaleDownUnreadyNs: 0, maxNodeProvisionNs: 0 }],
    [
      'sub-second durations',
      { scaleDownUnneededNs: 1, scaleDownUnreadyNs: 999_999_999, maxNodeProvisionNs: 1.5e9 },
    ],
  ];
  for (const [name, change] of cases) {
    it(`carry every duration in both shapes: ${name}`, () => {
      const options: WireOptions = { ...SENT_DEFAULTS, ...change };
      const answer = fieldsOf(encodeGetOptionsResponse(options));
      expect(answer.map((f) => f.field)).to.deep.equal([1]);
      const inner = answer[0]?.payload ?? Buffer.alloc(0);
      const fields = fieldsOf(inner);
      expect(fields.map((f) => f.field)).to.include.members([3, 4, 5, 8, 9, 10]);
      // metav1.Duration {int64 duration = 1}: what 1.33 and 1.34 (as a fallback) read.
      const legacy = (n: number): number[] =>
        fields
          .filter((f) => f.field === n)
          .flatMap((f) => fieldsOf(f.payload ?? Buffer.alloc(0)).map((d) => d.value ?? NaN));
      expect(legacy(3), 'field 3').to.deep.equal([options.scaleDownUnneededNs]);
      expect(legacy(4), 'field 4').to.deep.equal([options.scaleDownUnreadyNs]);
      expect(legacy(5), 'field 5').to.deep.equal([options.maxNodeProvisionNs]);
      expect(decodeDefaults(inner)).to.deep.equal(options);
    });
  }
});
