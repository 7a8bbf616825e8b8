import { expect } from 'chai';

import type { MachineSetStatus } from '../../../../lib/api/types.js';
import { statusWriteDelay } from '../../../../lib/controllers/machineset/status.js';

describe('MachineSet status writes of counts alone (statusWriteDelay)', () => {
  const T = Date.UTC(2026, 10, 27, 8, 0, 0);
  const INTERVAL = 1000;
  const written: MachineSetStatus = {
    replicas: 10,
    fullyLabeledReplicas: 10,
    readyReplicas: 10,
    availableReplicas: 10,
    observedGeneration: 2,
    labelSelector: 'name=pool',
  };
  const fewer: MachineSetStatus = {
    ...written,
    replicas: 9,
    fullyLabeledReplicas: 9,
    readyReplicas: 8,
    availableReplicas: 8,
  };

  it('writes at once when this process has not written the set before', () => {
    expect(statusWriteDelay(written, fewer, undefined, T, INTERVAL)).to.equal(0);
  });

  it('puts off a change of counts until the interval since the last write has passed', () => {
    expect(statusWriteDelay(written, fewer, T, T + 300, INTERVAL)).to.equal(700);
    expect(statusWriteDelay(written, fewer, T, T + INTERVAL, INTERVAL)).to.equal(0);
    expect(statusWriteDelay(written, fewer, T, T + 5000, INTERVAL)).to.equal(0);
  });

  it('writes any other change at once: observed generation, a condition, a failed machine', () => {
    expect(statusWriteDelay(written, { ...fewer, observedGeneration: 3 }, T, T + 1, INTERVAL)).to.equal(0);
    const failing: MachineSetStatus = {
      ...fewer,
      machineSetCondition: [
        { type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate', message: 'quota' },
      ],
    };
    expect(statusWriteDelay(written, failing, T, T + 1, INTERVAL)).to.equal(0);
    const failed: MachineSetStatus = { ...fewer, failedMachines: [{ name: 'pool-a', ownerRef: 'pool' }] };
    expect(statusWriteDelay(written, failed, T, T + 1, INTERVAL)).to.equal(0);
  });

  it('treats a first status (none written yet) as more than counts', () => {
    expect(statusWriteDelay(undefined, fewer, T, T + 1, INTERVAL)).to.equal(0);
  });
});
