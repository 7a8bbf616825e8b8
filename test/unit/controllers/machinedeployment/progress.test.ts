import { expect } from 'chai';

import type { MachineDeploymentCondition, MachineDeploymentStatus } from '../../../../lib/api/types.js';
import {
  calculateStatus,
  hasTimedOut,
  isComplete,
  isProgressing,
  nextProgressCheck,
  withPauseCondition,
  withRolloutProgress,
} from '../../../../lib/controllers/machinedeployment/progress.js';
import { deployment, NOW, NOW_RFC3339, ownedSet } from './fixtures.js';

const progressing = (
  reason: string,
  lastUpdateTime: string,
  status: 'True' | 'False' | 'Unknown' = 'True',
): MachineDeploymentCondition => ({
  type: 'Progressing',
  status,
  reason,
  message: 'x',
  lastUpdateTime,
  lastTransitionTime: lastUpdateTime,
});

describe('calculateStatus', () => {
  const mcd = deployment('d', 4, { maxSurge: 1, maxUnavailable: 1, generation: 3 });

  it('sums the sets, counts updated machines from the new set and reports the selector', () => {
    const old = ownedSet(mcd, 2, { className: 'old', statusReplicas: 3, statusAvailable: 2 });
    const cur = ownedSet(mcd, 2, { statusReplicas: 2, statusAvailable: 1 });
    if (old.status !== undefined)
      old.status.failedMachines = [{ name: 'broken', ownerRef: old.metadata.name ?? '' }];
    const status = calculateStatus({
      mcd,
      sets: [old, cur],
      newSet: cur,
      conditions: undefined,
      collisionCount: 2,
      now: NOW,
    });
    expect(status).to.deep.include({
      observedGeneration: 3,
      replicas: 5,
      updatedReplicas: 2,
      availableReplicas: 3,
      readyReplicas: 3,
      unavailableReplicas: 1,
      collisionCount: 2,
      labelSelector: 'app=worker,pool=d',
    });
    expect(status.failedMachines?.map((f) => f.name)).to.deep.equal(['broken']);
  });

  it('is Available with at least replicas - maxUnavailable - preserved failed machines available', () => {
    const cases: { available: number; preserved: number; want: string }[] = [
      { available: 3, preserved: 0, want: 'True' },
      { available: 2, preserved: 0, want: 'False' },
      { available: 2, preserved: 1, want: 'True' },
    ];
    for (const c of cases) {
      const ms = ownedSet(mcd, 4, { statusReplicas: 4, statusAvailable: c.available });
      if (ms.status !== undefined) ms.status.preservedFailedReplicas = c.preserved;
      const status = calculateStatus({
        mcd,
        sets: [ms],
        newSet: ms,
        conditions: undefined,
        collisionCount: undefined,
        now: NOW,
      });
      const cond = status.conditions?.find((x) => x.type === 'Available');
      expect(cond?.status, JSON.stringify(c)).to.equal(c.want);
      expect(cond?.reason).to.equal(
        c.want === 'True' ? 'MinimumReplicasAvailable' : 'MinimumReplicasUnavailable',
      );
    }
  });

  it('mirrors ReplicaFailure from the new set first and removes it when no set reports one', () => {
    const old = ownedSet(mcd, 1, { className: 'old' });
    const cur = ownedSet(mcd, 3);
    const failure = (reason: string) => [
      {
        type: 'ReplicaFailure' as const,
        status: 'True' as const,
        reason,
        message: reason,
        lastTransitionTime: NOW_RFC3339,
      },
    ];
    if (old.status !== undefined) old.status.machineSetCondition = failure('FailedDelete');
    if (cur.status !== undefined) cur.status.machineSetCondition = failure('FailedCreate');
    const withFailure = calculateStatus({
      mcd,
      sets: [old, cur],
      newSet: cur,
      conditions: undefined,
      collisionCount: undefined,
      now: NOW,
    });
    expect(withFailure.conditions?.find((c) => c.type === 'ReplicaFailure')).to.deep.include({
      reason: 'FailedCreate',
      lastUpdateTime: NOW_RFC3339,
    });
    if (cur.status !== undefined) delete cur.status.machineSetCondition;
    const fromOld = calculateStatus({
      mcd,
      sets: [old, cur],
      newSet: cur,
      conditions: withFailure.conditions,
      collisionCount: undefined,
      now: NOW,
    });
    expect(fromOld.conditions?.find((c) => c.type === 'ReplicaFailure')?.reason).to.equal('FailedDelete');
    if (old.status !== undefined) delete old.status.machineSetCondition;
    const cleared = calculateStatus({
      mcd,
      sets: [old, cur],
      newSet: cur,
      conditions: fromOld.conditions,
      collisionCount: undefined,
      now: NOW,
    });
    expect(cleared.conditions?.find((c) => c.type === 'ReplicaFailure')).to.equal(undefined);
  });
});

