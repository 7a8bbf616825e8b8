import { expect } from 'chai';

import {
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
} from '../../../../lib/api/types.js';
import {
  MACHINE_EVENT_BATCH_MS,
  MachineDeploymentController,
  machineUpdateMatters,
} from '../../../../lib/controllers/machinedeployment/controller.js';
import { ControllerTestEnv } from '../env.js';
import { deployment, machineOf, NS, ownedSet } from './fixtures.js';

describe('MachineDeployment: which machine updates enqueue the deployment', () => {
  const ms = ownedSet(deployment('d', 1), 1);
  const base = machineOf(ms, 'm', { node: 'n1' });
  const changed = (fn: (m: Machine) => void): Machine => {
    const m = structuredClone(base);
    fn(m);
    return m;
  };
  const cases: { name: string; update: Machine; matters: boolean }[] = [
    {
      name: 'lastOperation heartbeat: no',
      update: changed((m) => {
        (m.status ??= {}).lastOperation = {
          description: 'still running',
          lastUpdateTime: '2026-11-21T10:00:00Z',
        };
      }),
      matters: false,
    },
    {
      name: 'unrelated annotation or label: no',
      update: changed((m) => {
        m.metadata.annotations = { note: 'x' };
        (m.metadata.labels ??= {}).extra = 'y';
      }),
      matters: false,
    },
    {
      name: 'Pending to Running (availability): yes',
      update: changed((m) => {
        (m.status ??= {}).currentStatus = { phase: 'Pending' };
      }),
      matters: true,
    },
    {
      name: 'Failed (autoscaler entries drop it): yes',
      update: changed((m) => {
        (m.status ??= {}).currentStatus = { phase: 'Failed' };
      }),
      matters: true,
    },
    {
      name: 'deletion requested: yes',
      update: changed((m) => {
        m.metadata.deletionTimestamp = '2026-11-21T10:00:00Z';
      }),
      matters: true,
    },
    {
      name: 'node label: yes',
      update: changed((m) => {
        (m.metadata.labels ??= {}).node = 'n2';
      }),
      matters: true,
    },
    {
      name: 'preservation: yes',
      update: changed((m) => {
        ((m.status ??= {}).currentStatus ??= { phase: 'Running' }).preserveExpiryTime =
          '2026-11-22T00:00:00Z';
      }),
      matters: true,
    },
    {
      name: 'autoscaler deletion mark: yes',
      update: changed((m) => {
        m.metadata.annotations = { 'machine.sapcloud.io/marked-for-deletion-time': '2026-11-21T10:00:00Z' };
      }),
      matters: true,
    },
    {
      name: 'a rebalance recommendation recorded (its voluntary replacement starts in the pass): yes',
      update: changed((m) => {
        m.metadata.annotations = { 'machine.mcm-ts.io/rebalance-recommended': '2026-11-21T10:00:00Z' };
      }),
      matters: true,
    },
    {
      name: 'another controller: yes',
      update: changed((m) => {
        const ref = m.metadata.ownerReferences?.[0];
        if (ref !== undefined) ref.uid = 'other';
      }),
      matters: true,
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(machineUpdateMatters(base, tc.update)).to.equal(tc.matters);
    });
  }

  it('a heartbeat through the cache leaves the queue empty; a phase change enqueues the deployment', async () => {
    const env = new ControllerTestEnv();
    try {
      const mcd = deployment('d', 1);
      const set = ownedSet(mcd, 1);
      env.seed(MachineDeploymentResource, mcd);
      env.seed(MachineSetResource, set);
      env.seed(MachineResource, machineOf(set, 'm', { phase: 'Pending' }));
      const controller = new MachineDeploymentController(env.ctx);
      await env.start();
      const queue = controller.controller.queue;
      const first = await queue.get(); // the initial add
      if (!first.shutdown) queue.done(first.item);
      expect(queue.len()).to.equal(0);

      const m = env.api.peek<Machine>(MachineResource, 'm', NS) as Machine;
      (m.status ??= {}).lastOperation = { description: 'Creating machine on cloud provider' };
      const updated = await env.api.updateStatus(MachineResource, m);
      await env.settle();
      await env.clock.advance(MACHINE_EVENT_BATCH_MS);
      expect(queue.len(), 'after a heartbeat').to.equal(0);

      ((updated.status ??= {}).currentStatus ??= { phase: 'Pending' }).phase = 'Running';
      await env.api.updateStatus(MachineResource, updated);
      await env.settle();
      // Machine events wake the deployment a moment later, so that a burst shares one pass.
      expect(queue.len(), 'right after Pending -> Running').to.equal(0);
      await env.clock.advance(MACHINE_EVENT_BATCH_MS);
      expect(queue.len(), 'after Pending -> Running').to.equal(1);
      queue.shutDown();
    } finally {
      await env.stop();
    }
  });
});
