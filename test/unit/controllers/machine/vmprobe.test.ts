import { expect } from 'chai';

import { MachineClassResource, MachineResource, type Machine } from '../../../../lib/api/types.js';
import {
  VM_PROBE_GRACE_MS,
  VM_PROBE_MAX_INTERVAL_MS,
  nextVmProbeAt,
} from '../../../../lib/controllers/machine/vmprobe.js';
import { DriverOperation } from '../../../../lib/driver/driver.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import { driverCalls, machineControllerEnv, machineWithVm, rctx, smallClass, vmNode } from './harness.js';

const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** A machine that went Pending `ago` ms before NOW; its VM (a Node) is not seeded: it is gone. */
function pending(name: string, ago: number): Machine {
  const m = machineWithVm(name, {
    status: {
      currentStatus: { phase: 'Pending', timeoutActive: true, lastUpdateTime: iso(NOW - ago) },
      lastOperation: {
        type: 'Create',
        state: 'Processing',
        description: 'Creating machine on cloud provider',
      },
    },
  });
  m.metadata.creationTimestamp = iso(NOW - ago - 10_000);
  return m;
}

describe('VM checks of Pending machines: schedule (pure)', () => {
  const since = NOW;
  const cases: [string, number | undefined, number][] = [
    ['the first check comes after the grace', undefined, since + VM_PROBE_GRACE_MS],
    ['a check right at the grace: the next one a grace later', since + 30_000, since + 60_000],
    ['then the interval doubles', since + 60_000, since + 120_000],
    ['and doubles', since + 120_000, since + 240_000],
    ['up to its maximum', since + 600_000, since + 600_000 + VM_PROBE_MAX_INTERVAL_MS],
  ];
  for (const [name, last, want] of cases) {
    it(name, () => {
      expect(nextVmProbeAt(since, last)).to.equal(want);
    });
  }
});

describe('MachineController: a Pending machine whose VM vanished (in-memory API)', () => {
  it('is marked Failed (NotFound) with a Warning event once the grace is over, not at the creation timeout', async () => {
    const { env, mc } = await machineControllerEnv([pending('m1', 5_000)]);
    try {
      const early = await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, DriverOperation.GetMachineStatus), 'no check within the grace').to.equal(
        0,
      );
      expect(early.requeueAfter, 'looked at again when the grace is over').to.equal(
        VM_PROBE_GRACE_MS - 5_000,
      );

      await env.clock.advance(VM_PROBE_GRACE_MS - 5_000);
      await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, DriverOperation.GetMachineStatus)).to.equal(1);
      const m = env.api.peek<Machine>(MachineResource, 'm1', 'default');
      expect(m?.status?.currentStatus?.phase).to.equal('Failed');
      expect(m?.status?.lastOperation).to.include({ type: 'Create', state: 'Failed', errorCode: 'NotFound' });
      expect(m?.status?.lastOperation?.description).to.contain(
        'VM virtual://virtual-zone-a/m1 of machine m1 no longer exists',
      );
      const events = env.recorder.events.filter((e) => e.reason === 'LaunchFailed');
      expect(events.map((e) => e.type)).to.deep.equal(['Warning']);
      expect(events[0]?.message, 'a failed launch: its class backs off').to.contain('back off');
    } finally {
      await env.stop();
    }
  });

  it('is marked Failed when its node is being deleted (our finalizer keeps it) and the driver says NotFound', async () => {
    const { env, mc } = await machineControllerEnv([pending('m1', 60_000)]);
    try {
      const node = vmNode('m1');
      node.metadata.finalizers = ['node.machine.sapcloud.io/machine-controller'];
      node.status = { conditions: [{ type: 'Ready', status: 'False' }] };
      env.seed(CoreResources.nodes, node);
      await env.target.delete(CoreResources.nodes, 'm1');
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      const m = env.api.peek<Machine>(MachineResource, 'm1', 'default');
      expect(m?.status?.currentStatus?.phase).to.equal('Failed');
      expect(m?.status?.lastOperation?.errorCode).to.equal('NotFound');
    } finally {
      await env.stop();
    }
  });

  it('is left Pending when the driver fails otherwise, and its VM is not asked again before the next check is due', async () => {
    const { env, mc } = await machineControllerEnv([pending('m1', 60_000)]);
    try {
      // Every call of this class fails with Unavailable: nothing is known about the VM.
      await env.api.patch(
        MachineClassResource,
        smallClass.metadata.name ?? '',
        { providerSpec: { errorRate: 1 } },
        { type: 'merge', namespace: 'default' },
      );
      await env.settle();
      const r = await mc.reconcile('default/m1', rctx);
      await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, DriverOperation.GetMachineStatus), 'one check per due time').to.equal(1);
      expect(r.requeueAfter, 'the next check: one interval later').to.equal(60_000);
      const m = env.api.peek<Machine>(MachineResource, 'm1', 'default');
      expect(m?.status?.currentStatus?.phase).to.equal('Pending');
      expect(env.recorder.reasons()).to.not.include('MachineFailed');
    } finally {
      await env.stop();
    }
  });

  it('a Running machine whose node (VM) is gone goes Unknown without asking the driver, as in MCM', async () => {
    const { env, mc } = await machineControllerEnv([machineWithVm('m1')]);
    try {
      await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, DriverOperation.GetMachineStatus)).to.equal(0);
      const m = env.api.peek<Machine>(MachineResource, 'm1', 'default');
      expect(m?.status?.currentStatus?.phase).to.equal('Unknown');
    } finally {
      await env.stop();
    }
  });
});