describe('rollout progress', () => {
  const mcd = deployment('d', 3, { progressDeadlineSeconds: 60 });
  const status = (s: Partial<MachineDeploymentStatus>): MachineDeploymentStatus => ({
    observedGeneration: 1,
    ...s,
  });

  it('is complete when every machine is updated and available and the generation observed', () => {
    expect(isComplete(mcd, status({ replicas: 3, updatedReplicas: 3, availableReplicas: 3 }))).to.equal(true);
    expect(isComplete(mcd, status({ replicas: 4, updatedReplicas: 3, availableReplicas: 3 }))).to.equal(
      false,
    );
    expect(isComplete(mcd, status({ replicas: 3, updatedReplicas: 3, availableReplicas: 2 }))).to.equal(
      false,
    );
    expect(
      isComplete(mcd, { replicas: 3, updatedReplicas: 3, availableReplicas: 3, observedGeneration: 0 }),
    ).to.equal(false);
  });

  it('counts more updated, ready or available machines, or fewer old ones, as progress', () => {
    const before = status({ replicas: 4, updatedReplicas: 1, readyReplicas: 3, availableReplicas: 3 });
    expect(isProgressing(before, { ...before })).to.equal(false);
    expect(isProgressing(before, { ...before, updatedReplicas: 2, replicas: 5 })).to.equal(true);
    expect(isProgressing(before, { ...before, replicas: 3 })).to.equal(true);
    expect(isProgressing(before, { ...before, readyReplicas: 4 })).to.equal(true);
    expect(isProgressing(before, { ...before, availableReplicas: 4 })).to.equal(true);
  });

  it('times out at the deadline (inclusive), never once complete', () => {
    const cond = (reason: string): MachineDeploymentStatus =>
      status({ conditions: [progressing(reason, NOW_RFC3339)] });
    expect(hasTimedOut(mcd, cond('MachineSetUpdated'), NOW + 59_999)).to.equal(false);
    expect(hasTimedOut(mcd, cond('MachineSetUpdated'), NOW + 60_000)).to.equal(true);
    expect(hasTimedOut(mcd, cond('NewMachineSetAvailable'), NOW + 600_000)).to.equal(false);
    expect(hasTimedOut(mcd, cond('ProgressDeadlineExceeded'), NOW)).to.equal(true);
    expect(hasTimedOut(deployment('d', 3), cond('MachineSetUpdated'), NOW + 600_000), 'no deadline').to.equal(
      false,
    );
  });

  it('asks to be checked again exactly at the deadline', () => {
    const s = status({
      replicas: 3,
      updatedReplicas: 1,
      availableReplicas: 1,
      conditions: [progressing('MachineSetUpdated', NOW_RFC3339)],
    });
    expect(nextProgressCheck(mcd, s, NOW + 15_000)).to.equal(45_000);
    expect(nextProgressCheck(deployment('d', 3), s, NOW), 'no deadline').to.equal(undefined);
    const done = status({
      replicas: 3,
      updatedReplicas: 3,
      availableReplicas: 3,
      conditions: [progressing('NewMachineSetAvailable', NOW_RFC3339)],
    });
    expect(nextProgressCheck(mcd, done, NOW)).to.equal(undefined);
  });

  it('reports completion, progress (refreshing the deadline clock) and timeout', () => {
    const earlier = '2026-11-21T09:59:00Z';
    const previous = status({
      replicas: 4,
      updatedReplicas: 1,
      availableReplicas: 3,
      conditions: [progressing('MachineSetUpdated', earlier)],
    });
    const cond = (s: MachineDeploymentStatus): MachineDeploymentCondition | undefined =>
      s.conditions?.find((c) => c.type === 'Progressing');

    const complete = withRolloutProgress({
      mcd,
      previous,
      next: { ...previous, replicas: 3, updatedReplicas: 3, availableReplicas: 3 },
      newSetName: 'd-abc',
      now: NOW,
    });
    expect(cond(complete)).to.deep.include({
      status: 'True',
      reason: 'NewMachineSetAvailable',
      message: 'MachineSet "d-abc" has successfully progressed.',
    });

    const moving = withRolloutProgress({
      mcd,
      previous,
      next: { ...previous, updatedReplicas: 2, replicas: 5 },
      newSetName: 'd-abc',
      now: NOW,
    });
    expect(cond(moving)).to.deep.include({
      reason: 'MachineSetUpdated',
      lastUpdateTime: NOW_RFC3339,
      lastTransitionTime: earlier,
    });

    const stuck = withRolloutProgress({
      mcd,
      previous,
      next: { ...previous },
      newSetName: 'd-abc',
      now: Date.parse(earlier) + 60_000,
    });
    expect(cond(stuck)).to.deep.include({
      status: 'False',
      reason: 'ProgressDeadlineExceeded',
      message: 'MachineSet "d-abc" has timed out progressing.',
    });

    const notYet = withRolloutProgress({
      mcd,
      previous,
      next: { ...previous },
      newSetName: 'd-abc',
      now: Date.parse(earlier) + 30_000,
    });
    expect(cond(notYet)).to.deep.equal(cond(previous));
  });

  it('sets DeploymentPaused while paused and DeploymentResumed once after, but keeps a deadline overrun', () => {
    const paused = withPauseCondition([progressing('MachineSetUpdated', NOW_RFC3339)], true, NOW);
    expect(paused.find((c) => c.type === 'Progressing')).to.deep.include({
      status: 'Unknown',
      reason: 'DeploymentPaused',
    });
    expect(withPauseCondition(paused, true, NOW + 1000)).to.deep.equal(paused);
    const resumed = withPauseCondition(paused, false, NOW);
    expect(resumed.find((c) => c.type === 'Progressing')).to.deep.include({
      status: 'Unknown',
      reason: 'DeploymentResumed',
    });
    expect(withPauseCondition(resumed, false, NOW)).to.deep.equal(resumed);
    const overrun = [progressing('ProgressDeadlineExceeded', NOW_RFC3339, 'False')];
    expect(withPauseCondition(overrun, true, NOW)).to.deep.equal(overrun);
  });
});
