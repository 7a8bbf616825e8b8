import { expect } from 'chai';

import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
} from '../../../../lib/api/types.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import { machineDeployment, machineSet } from '../builders.js';
import { machineControllerEnv, machineWithVm, rctx, vmNode } from './harness.js';

// A cloud event that hits a whole zone at once (EC2 reports 5 instances impaired together, their
// nodes still Ready): the machine controller fails them within the deployment's replacement
// budget, the rest wait, counted and reported.

const md = machineDeployment('md', 8);
md.metadata.annotations = { 'mcm-ts.io/max-unhealthy-replacements': '2' };
const ms = machineSet('ms', 8);
ms.metadata.ownerReferences = [
  {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    name: 'md',
    uid: md.metadata.uid ?? '',
    controller: true,
  },
];

function owned(name: string, impaired: boolean): Machine {
  const m = machineWithVm(name);
  m.metadata.ownerReferences = [
    { apiVersion: API_VERSION, kind: 'MachineSet', name: 'ms', uid: ms.metadata.uid ?? '', controller: true },
  ];
  if (impaired) m.metadata.annotations = { 'machine.mcm-ts.io/vm-failure': 'InstanceImpaired' };
  return m;
}

describe('MachineController: a zone-wide VM failure stays within the replacement budget (in-memory API)', () => {
  it('marks at most the budget Failed, counts and reports the others, and marks the next when one finishes', async () => {
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const impaired = new Set(['a', 'b', 'c', 'd', 'e']);
    const { env, mc } = await machineControllerEnv(
      names.map((n) => owned(n, impaired.has(n))),
      {
        seed: (e) => {
          e.seed(MachineDeploymentResource, md);
          e.seed(MachineSetResource, ms);
          for (const n of names) e.seed(CoreResources.nodes, vmNode(n));
        },
      },
    );
    try {
      for (const n of names) await mc.reconcile(`default/${n}`, rctx);
      const phase = (n: string): string =>
        env.api.peek<Machine>(MachineResource, n, 'default')?.status?.currentStatus?.phase ?? '';
      const failed = names.filter((n) => phase(n) === 'Failed');
      expect(failed, 'the budget of 2').to.deep.equal(['a', 'b']);
      expect(names.filter((n) => !impaired.has(n)).every((n) => phase(n) === 'Running')).to.equal(true);
      const waiting = env.recorder.events.filter((e) => e.reason === 'ReplacementBudgetExhausted');
      expect(waiting.map((e) => e.subject.name)).to.deep.equal(['c', 'd', 'e']);
      expect(waiting[0]?.message).to.contain('its provider reported its VM failed (InstanceImpaired)');
      const gauge = await env.registry.getSingleMetricAsString('mcm_machine_replacements_waiting');
      expect(gauge).to.contain(
        'mcm_machine_replacements_waiting{namespace="default",machine_deployment="md"} 3',
      );

      // One of the two is gone (replaced): the next waiting machine is marked, and only one.
      await env.api.delete(MachineResource, 'a', { namespace: 'default' });
      const noFinalizer = env.api.peek<Machine>(MachineResource, 'a', 'default');
      if (noFinalizer !== undefined) {
        noFinalizer.metadata.finalizers = [];
        await env.api.update(MachineResource, noFinalizer);
      }
      await env.settle();
      for (const n of ['c', 'd', 'e']) await mc.reconcile(`default/${n}`, rctx);
      expect(['c', 'd', 'e'].filter((n) => phase(n) === 'Failed')).to.deep.equal(['c']);

      // d's instance recovered before its turn (the poller withdrew the record): it stays Running
      // and no longer waits; e still does.
      await env.api.patch(
        MachineResource,
        'd',
        { metadata: { annotations: { 'machine.mcm-ts.io/vm-failure': null } } },
        { type: 'merge', namespace: 'default' },
      );
      await env.settle();
      await mc.reconcile('default/d', rctx);
      expect(phase('d')).to.equal('Running');
      expect(await env.registry.getSingleMetricAsString('mcm_machine_replacements_waiting')).to.contain(
        'mcm_machine_replacements_waiting{namespace="default",machine_deployment="md"} 1',
      );
    } finally {
      await env.stop();
    }
  });
});
