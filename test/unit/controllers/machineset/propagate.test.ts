import { expect } from 'chai';

import { propagationPatch } from '../../../../lib/controllers/machineset/propagate.js';
import { machine, machineSet } from '../builders.js';

describe('MachineSet propagation of the node template to its machines', () => {
  it('treats the empty template gardener’s provider writes back as no template at all', () => {
    const ms = machineSet('pool', 1);
    delete ms.spec?.template?.spec?.nodeTemplate;
    const m = machine('pool-a', { owner: ms });
    // What gardener's Go machine controller sends when it updates a machine without a template:
    // a struct that cannot be omitted, with a null timestamp.
    if (m.spec !== undefined)
      m.spec.nodeTemplate = { metadata: { creationTimestamp: null }, spec: {} } as never;
    expect(propagationPatch(ms, m)).to.equal(undefined);
  });

  it('still writes a template whose content differs', () => {
    const ms = machineSet('pool', 1);
    const m = machine('pool-a', { owner: ms });
    if (m.spec !== undefined)
      m.spec.nodeTemplate = {
        metadata: { creationTimestamp: null, labels: { role: 'old' } },
        spec: {},
      } as never;
    expect(propagationPatch(ms, m)).to.deep.equal({
      spec: { nodeTemplate: { metadata: { labels: { role: 'worker' } } } },
    });
  });

  it('removes a template the set no longer has', () => {
    const ms = machineSet('pool', 1);
    const m = machine('pool-a', { owner: ms });
    delete ms.spec?.template?.spec?.nodeTemplate;
    expect(propagationPatch(ms, m)).to.deep.equal({ spec: { nodeTemplate: null } });
  });
});
