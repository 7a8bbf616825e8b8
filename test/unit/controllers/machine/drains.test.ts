import { expect } from 'chai';

import { MachineResource, type Machine } from '../../../../lib/api/types.js';
import { TooManyRequestsError } from '../../../../lib/kube/errors.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Pod, PodDisruptionBudget } from '../../../../lib/kube/types.js';
import { eventually } from '../../helpers/eventually.js';
import type { ControllerTestEnv } from '../env.js';
import { DriverOperation } from '../../../../lib/driver/driver.js';
import {
  driverCalls,
  machineControllerEnv as setup,
  machineWithVm as machine,
  rctx,
  vmNode,
} from './harness.js';

/** A pod with a volume on the node: the drain keeps in-memory state for it (one at a time). */
function podWithVolume(nodeName: string): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'db', namespace: 'default', uid: 'uid-db', labels: { app: 'db' } },
    spec: {
      nodeName,
      containers: [{ name: 'c', image: 'i' }],
      volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'data' } }],
    },
    status: { phase: 'Running' },
  };
}

function pdb(name: string): PodDisruptionBudget {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: { name, namespace: 'default' },
    spec: { minAvailable: 1, selector: { matchLabels: { app: 'db' } } },
    status: { disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1 },
  };
}

/** Every eviction is refused, as a PodDisruptionBudget that allows no disruption does. */
function refuseEvictions(env: ControllerTestEnv): void {
  env.target.react((a) =>
    a.subresource === 'eviction'
      ? new TooManyRequestsError(
          'the budget allows no disruption',
          429,
          'TooManyRequests',
          undefined,
          undefined,
        )
      : undefined,
  );
}

/** The drain series of a machine now exported. */
async function drainSeries(env: ControllerTestEnv, name: string): Promise<string[]> {
  const text = await env.registry.metrics();
  return text
    .split('\n')
    .filter(
      (l) =>
        (l.startsWith('mcm_machine_drain_blocking_pods{') ||
          l.startsWith('mcm_machine_drain_force_in_seconds{')) &&
        l.includes(`machine="${name}"`),
    );
}

async function seedNodeAndPod(
  env: ControllerTestEnv,
  name: string,
  labels: Record<string, string> = {},
): Promise<void> {
  env.seed(CoreResources.nodes, vmNode(name, labels));
  env.target.seed(CoreResources.pods, podWithVolume(name));
  await env.settle();
  await eventually(() => env.informers.drain?.pods.list().length === 1, 'the pod cache has the pod');
}

async function deleteNode(env: ControllerTestEnv, name: string): Promise<void> {
  await env.target.delete(CoreResources.nodes, name);
  await env.settle();
}

describe('MachineController: a drain leaves nothing behind however it ends (in-memory API)', () => {
  it('a deletion drain whose node vanishes ends there: its series go and its in-memory state is forgotten', async () => {
    const { env, mc } = await setup([machine('m1', { deleting: true })]);
    try {
      await seedNodeAndPod(env, 'm1');
      refuseEvictions(env);
      const blocked = await mc.reconcile('default/m1', rctx);
      expect(blocked.requeueAfter, 'the drain waits').to.be.a('number');
      expect(await drainSeries(env, 'm1'), 'a blocked drain exports its series').to.have.length(2);
      expect(mc.deps.drainer?.holds('default/m1'), 'the pod with a volume is in progress').to.equal(true);

      await deleteNode(env, 'm1');
      // The machine's own delete event (after its finalizer goes) would clear them too: hold it back.
      env.api.holdWatches();
      await mc.reconcile('default/m1', rctx);
      expect(env.api.all(MachineResource), 'the deletion went on to the end').to.have.length(0);
      expect(await drainSeries(env, 'm1')).to.deep.equal([]);
      expect(mc.deps.drainer?.holds('default/m1')).to.equal(false);
      env.api.releaseWatches();
    } finally {
      await env.stop();
    }
  });

  it('a machine that disappears while its node drains (its finalizer removed by hand) takes its series and drain state with it', async () => {
    const { env, mc } = await setup([machine('m1', { deleting: true })]);
    try {
      await seedNodeAndPod(env, 'm1');
      refuseEvictions(env);
      await mc.reconcile('default/m1', rctx);
      expect(await drainSeries(env, 'm1')).to.have.length(2);
      expect(mc.deps.drainer?.holds('default/m1')).to.equal(true);

      await env.api.patch(
        MachineResource,
        'm1',
        { metadata: { finalizers: null } },
        {
          type: 'merge',
          namespace: 'default',
        },
      );
      await env.settle();
      expect(env.informers.machines.list(), 'the machine is gone').to.have.length(0);
      expect(await drainSeries(env, 'm1')).to.deep.equal([]);
      expect(mc.deps.drainer?.holds('default/m1')).to.equal(false);
    } finally {
      await env.stop();
    }
  });

  it('an in-place drain whose node goes away ends: its series go and its in-memory state is forgotten', async () => {
    const { env, mc } = await setup([machine('m1')]);
    try {
      await seedNodeAndPod(env, 'm1', {
        'node.machine.sapcloud.io/candidate-for-update': 'true',
        'node.machine.sapcloud.io/selected-for-update': 'true',
      });
      refuseEvictions(env);
      // Candidate, then selected, then the drain.
      for (let i = 0; i < 3; i++) {
        await mc.reconcile('default/m1', rctx);
        await env.settle();
      }
      expect(await drainSeries(env, 'm1'), 'the update drain is blocked').to.have.length(2);
      expect(mc.deps.drainer?.holds('inplace:default/m1')).to.equal(true);

      await deleteNode(env, 'm1');
      await mc.reconcile('default/m1', rctx);
      expect(env.api.all(MachineResource), 'the machine stays').to.have.length(1);
      expect(await drainSeries(env, 'm1')).to.deep.equal([]);
      expect(mc.deps.drainer?.holds('inplace:default/m1')).to.equal(false);
    } finally {
      await env.stop();
    }
  });
});

