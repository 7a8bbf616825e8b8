import { getEventListeners } from 'node:events';

import { expect } from 'chai';

import { fenceDriver } from '../../../lib/driver/fence.js';
import type { Driver } from '../../../lib/driver/driver.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { LeaseFence } from '../../../lib/kube/fence.js';
import { linkSignals } from '../../../lib/kube/signals.js';
import { dependantsOf } from '../helpers/signals.js';

describe('linkSignals', () => {
  it('aborts with the reason of the first source that aborts', () => {
    const a = new AbortController();
    const b = new AbortController();
    const linked = linkSignals(a.signal, undefined, b.signal);
    expect(linked.signal.aborted).to.equal(false);
    b.abort(new Error('b went'));
    expect(linked.signal.aborted).to.equal(true);
    expect((linked.signal.reason as Error).message).to.equal('b went');
    a.abort(new Error('a went'));
    expect((linked.signal.reason as Error).message, 'the first reason stays').to.equal('b went');
  });

  it('is aborted at once when a source already is, and passes a single source through', () => {
    const a = new AbortController();
    a.abort(new Error('gone'));
    expect(linkSignals(a.signal, new AbortController().signal).signal.aborted).to.equal(true);
    const only = new AbortController().signal;
    expect(linkSignals(undefined, only).signal).to.equal(only);
  });

  it('detaches from its sources when disposed, so a long-lived source keeps nothing', () => {
    const long = new AbortController();
    for (let i = 0; i < 1000; i++) linkSignals(long.signal, new AbortController().signal).dispose();
    expect(getEventListeners(long.signal, 'abort')).to.have.length(0);
    expect(dependantsOf(long.signal)).to.equal(0);
  });
});

describe('the fence signal after many fenced driver calls', () => {
  it('holds no registration of the calls once they are over (AbortSignal.any leaked one per call on Node 20)', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    fence.grant(clock.monotonic(), 60_000);
    const ok = (): Promise<{ providerID: string; nodeName: string }> =>
      Promise.resolve({ providerID: 'p', nodeName: 'n' });
    const inner: Driver = {
      createMachine: ok,
      initializeMachine: ok,
      deleteMachine: () => Promise.resolve({}),
      getMachineStatus: ok,
      listMachines: () => Promise.resolve({ machineList: {} }),
      getVolumeIDs: () => Promise.resolve({ volumeIDs: [] }),
    };
    const driver = fenceDriver('test', inner, fence);
    const req = {
      machine: { metadata: { name: 'm' } },
      machineClass: { metadata: {}, providerSpec: {} },
      secret: { metadata: {} },
    };
    for (let i = 0; i < 2000; i++) {
      const call = new AbortController();
      await driver.deleteMachine(req, call.signal);
    }
    expect(dependantsOf(fence.signal)).to.equal(0);
    expect(getEventListeners(fence.signal, 'abort')).to.have.length(0);
  });
});
