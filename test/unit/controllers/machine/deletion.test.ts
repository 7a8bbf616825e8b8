import { expect } from 'chai';

import { MachineResource } from '../../../../lib/api/types.js';
import { resumePoint, type DeletionMemo } from '../../../../lib/controllers/machine/deletion.js';
import { DeletionStep } from '../../../../lib/controllers/machine/status.js';
import { DriverOperation } from '../../../../lib/driver/driver.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { driverCalls, machineControllerEnv, machineWithVm, rctx, vmNode } from './harness.js';

describe('deletion: where a pass resumes (pure)', () => {
  const cases: {
    name: string;
    recorded: DeletionStep;
    memo: DeletionMemo | undefined;
    want: ReturnType<typeof resumePoint>;
  }[] = [
    {
      name: 'nothing in memory (a fresh process): the recorded step',
      recorded: DeletionStep.DeleteVM,
      memo: undefined,
      want: { step: DeletionStep.DeleteVM },
    },
    {
      name: 'memory past the cached step: the remembered step and node',
      recorded: DeletionStep.DeleteVM,
      memo: { step: DeletionStep.DeleteNode, nodeName: 'n1' },
      want: { step: DeletionStep.DeleteNode, nodeName: 'n1' },
    },
    {
      name: 'the cache caught up with memory: the recorded step',
      recorded: DeletionStep.RemoveFinalizer,
      memo: { step: DeletionStep.DeleteNode, nodeName: 'n1' },
      want: { step: DeletionStep.RemoveFinalizer },
    },
    {
      name: 'the finalizer already removed by this process: nothing to do',
      recorded: DeletionStep.DrainNode,
      memo: { step: 'Finished', nodeName: 'n1' },
      want: 'finished',
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(resumePoint(tc.recorded, tc.memo)).to.deep.equal(tc.want);
    });
  }
});

describe('MachineController deletion: one DeleteMachine per VM (in-memory API)', () => {
  it('keeps nothing in memory once the deleted machines are gone, whichever comes first: the delete event or the end of the pass', async () => {
    const names = ['a', 'b', 'c', 'd', 'e'];
    const { env, mc } = await machineControllerEnv(
      names.map((n) =>
        machineWithVm(n, {
          deleting: true,
          status: { currentStatus: { phase: 'Terminating' }, deletionStep: 'DeleteVM' },
        }),
      ),
    );
    try {
      for (const n of names) env.seed(CoreResources.nodes, vmNode(n));
      await env.settle();
      await Promise.all(names.map((n) => mc.reconcile(`default/${n}`, rctx)));
      await env.settle();
      expect(env.informers.machines.list(), 'the machines are gone').to.have.length(0);
      expect(mc.deps.deletions.size, 'deletions remembered').to.equal(0);
    } finally {
      await env.stop();
    }
  });

  it('a pass re-run from a cache that lags behind its own writes does not delete the VM again', async () => {
    const names = ['m1', 'm2', 'm3'];
    const { env, mc } = await machineControllerEnv(
      names.map((n) =>
        machineWithVm(n, {
          deleting: true,
          status: { currentStatus: { phase: 'Terminating' }, deletionStep: 'DeleteVM' },
        }),
      ),
    );
    try {
      for (const n of names) env.seed(CoreResources.nodes, vmNode(n));
      await env.settle();
      // m2's finalizer removal fails once, so its pass ends after the VM is deleted and recorded.
      let failed = false;
      env.api.react((a) => {
        if (failed || a.verb !== 'patch' || a.name !== 'm2' || a.patchType !== 'json') return undefined;
        failed = true;
        return new Error('injected: finalizer removal failed');
      });
      // From here on the machine cache shows none of the passes' writes (it still says DeleteVM).
      env.api.holdWatches();
      for (const n of names) {
        await mc.reconcile(`default/${n}`, rctx).catch(() => undefined);
      }
      expect(await driverCalls(env, DriverOperation.DeleteMachine)).to.equal(3);
      // The same keys again, as the events of those writes enqueue them, from the lagging cache.
      const again: string[] = [];
      for (const n of names) {
        again.push(
          await mc.reconcile(`default/${n}`, rctx).then(
            () => 'ok',
            (e: unknown) => String(e),
          ),
        );
      }
      expect(
        await driverCalls(env, DriverOperation.DeleteMachine),
        'DeleteMachine calls for 3 machines',
      ).to.equal(3);
      expect(again, 'the repeated passes succeed').to.deep.equal(['ok', 'ok', 'ok']);
      expect(env.api.all(MachineResource), 'every deletion finished').to.have.length(0);
      env.api.releaseWatches();
      await env.settle();
      expect(mc.deps.deletions.size, 'the memory goes with the machines').to.equal(0);
    } finally {
      await env.stop();
    }
  });
});