describe('MachineController: the drain of an interrupted machine (in-memory API)', () => {
  it('respects a PodDisruptionBudget until the interruption deadline of the VM, then deletes the pods without eviction and goes on to the VM', async () => {
    const m1 = machine('m1', { deleting: true });
    const { env, mc } = await setup([m1]);
    try {
      const deadline = env.clock.now() + 90_000;
      await env.api.patch(
        MachineResource,
        'm1',
        {
          metadata: {
            annotations: { 'machine.mcm-ts.io/interruption-deadline': new Date(deadline).toISOString() },
          },
        },
        { type: 'merge', namespace: 'default' },
      );
      await seedNodeAndPod(env, 'm1');
      refuseEvictions(env);
      const blocked = await mc.reconcile('default/m1', rctx);
      expect(blocked.requeueAfter, 'the drain waits for the budget, not past the deadline').to.be.at.most(
        90_000,
      );
      const waiting = env.api.peek<Machine>(MachineResource, 'm1', 'default');

      expect(waiting?.status?.lastOperation?.description).to.contain('the interruption deadline of its VM');
      expect(
        env.target.peek(CoreResources.pods, 'db', 'default'),
        'the pod stays while the budget refuses',
      ).to.not.equal(undefined);
      expect(env.recorder.reasons()).to.not.include('DrainForced');

      await env.clock.advance(90_000);
      await mc.reconcile('default/m1', rctx);
      const forced = env.recorder.events.find((e) => e.reason === 'DrainForced');
      expect(forced?.message).to.contain('interruption deadline');
      expect(
        env.target.peek(CoreResources.pods, 'db', 'default'),
        'the pod deleted without eviction',
      ).to.equal(undefined);
      expect(await driverCalls(env, DriverOperation.DeleteMachine), 'the VM deleted').to.equal(1);
    } finally {
      await env.stop();
    }
  });
});

describe('MachineController: a PodDisruptionBudget event (in-memory API)', () => {
  it('enqueues exactly the machines whose node is being drained, from an index, without listing all machines', async () => {
    const selected: Machine['status'] = {
      currentStatus: { phase: 'Running', lastUpdateTime: '2026-11-21T09:00:00Z' },
      conditions: [
        { type: 'Ready', status: 'True' },
        { type: 'InPlaceUpdate', status: 'True', reason: 'SelectedForUpdate' },
      ],
    };
    const { env, mc } = await setup([
      machine('deleting-drain', { deleting: true, status: { deletionStep: 'DrainNode' } }),
      machine('deleting-vm', { deleting: true, status: { deletionStep: 'DeleteVM' } }),
      machine('running'),
      machine('updating', { status: selected }),
      machine('preserved-failed', {
        status: { currentStatus: { phase: 'Failed', preserveExpiryTime: '2026-11-25T10:00:00Z' } },
      }),
      machine('failed', { status: { currentStatus: { phase: 'Failed' } } }),
    ]);
    try {
      const queue = mc.controller.queue;
      while (queue.len() > 0) {
        const got = await queue.get();
        if (!got.shutdown) queue.done(got.item);
      }
      const machines = env.informers.machines;
      let lists = 0;
      const list = machines.list.bind(machines);
      machines.list = (namespace?: string) => {
        lists++;
        return list(namespace);
      };

      await env.target.create(CoreResources.podDisruptionBudgets, pdb('db'));
      await eventually(
        () => env.informers.drain?.podDisruptionBudgets.list().length === 1,
        'the budget is in the cache',
      );
      const enqueued: string[] = [];
      while (queue.len() > 0) {
        const got = await queue.get();
        if (got.shutdown) break;
        enqueued.push(got.item);
        queue.done(got.item);
      }
      expect(enqueued.sort()).to.deep.equal([
        'default/deleting-drain',
        'default/preserved-failed',
        'default/updating',
      ]);
      expect(lists, 'machines listed by the budget handler').to.equal(0);
      queue.shutDown();
    } finally {
      await env.stop();
    }
  });
});
