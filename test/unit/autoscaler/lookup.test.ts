import { expect } from 'chai';

import { API_VERSION, MachineResource, type Machine } from '../../../lib/api/types.js';
import { GroupLookup } from '../../../lib/autoscaler/lookup.js';
import { ControllerTestEnv } from '../controllers/env.js';

const machine = (name: string, providerID: string): Machine => ({
  apiVersion: API_VERSION,
  kind: MachineResource.kind,
  metadata: { name, namespace: 'default', uid: `uid-${name}` },
  spec: { class: { kind: 'MachineClass', name: 'c' }, providerID },
});

describe('autoscaler lookup: the machine behind a node', () => {
  it('finds a machine by the VM its providerID names, whichever form the kubelet registered', async () => {
    const env = new ControllerTestEnv();
    const lookup = new GroupLookup(env.informers, 'default', [], env.clock, env.logger);
    env.seed(
      MachineResource,
      machine('m-1', 'aws:///eu-west-1/i-0abc'),
      machine('m-2', 'aws:///eu-west-1/i-0def'),
    );
    await env.start();
    try {
      const named = (providerID: string): string | undefined =>
        lookup.machineForNode({ providerID, name: 'ip-10-0-0-1.ec2.internal', labels: {} })?.metadata.name;
      // The driver recorded the region; a kubelet on AWS registers the zone.
      expect(named('aws:///eu-west-1a/i-0abc')).to.equal('m-1');
      expect(named('aws:///eu-west-1/i-0def')).to.equal('m-2');
      expect(named('aws:///eu-west-1a/i-0999'), 'another VM').to.equal(undefined);
    } finally {
      await env.stop();
    }
  });
});