describe('MachineController deletion: only a node proved to be the machine’s is touched (in-memory API)', () => {
  it('leaves alone a node whose name the machine still holds but that another machine claims: no cordon, drain, finalizer removal or deletion', async () => {
    // m1's VM had node name "ip-10-0-0-7"; that name now belongs to m2's new node.
    const m1 = machineWithVm('m1', {
      deleting: true,
      status: { currentStatus: { phase: 'Running' } },
    });
    m1.metadata.labels = { ...m1.metadata.labels, node: 'ip-10-0-0-7' };
    const reused = vmNode('ip-10-0-0-7', { 'node.gardener.cloud/machine-name': 'm2' });
    reused.spec = { providerID: 'virtual://virtual-zone-a/m2' };
    const { env, mc } = await machineControllerEnv([m1]);
    try {
      env.seed(CoreResources.nodes, reused);
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      await env.settle();
      const node = env.target.peek<Node>(CoreResources.nodes, 'ip-10-0-0-7');
      expect(node, 'the node still exists').to.not.equal(undefined);
      expect(node?.spec?.unschedulable, 'not cordoned').to.not.equal(true);
      expect(
        node?.status?.conditions?.some((c) => c.type === 'Terminating'),
        'no Terminating condition',
      ).to.not.equal(true);
      expect(
        env.target.writes().filter((a) => a.name === 'ip-10-0-0-7'),
        'no write to the reused node',
      ).to.deep.equal([]);
      expect(env.api.all(MachineResource), 'the deletion finished').to.have.length(0);
      expect(await driverCalls(env, DriverOperation.DeleteMachine), 'its own VM was deleted').to.equal(1);
      expect(env.recorder.events.map((e) => e.reason)).to.include('NodeNotOwned');
    } finally {
      await env.stop();
    }
  });

  it('cordons, drains and deletes the node when its providerID is the machine’s VM although it is not labelled yet', async () => {
    const m1 = machineWithVm('m1', { deleting: true, status: { currentStatus: { phase: 'Pending' } } });
    const unlabelled = vmNode('m1');
    delete unlabelled.metadata.labels?.['node.gardener.cloud/machine-name'];
    const { env, mc } = await machineControllerEnv([m1]);
    try {
      env.seed(CoreResources.nodes, unlabelled);
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      await env.settle();
      expect(env.target.peek<Node>(CoreResources.nodes, 'm1'), 'the node was deleted').to.equal(undefined);
      expect(env.api.all(MachineResource)).to.have.length(0);
    } finally {
      await env.stop();
    }
  });
});

