import { expect } from 'chai';

import {
  nodesToMarkCandidate,
  planNewSet,
  planOldSets,
  planSync,
  setsToDisable,
  transferable,
  type InPlaceInput,
  type InPlaceMachine,
  type InPlaceSet,
} from '../../../../lib/controllers/machinedeployment/inplace-plan.js';
import { transferLabels } from '../../../../lib/controllers/machinedeployment/inplace.js';
import { state } from './fixtures.js';

type Stage = 'fresh' | 'candidate' | 'selected' | 'updating' | 'updated' | 'failed' | 'transferred';

/** A machine at a stage of the protocol, as the planner sees it. */
function machine(
  name: string,
  stage: Stage = 'candidate',
  extra: Partial<InPlaceMachine> = {},
): InPlaceMachine {
  const node = {
    name: `node-${name}`,
    candidate: stage !== 'fresh' && stage !== 'transferred',
    selected: stage === 'selected' || stage === 'updating' || stage === 'updated' || stage === 'failed',
    updateResult: stage === 'updated' ? 'successful' : stage === 'failed' ? 'failed' : undefined,
    conditionReason:
      stage === 'updated'
        ? 'UpdateSuccessful'
        : stage === 'failed'
          ? 'UpdateFailed'
          : stage === 'updating'
            ? 'ReadyForUpdate'
            : stage === 'selected'
              ? 'SelectedForUpdate'
              : stage === 'candidate'
                ? 'CandidateForUpdate'
                : undefined,
  };
  const phase =
    stage === 'updating'
      ? 'InPlaceUpdating'
      : stage === 'updated'
        ? 'InPlaceUpdateSuccessful'
        : stage === 'failed'
          ? 'InPlaceUpdateFailed'
          : 'Running';
  return {
    name,
    node,
    conditionReason: node.conditionReason,
    phase,
    terminating: false,
    available: phase === 'Running',
    transferLabel: false,
    ...extra,
  };
}

function set(
  name: string,
  replicas: number,
  machines: InPlaceMachine[],
  scaleUpDisabled = false,
): InPlaceSet {
  return {
    state: state(name, replicas, {
      machines: machines.length,
      available: machines.filter((m) => m.available).length,
      created: name === 'new' ? 10 : 0,
    }),
    machines,
    scaleUpDisabled,
  };
}

function input(newSet: InPlaceSet, oldSets: InPlaceSet[], extra: Partial<InPlaceInput> = {}): InPlaceInput {
  return { replicas: 4, maxSurge: 0, maxUnavailable: 1, manual: false, newSet, oldSets, ...extra };
}

const olds = (n: number, stage: Stage = 'candidate'): InPlaceMachine[] =>
  Array.from({ length: n }, (_, i) => machine(`old-${i}`, stage));

