import { expect } from 'chai';

import { MachineResource, type Machine } from '../../../../lib/api/types.js';
import { instanceOf } from '../../../../lib/autoscaler/instances.js';
import { LaunchBackoff } from '../../../../lib/controllers/machine/launches.js';
import { DriverOperation } from '../../../../lib/driver/driver.js';
import { machine } from '../builders.js';
import { driverCalls, machineControllerEnv, machineWithVm, rctx } from './harness.js';

const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

describe('launch back-off per class (pure)', () => {
  it('waits the base after a first failure, doubling with each failure in a row up to the maximum', () => {
    const b = new LaunchBackoff(30_000, 300_000);
    const waits: number[] = [];
    let now = T0;
    for (let i = 0; i < 6; i++) {
      const hold = b.failed('default/small', now, 'terminated');
      waits.push((hold?.until ?? now) - now);
      now = hold?.until ?? now;
    }
    expect(waits).to.deep.equal([30_000, 60_000, 120_000, 240_000, 300_000, 300_000]);
    expect(b.holdOf('default/small', now - 1)).to.deep.include({ failures: 6, lastFailure: 'terminated' });
    expect(b.holdOf('default/small', now)).to.equal(undefined);
    expect(b.holdOf('default/other', T0), 'another class is not held').to.equal(undefined);
  });

  it('stays at the maximum when each launch fails a little after its hold ends (the hold is no quiet spell)', () => {
    const b = new LaunchBackoff(30_000, 300_000);
    const waits: number[] = [];
    let now = T0;
    for (let i = 0; i < 8; i++) {
      const hold = b.failed('default/small', now, 'terminated');
      waits.push((hold?.until ?? now) - now);
      // The next launch goes when the hold ends and its VM dies 5 s later.
      now = (hold?.until ?? now) + 5_000;
    }
    expect(waits).to.deep.equal([30_000, 60_000, 120_000, 240_000, 300_000, 300_000, 300_000, 300_000]);
  });

  it('ends the back-off when a machine of the class joins, and counts again from one after a quiet spell', () => {
    const b = new LaunchBackoff(30_000, 300_000);
    b.failed('c', T0, 'x');
    b.failed('c', T0 + 30_000, 'x');
    b.succeeded('c');
    expect(b.holdOf('c', T0 + 30_001)).to.equal(undefined);
    const hold = b.failed('c', T0 + 40_000, 'x');
    expect(hold?.failures).to.equal(1);
    const holdEnd = hold?.until ?? 0;
    // Quiet for as long as the longest wait after the hold ended: still in a row.
    expect(b.failed('c', holdEnd + 300_000, 'x')?.failures).to.equal(2);
    // Quiet for longer than the longest wait after the hold ended: a first failure again.
    const next = b.holdOf('c', holdEnd + 300_000)?.until ?? 0;
    expect(b.failed('c', next + 300_001, 'x')?.failures).to.equal(1);
  });

  it('counts one machine’s failure once, however often it is reported', () => {
    const b = new LaunchBackoff(30_000, 300_000);
    b.failed('c', T0, 'x', 'uid-1');
    expect(b.failed('c', T0 + 100, 'x', 'uid-1')?.failures).to.equal(1);
    expect(b.failed('c', T0 + 200, 'x', 'uid-2')?.failures).to.equal(2);
  });

  it('holds nothing with a base of 0 (--launch-failure-backoff 0)', () => {
    const b = new LaunchBackoff(0, 300_000);
    expect(b.failed('c', T0, 'x')).to.equal(undefined);
    expect(b.holdOf('c', T0)).to.equal(undefined);
  });
});

describe('MachineController: launches that keep failing (in-memory API)', () => {
  /** A machine of class small that went Pending 10 s ago; its VM failed (the provider's notice). */
  function diedPending(name: string): Machine {
    const m = machineWithVm(name, {
      status: {
        currentStatus: { phase: 'Pending', timeoutActive: true, lastUpdateTime: iso(T0 - 10_000) },
        lastOperation: {
          type: 'Create',
          state: 'Processing',
          description: 'Creating machine on cloud provider',
        },
      },
    });
    m.metadata.creationTimestamp = iso(T0 - 20_000);
    m.metadata.annotations = {
      ...m.metadata.annotations,
      'machine.mcm-ts.io/vm-failure': 'InstanceTerminated',
    };
    return m;
  }

  it('fails the dying launch at once, then holds the next launch of the class without calling the driver, reporting a creation error to the autoscaler', async () => {
    const fresh = machine('m2', { created: iso(T0 - 1_000) });
    const { env, mc } = await machineControllerEnv([diedPending('m1'), fresh]);
    try {
      await mc.reconcile('default/m1', rctx);
      const m1 = env.api.peek<Machine>(MachineResource, 'm1', 'default');
      expect(m1?.status?.currentStatus?.phase).to.equal('Failed');
      expect(m1?.status?.lastOperation).to.deep.include({ type: 'Create', state: 'Failed' });
      const failed = env.recorder.events.find((e) => e.reason === 'LaunchFailed');
      expect(failed?.message).to.contain('back off').and.to.contain('1 failed in a row');

      const r = await mc.reconcile('default/m2', rctx);
      expect(await driverCalls(env, DriverOperation.CreateMachine), 'no launch while held').to.equal(0);
      expect(r.requeueAfter, 'looked at again when the hold ends').to.equal(30_000);
      const m2 = env.api.peek<Machine>(MachineResource, 'm2', 'default');
      expect(m2?.status?.currentStatus?.phase).to.equal('CrashLoopBackOff');
      expect(m2?.status?.lastOperation).to.deep.include({
        type: 'Create',
        state: 'Failed',
        errorCode: 'FailedPrecondition',
      });
      const seen = instanceOf(m2 as Machine, undefined, false);
      expect(seen.status.errorInfo, 'the autoscaler sees a failed scale-up').to.deep.include({
        errorCode: 'FailedPrecondition',
        instanceErrorClass: 99,
      });

      // The hold ends: the launch is tried.
      await env.clock.advance(30_000);
      await mc.reconcile('default/m2', rctx);
      expect(await driverCalls(env, DriverOperation.CreateMachine)).to.equal(1);
    } finally {
      await env.stop();
    }
  });

  it('does not hold launches with --launch-failure-backoff 0', async () => {
    const { env, mc } = await machineControllerEnv([diedPending('m1'), machine('m2', { created: iso(T0) })], {
      settings: { launchFailureBackoffMs: 0 },
    });
    try {
      await mc.reconcile('default/m1', rctx);
      await mc.reconcile('default/m2', rctx);
      expect(await driverCalls(env, DriverOperation.CreateMachine)).to.equal(1);
    } finally {
      await env.stop();
    }
  });
});
