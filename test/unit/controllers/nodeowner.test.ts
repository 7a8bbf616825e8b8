import { expect } from 'chai';

import { nodeBelongsTo, sameVM, vmKey } from '../../../lib/controllers/machines.js';
import type { Node } from '../../../lib/kube/types.js';
import { machine } from './builders.js';

describe('node ownership (pure)', () => {
  const cases: [string, string, boolean][] = [
    ['virtual://zone-a/m1', 'virtual://zone-a/m1', true],
    ['aws:///eu-west-1/i-0abc', 'aws:///eu-west-1a/i-0abc', true],
    ['aws:///eu-west-1/i-0abc', 'aws:///eu-west-1a/i-0abd', false],
    ['aws:///eu-west-1/i-0abc', 'gce:///eu-west-1a/i-0abc', false],
    ['', '', false],
    ['aws:///eu-west-1/i-0abc', '', false],
    ['i-0abc', 'x/i-0abc', false],
  ];
  it('keys a providerID by scheme and last segment, so equal keys are the same VM', () => {
    expect(vmKey('aws:///eu-west-1/i-0abc')).to.equal('aws://i-0abc');
    expect(vmKey('aws:///eu-west-1a/i-0abc')).to.equal('aws://i-0abc');
    expect(vmKey('virtual://zone-a/m1')).to.equal('virtual://m1');
    expect(vmKey('i-0abc')).to.equal('i-0abc');
    expect(vmKey('aws:///eu-west-1/')).to.equal('aws:///eu-west-1/');
  });
  for (const [a, b, want] of cases) {
    it(`sameVM(${JSON.stringify(a)}, ${JSON.stringify(b)}) is ${want}`, () => {
      expect(sameVM(a, b)).to.equal(want);
      expect(sameVM(b, a)).to.equal(want);
    });
  }

  const node = (labels: Record<string, string>, providerID?: string): Node => ({
    metadata: { name: 'ip-10-0-0-7', labels },
    ...(providerID === undefined ? {} : { spec: { providerID } }),
  });
  const m1 = machine('m1');
  m1.spec = { ...m1.spec, providerID: 'aws:///eu-west-1/i-1' };

  it('a node whose machine-name label names the machine belongs to it', () => {
    expect(nodeBelongsTo(node({ 'node.gardener.cloud/machine-name': 'm1' }), m1)).to.equal(true);
  });
  it('a node another machine claims does not, even with the same providerID', () => {
    expect(
      nodeBelongsTo(node({ 'node.gardener.cloud/machine-name': 'm2' }, 'aws:///eu-west-1a/i-1'), m1),
    ).to.equal(false);
  });
  it('an unlabelled node belongs to it only when its providerID is the machine’s VM', () => {
    expect(nodeBelongsTo(node({}, 'aws:///eu-west-1a/i-1'), m1)).to.equal(true);
    expect(nodeBelongsTo(node({}, 'aws:///eu-west-1a/i-2'), m1)).to.equal(false);
    expect(nodeBelongsTo(node({}), m1), 'a name alone proves nothing').to.equal(false);
  });
});
