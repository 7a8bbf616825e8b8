import { expect } from 'chai';

import { MachineResource } from '../../../../lib/api/types.js';
import { resumePoint, type DeletionMemo } from '../../../../lib/controllers/machine/deletion.js';
import { DeletionStep } from '../../../../lib/controllers/machine/status.js';
import { DriverOperation } from '../../../../lib/driver/driver.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
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
