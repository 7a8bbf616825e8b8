import { expect } from 'chai';

import { API_VERSION } from '../../../lib/api/types.js';
import { MachineError } from '../../../lib/driver/codes.js';
import type { Driver, MachineRequest } from '../../../lib/driver/driver.js';
import { fenceDriver } from '../../../lib/driver/fence.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { LeaseFence } from '../../../lib/kube/fence.js';

const req: MachineRequest = {
  machine: { apiVersion: API_VERSION, kind: 'Machine', metadata: { name: 'm1', namespace: 'default' } },
  machineClass: {
    apiVersion: API_VERSION,
    kind: 'MachineClass',
    metadata: { name: 'c', namespace: 'default' },
    provider: 'test',
    providerSpec: {},
  },
  secret: { apiVersion: 'v1', kind: 'Secret', metadata: {}, data: {} },
};

/** A driver that records each call and the signal it got. */
function recordingDriver(calls: { op: string; signal: AbortSignal | undefined }[]): Driver {
  const rec =
    <T>(op: string, res: T) =>
    (_r: unknown, signal?: AbortSignal): Promise<T> => {
      calls.push({ op, signal });
      return Promise.resolve(res);
    };
  return {
    createMachine: rec('create', { providerID: 'p', nodeName: 'n' }),
    initializeMachine: rec('initialize', { providerID: 'p', nodeName: 'n' }),
    deleteMachine: rec('delete', {}),
    getMachineStatus: rec('status', { providerID: 'p', nodeName: 'n' }),
    listMachines: rec('list', { machineList: {} }),
    getVolumeIDs: rec('volumes', { volumeIDs: [] }),
  };
}

describe('driver fence: mutating cloud calls only while leading', () => {
  it('refuses create, initialize and delete without reaching the driver when the fence is closed; reads pass', async () => {
    const calls: { op: string; signal: AbortSignal | undefined }[] = [];
    const d = fenceDriver('test', recordingDriver(calls), new LeaseFence(new FakeClock()));
    for (const call of [d.createMachine(req), d.initializeMachine(req), d.deleteMachine(req)]) {
      const err = await call.catch((e: unknown) => e);
      expect(err).to.be.instanceOf(MachineError);
      expect((err as MachineError).code).to.equal('Unavailable');
      expect((err as MachineError).message).to.match(/no longer holds the leader Lease/);
    }
    await d.getMachineStatus(req);
    await d.listMachines({ machineClass: req.machineClass, secret: req.secret });
    await d.getVolumeIDs({ pvSpecs: [] });
    expect(calls.map((c) => c.op)).to.deep.equal(['status', 'list', 'volumes']);
  });

  it('passes mutating calls while leading with a signal that aborts when leadership ends during the call', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    fence.grant(clock.monotonic(), 10_000);
    let signal: AbortSignal | undefined;
    let finish: (() => void) | undefined;
    const slow: Driver = {
      ...recordingDriver([]),
      createMachine: (_r, s) => {
        signal = s;
        return new Promise((resolve) => {
          finish = () => {
            resolve({ providerID: 'p', nodeName: 'n' });
          };
        });
      },
    };
    const d = fenceDriver('test', slow, fence);
    const own = new AbortController();
    const call = d.createMachine(req, own.signal);
    expect(signal?.aborted).to.equal(false);
    fence.revoke('leadership was lost');
    expect(signal?.aborted, 'aborted with the fence').to.equal(true);
    expect(own.signal.aborted, "the caller's own signal is left alone").to.equal(false);
    finish?.();
    await call;
  });
});