describe('in-place update planning', () => {
  it('disables scale-up of old sets that still hold or want machines, once', () => {
    const sets = [set('a', 2, olds(2)), set('b', 0, []), set('c', 1, olds(1), true)];
    expect(setsToDisable(sets)).to.deep.equal(['a']);
  });

  it('marks the nodes of old machines as candidates, skipping marked ones and machines being deleted', () => {
    const sets = [
      set('a', 3, [
        machine('x', 'fresh'),
        machine('y', 'candidate'),
        machine('z', 'fresh', { terminating: true }),
      ]),
    ];
    expect(nodesToMarkCandidate(sets)).to.deep.equal(['node-x']);
  });

  it('a machine is handed over only when its condition and node label agree and it is not updating', () => {
    expect(transferable(machine('a', 'updated'))).to.equal(true);
    expect(transferable(machine('a', 'updated', { phase: 'InPlaceUpdating' }))).to.equal(false);
    expect(
      transferable(machine('a', 'updated', { conditionReason: 'ReadyForUpdate' })),
      'not mirrored yet',
    ).to.equal(false);
    expect(transferable(machine('a', 'failed'))).to.equal(false);
    expect(transferable(machine('a', 'updated', { terminating: true }))).to.equal(false);
  });

  describe('Auto orchestration', () => {
    it('selects no more nodes than maxUnavailable allows', () => {
      const step = planOldSets(input(set('new', 0, []), [set('old', 4, olds(4), true)]));
      expect(step).to.deep.equal({ kind: 'select', nodes: ['node-old-0'] });
      const two = planOldSets(
        input(set('new', 0, []), [set('old', 4, olds(4), true)], { maxUnavailable: 2 }),
      );
      expect(two).to.deep.equal({ kind: 'select', nodes: ['node-old-0', 'node-old-1'] });
    });

    it('selects within the deployment’s disruption budget, and none outside its windows', () => {
      const four = (d: InPlaceInput['disruption']): InPlaceInput =>
        input(set('new', 0, []), [set('old', 4, olds(4), true)], { maxUnavailable: 3, disruption: d });
      const open = { open: true, why: '', recheckAt: undefined };
      expect(planOldSets(four({ ...open, allowed: 2 }))).to.deep.equal({
        kind: 'select',
        nodes: ['node-old-0', 'node-old-1'],
      });
      const busy = input(
        set('new', 0, []),
        [set('old', 4, [machine('old-0', 'selected'), ...olds(3).slice(1)], true)],
        {
          maxUnavailable: 3,
          disruption: { ...open, allowed: 1 },
        },
      );
      expect(planOldSets(busy)).to.deep.include({ kind: 'none' });
      const closed = planOldSets(
        four({ allowed: 4, open: false, why: 'outside the disruption windows', recheckAt: 42 }),
      );
      expect(closed).to.deep.equal({ kind: 'none', reason: 'outside the disruption windows', recheckAt: 42 });
    });

    it('waits while a selected machine is drained or updated (it counts as out of service)', () => {
      for (const stage of ['selected', 'updating'] as const) {
        const machines = [machine('old-0', stage), ...olds(3).slice(1)];
        const step = planOldSets(input(set('new', 0, []), [set('old', 4, machines, true)]));
        expect(step.kind, stage).to.equal('none');
      }
    });

    it('waits while a handed-over machine is not Running again', () => {
      const moved = machine('m', 'transferred', { phase: 'InPlaceUpdateSuccessful', available: false });
      const step = planOldSets(input(set('new', 1, [moved]), [set('old', 3, olds(3), true)]));
      expect(step.kind).to.equal('none');
      const running = machine('m', 'transferred');
      expect(planOldSets(input(set('new', 1, [running]), [set('old', 3, olds(3), true)]))).to.deep.equal({
        kind: 'select',
        nodes: ['node-old-0'],
      });
    });

    it('never selects more machines than remain to be updated (surge machines replace the rest)', () => {
      const fresh = [machine('f', 'fresh')];
      const step = planOldSets(
        input(
          set('new', 3, [...fresh, machine('u1', 'fresh'), machine('u2', 'fresh')]),
          [set('old', 2, olds(2), true)],
          {
            maxSurge: 1,
            maxUnavailable: 2,
          },
        ),
      );
      expect(step).to.deep.equal({ kind: 'select', nodes: ['node-old-0'] });
    });

    it('takes the oldest set first and skips nodes that are not candidates yet', () => {
      const a = set('a', 2, [machine('a1', 'fresh'), machine('a2')], true);
      a.state.created = 5;
      const b = set('b', 2, olds(2), true);
      b.state.created = 1;
      const step = planOldSets(input(set('new', 0, []), [a, b], { maxUnavailable: 3 }));
      expect(step).to.deep.equal({ kind: 'select', nodes: ['node-old-0', 'node-old-1', 'node-a2'] });
    });

    it('scales old sets to zero once the new set has all replicas', () => {
      const newSet = set(
        'new',
        4,
        olds(4).map((m) => ({ ...m, name: `n-${m.name}` })),
      );
      expect(planOldSets(input(newSet, [set('old', 1, olds(1), true)]))).to.deep.equal({
        kind: 'scale',
        changes: [{ name: 'old', to: 0 }],
      });
    });

    it('shrinks old sets, oldest first, when the deployment was scaled down mid-rollout', () => {
      const step = planOldSets(
        input(set('new', 1, [machine('n', 'fresh')]), [set('old', 4, olds(4), true)], { replicas: 3 }),
      );
      expect(step).to.deep.equal({ kind: 'scale', changes: [{ name: 'old', to: 2 }] });
    });
  });

  it('Manual orchestration never selects nodes', () => {
    const step = planOldSets(input(set('new', 0, []), [set('old', 4, olds(4), true)], { manual: true }));
    expect(step.kind).to.equal('none');
  });

  describe('the new set', () => {
    it('hands over the machines whose update succeeded', () => {
      const machines = [machine('old-0', 'updated'), machine('old-1', 'updating'), ...olds(2)];
      expect(planNewSet(input(set('new', 0, []), [set('old', 4, machines, true)]))).to.deep.equal({
        kind: 'transfer',
        machines: [{ name: 'old-0', from: 'old' }],
      });
    });

    it('grows by the surge with Auto orchestration, and not with Manual', () => {
      const inp = input(set('new', 0, []), [set('old', 4, olds(4), true)], { maxSurge: 1 });
      expect(planNewSet(inp)).to.deep.equal({ kind: 'scale', to: 1 });
      expect(planNewSet({ ...inp, maxSurge: 0, manual: true })).to.deep.equal({ kind: 'none' });
    });

    it('replaces old machines that were lost (old sets never create machines again)', () => {
      // A failed update: the old machine was deleted, its set shrank to 3.
      expect(planNewSet(input(set('new', 0, []), [set('old', 3, olds(3), true)]))).to.deep.equal({
        kind: 'scale',
        to: 1,
      });
    });

    it('takes all replicas once no old machine is asked for, and shrinks to replicas', () => {
      expect(planNewSet(input(set('new', 2, []), [set('old', 0, [], true)]))).to.deep.equal({
        kind: 'scale',
        to: 4,
      });
      expect(planNewSet(input(set('new', 6, []), []))).to.deep.equal({ kind: 'scale', to: 4 });
      expect(planNewSet(input(set('new', 4, []), [set('old', 1, olds(1), true)]))).to.deep.equal({
        kind: 'none',
      });
    });
  });

  describe('after a hand-over (sync)', () => {
    it('grows the new set to count handed-over machines, then drops their label, and shrinks old sets', () => {
      const moved = machine('m', 'updated', { transferLabel: true });
      const sync = planSync(input(set('new', 0, [moved]), [set('old', 4, olds(3), true)]));
      expect(sync.newSetTo).to.equal(1);
      expect(sync.unlabelMachines).to.deep.equal(['m']);
      expect(sync.finishNodes).to.deep.equal(['node-m']);
      expect(sync.shrinkOld).to.deep.equal([{ name: 'old', to: 3 }]);
    });

    it('keeps the label while the new set does not count the machine yet', () => {
      const moved = [
        machine('m1', 'updated', { transferLabel: true }),
        machine('m2', 'updated', { transferLabel: true }),
      ];
      // Two more machines than replicas, but only one carries the label: the set may only grow by it.
      const extra = machine('x', 'fresh');
      const sync = planSync(input(set('new', 0, [...moved.slice(0, 1), extra, extra]), []));
      expect(sync.newSetTo).to.equal(1);
      expect(sync.unlabelMachines).to.deep.equal([]);
    });

    it('does nothing once the hand-over is complete', () => {
      const done = machine('m', 'transferred');
      const sync = planSync(input(set('new', 1, [done]), [set('old', 3, olds(3), true)]));
      expect(sync).to.deep.equal({ unlabelMachines: [], finishNodes: [], shrinkOld: [] });
    });
  });

  it('re-labels a handed-over machine for its new set', () => {
    expect(
      transferLabels(
        { app: 'w', 'machine-template-hash': 'old', shared: 'x' },
        { app: 'w', 'machine-template-hash': 'new' },
      ),
    ).to.deep.equal({
      shared: null,
      app: 'w',
      'machine-template-hash': 'new',
      'node.machine.sapcloud.io/update-result': 'successful',
    });
  });
});