describe('MachineController deletion: requests per machine (in-memory API)', () => {
  const NODE_FINALIZER = 'node.machine.sapcloud.io/machine-controller';

  /** A deleting machine m1 whose VM node exists, the caches synced. */
  async function deletingWithNode(): Promise<Awaited<ReturnType<typeof machineControllerEnv>>> {
    const r = await machineControllerEnv([machineWithVm('m1', { deleting: true })]);
    r.env.seed(CoreResources.nodes, vmNode('m1'));
    await r.env.settle();
    return r;
  }
  /** The error a pass failed with, as text, or undefined when it succeeded. */
  const failureOf = (p: Promise<unknown>): Promise<string | undefined> =>
    p.then(
      () => undefined,
      (e: unknown) => String(e),
    );

  it('does not delete a node a second time when the VM’s deletion already deleted it (the finalizer removal shows the deletion pending)', async () => {
    const m1 = machineWithVm('m1', {
      deleting: true,
      status: { currentStatus: { phase: 'Terminating' }, deletionStep: 'DeleteVM' },
    });
    const node = vmNode('m1');
    node.metadata.finalizers = [NODE_FINALIZER];
    const { env, mc } = await machineControllerEnv([m1]);
    try {
      env.seed(CoreResources.nodes, node);
      await env.settle();
      // The node cache lags: it never shows the deletion the virtual VM's deletion started.
      env.target.holdWatches();
      await mc.reconcile('default/m1', rctx);
      const nodeWrites = env.target.writes().filter((a) => a.resource.includes('nodes') && a.name === 'm1');
      expect(
        nodeWrites.map((a) => `${a.verb}${a.patchType === undefined ? '' : ` ${a.patchType}`}`),
        'VM (node) delete, then the finalizer removal; no second delete',
      ).to.deep.equal(['delete', 'patch json']);
      expect(env.target.peek<Node>(CoreResources.nodes, 'm1'), 'the node is gone').to.equal(undefined);
      expect(env.api.all(MachineResource), 'the deletion finished').to.have.length(0);
    } finally {
      env.target.releaseWatches();
      await env.stop();
    }
  });

  it('resumes a deletion recorded at DeleteVM (a restart) with the VM, the node and the finalizer: no drain, no status write', async () => {
    const m1 = machineWithVm('m1', {
      deleting: true,
      status: { currentStatus: { phase: 'Terminating' }, deletionStep: 'DeleteVM' },
    });
    const { env, mc } = await machineControllerEnv([m1]);
    try {
      env.seed(CoreResources.nodes, vmNode('m1'));
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      const machineWrites = env.api
        .writes()
        .filter((a) => a.resource.includes('machines') && a.name === 'm1')
        .map((a) =>
          a.subresource === 'status'
            ? `status ${String((a.body as { status?: { deletionStep?: string } }).status?.deletionStep)}`
            : `${a.verb} ${a.patchType ?? ''}`,
        );
      expect(machineWrites, 'only the finalizer removal').to.deep.equal(['patch json']);
      expect(await driverCalls(env, DriverOperation.DeleteMachine), 'the VM deleted (again)').to.equal(1);
      const nodeWrites = env.target.writes().filter((a) => a.name === 'm1');
      expect(
        nodeWrites.map((a) => `${a.verb}${a.subresource === undefined ? '' : `/${a.subresource}`}`),
        'no Terminating condition or cordon: the drain is not run again',
      ).to.not.include.members(['patch/status']);
      expect(env.target.peek<Node>(CoreResources.nodes, 'm1'), 'the node is gone').to.equal(undefined);
      expect(env.api.all(MachineResource), 'the deletion finished').to.have.length(0);
    } finally {
      await env.stop();
    }
  });

  it('sends the Terminating condition and the cordon together, and deletes no VM when one of them fails', async () => {
    const { env, mc } = await deletingWithNode();
    try {
      env.target.react((a) =>
        a.verb === 'patch' && a.name === 'm1' && a.subresource === 'status'
          ? new Error('injected: the condition failed')
          : undefined,
      );
      const err = await failureOf(mc.reconcile('default/m1', rctx));
      expect(err, 'the pass fails with the condition’s error').to.include('injected: the condition failed');
      const node = env.target.peek<Node>(CoreResources.nodes, 'm1');
      expect(node?.spec?.unschedulable, 'the cordon was sent beside the condition').to.equal(true);
      expect(await driverCalls(env, DriverOperation.DeleteMachine), 'no VM deleted').to.equal(0);
      expect(env.api.all(MachineResource), 'the machine stays').to.have.length(1);
    } finally {
      await env.stop();
    }
  });

  it('sends the machine’s Terminating mark beside the node’s condition and cordon, and deletes no VM while the mark is not written', async () => {
    const { env, mc } = await deletingWithNode();
    try {
      let failed = false;
      env.api.react((a) => {
        if (failed || a.verb !== 'patch' || a.name !== 'm1' || a.subresource !== 'status') return undefined;
        failed = true;
        return new Error('injected: the mark failed');
      });
      const err = await failureOf(mc.reconcile('default/m1', rctx));
      expect(err, 'the pass fails with the mark’s error').to.include('injected: the mark failed');
      const node = env.target.peek<Node>(CoreResources.nodes, 'm1');
      expect(node?.spec?.unschedulable, 'the cordon went out beside the mark').to.equal(true);
      expect(
        node?.status?.conditions?.some((c) => c.type === 'Terminating' && c.status === 'True'),
        'and the condition',
      ).to.equal(true);
      expect(await driverCalls(env, DriverOperation.DeleteMachine), 'no VM deleted').to.equal(0);
      // The next pass marks the machine and goes on to the end.
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      expect(env.api.all(MachineResource), 'the deletion finished').to.have.length(0);
      expect(await driverCalls(env, DriverOperation.DeleteMachine)).to.equal(1);
    } finally {
      await env.stop();
    }
  });
});
