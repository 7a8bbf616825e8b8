import { expect } from 'chai';

import type { Machine, MachineDeployment } from '../../../lib/api/types.js';
import type { Node } from '../../../lib/kube/types.js';
import { Fleet, VM_LABEL, allRunning, noneLeft, rolledOut } from '../../bench/convergence.js';

function machine(name: string, phase: string, className = 'a', deleting = false): Machine {
  return {
    metadata: {
      name,
      ...(deleting ? { deletionTimestamp: '2026-11-25T00:00:00Z' } : {}),
    },
    spec: { class: { kind: 'MachineClass', name: className } },
    status: { currentStatus: { phase, lastUpdateTime: '2026-11-25T00:00:00Z' } },
  } as Machine;
}

function node(name: string, vm = true): Node {
  return { metadata: { name, labels: vm ? { [VM_LABEL]: 'true' } : {} } };
}

function deployment(
  generation: number,
  status: { observedGeneration: number; replicas: number; updated: number; available: number },
): MachineDeployment {
  return {
    metadata: { name: 'bench', generation },
    status: {
      observedGeneration: status.observedGeneration,
      replicas: status.replicas,
      updatedReplicas: status.updated,
      availableReplicas: status.available,
    },
  };
}

/** A fleet on a clock the test sets before each event, and what a goal resolved with. */
function setup(): {
  fleet: Fleet;
  at: (t: number) => void;
  reached: (goal: Promise<number>) => () => number;
} {
  let now = 0;
  const fleet = new Fleet('bench', () => now);
  return {
    fleet,
    at: (t) => {
      now = t;
    },
    reached: (goal) => {
      let when = NaN;
      void goal.then((t) => {
        when = t;
      });
      return () => when;
    },
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('scale bench: convergence from watch events', () => {
  it('0→N converges at the event that makes the last of N machines Running, not before', async () => {
    const { fleet, at, reached } = setup();
    const when = reached(fleet.until(allRunning(3)));
    at(1);
    for (const n of ['m1', 'm2', 'm3']) fleet.onMachine('ADDED', machine(n, 'Pending'));
    at(2);
    fleet.onMachine('MODIFIED', machine('m1', 'Running'));
    fleet.onMachine('MODIFIED', machine('m2', 'Running'));
    // A repeated update of a Running machine (or a resync) must not count it twice.
    at(3);
    fleet.onMachine('MODIFIED', machine('m2', 'Running'));
    fleet.onMachine('MODIFIED', machine('m2', 'Running'));
    await tick();
    expect(when()).to.be.NaN;
    at(4);
    fleet.onMachine('MODIFIED', machine('m3', 'Running'));
    at(5);
    fleet.onMachine('MODIFIED', machine('m3', 'Running'));
    await tick();
    expect(when()).to.equal(4);
  });

  it('0→N does not count a machine being deleted, nor converge with more than N machines', async () => {
    const { fleet, at, reached } = setup();
    const when = reached(fleet.until(allRunning(2)));
    at(1);
    fleet.onMachine('ADDED', machine('m1', 'Running'));
    fleet.onMachine('ADDED', machine('m2', 'Running', 'a', true));
    fleet.onMachine('ADDED', machine('m3', 'Running'));
    await tick();
    expect(when(), 'm2 is being deleted: 3 machines, 2 of them counted').to.be.NaN;
    at(2);
    fleet.onMachine('DELETED', machine('m2', 'Running', 'a', true));
    await tick();
    expect(when()).to.equal(2);
  });

  it('resolves at once when the goal already holds', async () => {
    const { fleet, at, reached } = setup();
    at(7);
    fleet.onMachine('ADDED', machine('m1', 'Running'));
    at(9);
    const when = reached(fleet.until(allRunning(1)));
    await tick();
    expect(when()).to.equal(9);
  });

  it('N→0 waits for the last VM (Node with the virtual cloud label) after the last machine', async () => {
    const { fleet, at, reached } = setup();
    at(1);
    fleet.onMachine('ADDED', machine('m1', 'Running'));
    fleet.onNode('ADDED', node('vm-1'));
    fleet.onNode('ADDED', node('control-plane', false));
    const when = reached(fleet.until(noneLeft));
    at(2);
    fleet.onMachine('MODIFIED', machine('m1', 'Terminating', 'a', true));
    at(3);
    fleet.onMachine('DELETED', machine('m1', 'Terminating', 'a', true));
    await tick();
    expect(when(), 'the VM is still there').to.be.NaN;
    at(4);
    fleet.onNode('DELETED', node('vm-1'));
    await tick();
    expect(when(), 'a Node that is not a VM does not count').to.equal(4);
  });

  it('the rollout converges only when the deployment reports it for its current generation', async () => {
    const { fleet, at, reached } = setup();
    at(1);
    fleet.onDeployment(
      'ADDED',
      deployment(1, { observedGeneration: 1, replicas: 2, updated: 2, available: 2 }),
    );
    fleet.onMachine('ADDED', machine('old-1', 'Running', 'a'));
    fleet.onMachine('ADDED', machine('old-2', 'Running', 'a'));
    const when = reached(fleet.until(rolledOut(2, 'b')));
    // The patch: a new generation not yet observed.
    at(2);
    fleet.onDeployment(
      'MODIFIED',
      deployment(2, { observedGeneration: 1, replicas: 2, updated: 2, available: 2 }),
    );
    at(3);
    fleet.onMachine('ADDED', machine('new-1', 'Running', 'b'));
    fleet.onMachine('ADDED', machine('new-2', 'Running', 'b'));
    fleet.onMachine('MODIFIED', machine('old-1', 'Running', 'a', true));
    fleet.onMachine('MODIFIED', machine('old-2', 'Running', 'a', true));
    at(4);
    fleet.onMachine('DELETED', machine('old-1', 'Running', 'a', true));
    fleet.onMachine('DELETED', machine('old-2', 'Running', 'a', true));
    await tick();
    expect(when(), 'all machines are new and Running, but the status is of generation 1').to.be.NaN;
    at(5);
    fleet.onDeployment(
      'MODIFIED',
      deployment(2, { observedGeneration: 2, replicas: 2, updated: 1, available: 2 }),
    );
    await tick();
    expect(when(), 'one machine not counted as updated yet').to.be.NaN;
    at(6);
    fleet.onDeployment(
      'MODIFIED',
      deployment(2, { observedGeneration: 2, replicas: 2, updated: 2, available: 2 }),
    );
    await tick();
    expect(when()).to.equal(6);
  });

  it('the rollout does not converge while an old machine is still there', async () => {
    const { fleet, at, reached } = setup();
    at(1);
    fleet.onDeployment(
      'ADDED',
      deployment(2, { observedGeneration: 2, replicas: 1, updated: 1, available: 1 }),
    );
    fleet.onMachine('ADDED', machine('new-1', 'Running', 'b'));
    fleet.onMachine('ADDED', machine('old-1', 'Running', 'a', true));
    const when = reached(fleet.until(rolledOut(1, 'b')));
    await tick();
    expect(when()).to.be.NaN;
    at(2);
    fleet.onMachine('DELETED', machine('old-1', 'Running', 'a', true));
    await tick();
    expect(when()).to.equal(2);
  });

  it('ignores other deployments and sees the deployment observed once its generation is', () => {
    const { fleet } = setup();
    expect(fleet.deploymentObserved()).to.equal(false);
    fleet.onDeployment('ADDED', {
      ...deployment(1, { observedGeneration: 1, replicas: 0, updated: 0, available: 0 }),
      metadata: { name: 'other', generation: 1 },
    });
    expect(fleet.deploymentObserved()).to.equal(false);
    fleet.onDeployment(
      'ADDED',
      deployment(3, { observedGeneration: 2, replicas: 0, updated: 0, available: 0 }),
    );
    expect(fleet.deploymentObserved()).to.equal(false);
    fleet.onDeployment(
      'MODIFIED',
      deployment(3, { observedGeneration: 3, replicas: 0, updated: 0, available: 0 }),
    );
    expect(fleet.deploymentObserved()).to.equal(true);
  });

  it('peakLive counts the most machines not being deleted since resetPeak', () => {
    const { fleet } = setup();
    for (const n of ['a1', 'a2', 'a3']) fleet.onMachine('ADDED', machine(n, 'Running'));
    fleet.onMachine('MODIFIED', machine('a3', 'Running', 'a', true));
    fleet.resetPeak();
    expect(fleet.peakLive).to.equal(2);
    fleet.onMachine('ADDED', machine('b1', 'Pending', 'b'));
    fleet.onMachine('ADDED', machine('b2', 'Pending', 'b'));
    expect(fleet.peakLive).to.equal(4);
    fleet.onMachine('MODIFIED', machine('a1', 'Running', 'a', true));
    fleet.onMachine('DELETED', machine('a3', 'Running', 'a', true));
    expect(fleet.peakLive, 'the peak stays').to.equal(4);
    fleet.resetPeak();
    expect(fleet.peakLive).to.equal(3);
  });
});
