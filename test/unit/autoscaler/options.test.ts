import { expect } from 'chai';

import {
  decodeDefaults,
  encodeGetOptionsResponse,
  readGetOptionsRequest,
} from '../../../lib/autoscaler/options-wire.js';
import {
  OptionAnnotation,
  mergeOptions,
  parseOptionAnnotations,
  type WireOptions,
} from '../../../lib/autoscaler/options.js';
import { cloudProviderService } from '../../../lib/autoscaler/proto.js';

const DEFAULTS: WireOptions = {
  scaleDownUtilizationThreshold: 0.5,
  scaleDownGpuUtilizationThreshold: 0.5,
  zeroOrMaxNodeScaling: false,
  ignoreDaemonSetsUtilization: true,
  scaleDownUnneededNs: 600e9,
  scaleDownUnreadyNs: 1200e9,
  maxNodeProvisionNs: 900e9,
};

describe('autoscaler per-group options: annotations', () => {
  it("reads gardener's five annotations with their units (ratio, Go durations)", () => {
    const r = parseOptionAnnotations({
      [OptionAnnotation.ScaleDownUtilizationThreshold]: '0.3',
      [OptionAnnotation.ScaleDownGpuUtilizationThreshold]: '0.7',
      [OptionAnnotation.ScaleDownUnneededTime]: '10s',
      [OptionAnnotation.ScaleDownUnreadyTime]: '1h30m',
      [OptionAnnotation.MaxNodeProvisionTime]: '20m',
    });
    expect(r.problems).to.deep.equal([]);
    expect(r.overrides).to.deep.equal({
      scaleDownUtilizationThreshold: 0.3,
      scaleDownGpuUtilizationThreshold: 0.7,
      scaleDownUnneededMs: 10_000,
      scaleDownUnreadyMs: 5_400_000,
      maxNodeProvisionMs: 1_200_000,
    });
  });

  it('treats an empty value as unset (gardener writes every key) and reports a bad one', () => {
    const r = parseOptionAnnotations({
      [OptionAnnotation.ScaleDownUtilizationThreshold]: '',
      [OptionAnnotation.ScaleDownGpuUtilizationThreshold]: '1.5',
      [OptionAnnotation.ScaleDownUnneededTime]: 'ten minutes',
      [OptionAnnotation.ScaleDownUnreadyTime]: '-5m',
      [OptionAnnotation.MaxNodeProvisionTime]: '',
    });
    expect(r.overrides).to.deep.equal({});
    expect(r.problems).to.have.length(3);
    expect(r.problems.join('\n')).to.match(/scale-down-gpu-utilization-threshold: "1.5" is not a ratio/);
    expect(r.problems.join('\n')).to.match(/scale-down-unneeded-time: "ten minutes" is not a Go duration/);
    expect(r.problems.join('\n')).to.match(/scale-down-unready-time: "-5m" is negative/);
  });

  it('merges over the defaults, echoing every option the group does not set', () => {
    const merged = mergeOptions(DEFAULTS, { scaleDownUnneededMs: 10_000 });
    expect(merged).to.deep.equal({ ...DEFAULTS, scaleDownUnneededNs: 10e9 });
  });
});

describe('autoscaler per-group options: wire', () => {
  const def = cloudProviderService().NodeGroupGetOptions;
  if (def === undefined) throw new Error('no NodeGroupGetOptions');

  it('reads the id and the raw defaults of a request without decoding the rest', () => {
    const req = Buffer.concat([
      Buffer.from([0x0a, 3]),
      Buffer.from('a/b'),
      Buffer.from([0x12, 2, 0x30, 1]), // defaults: zeroOrMaxNodeScaling = true
      Buffer.from([0x18, 0x96, 0x01]), // an unknown varint field 3: skipped
    ]);
    const r = def.requestDeserialize(req) as { id: string; defaults: Buffer };
    expect(r.id).to.equal('a/b');
    expect([...r.defaults]).to.deep.equal([0x30, 1]);
    expect(decodeDefaults(r.defaults).zeroOrMaxNodeScaling).to.equal(true);
  });

  it('refuses truncated bytes', () => {
    expect(() => readGetOptionsRequest(Buffer.from([0x0a, 9, 0x61]))).to.throw(/truncated/);
  });

  it('answers no options as an empty message, and options in both the 1.35+ and the <= 1.34 fields', () => {
    expect(encodeGetOptionsResponse(undefined)).to.have.length(0);
    const bytes = encodeGetOptionsResponse({ ...DEFAULTS, scaleDownUnneededNs: 10_500_000_000 });
    // Decode the answer's inner message (field 1) as the defaults decoder reads options.
    const inner = readGetOptionsRequest(
      Buffer.concat([Buffer.from([0x12]), lengthPrefix(bytes.subarray(2))]),
    );
    const back = decodeDefaults(inner.defaults);
    expect(back.scaleDownUnneededNs).to.equal(10_500_000_000);
    const legacyOnly = decodeDefaults(Buffer.from([0x1a, 0x06, 0x08, 0x80, 0xc8, 0xaf, 0xa0, 0x25])); // field 3 {duration: 10e9}
    expect(legacyOnly.scaleDownUnneededNs).to.equal(10e9);
  });
});

function lengthPrefix(b: Buffer): Buffer {
  return Buffer.concat([Buffer.from([b.length]), b]);
}
