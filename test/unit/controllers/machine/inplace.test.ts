import { expect } from 'chai';

import type { Machine } from '../../../../lib/api/types.js';
import {
  READY_FOR_UPDATE_RECHECK_MS,
  inPlaceForceReason,
  planInPlace,
  type InPlaceStep,
} from '../../../../lib/controllers/machine/inplace.js';
import { defaultMachineControllerSettings as settings } from '../../../../lib/controllers/machine/settings.js';
import type { Node, NodeCondition } from '../../../../lib/kube/types.js';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

const CANDIDATE = 'node.machine.sapcloud.io/candidate-for-update';
const SELECTED = 'node.machine.sapcloud.io/selected-for-update';
const RESULT = 'node.machine.sapcloud.io/update-result';
const FAILED_REASON = 'node.machine.sapcloud.io/update-failed-reason';

function machine(
  phase = 'Running',
  labels: Record<string, string> = {},
  spec: Machine['spec'] = {},
  conditions?: NodeCondition[],
): Machine {
  return {
    metadata: { name: 'm1', namespace: 'default', labels: { node: 'm1', ...labels } },
    spec: { class: { name: 'c' }, ...spec },
    status: {
      currentStatus: { phase: phase as never, lastUpdateTime: iso(T0) },
      ...(conditions === undefined ? {} : { conditions }),
    },
  };
}

function node(
  labels: Record<string, string>,
  reason?: string,
  since = T0,
  annotations: Record<string, string> = {},
): Node {
  const conditions: NodeCondition[] = [{ type: 'Ready', status: 'True' }];
  if (reason !== undefined)
    conditions.push({ type: 'InPlaceUpdate', status: 'True', reason, lastTransitionTime: iso(since) });
  return { metadata: { name: 'm1', labels, annotations }, status: { conditions } };
}

const cond = (reason: string): Partial<InPlaceStep> => ({ kind: 'condition', reason }) as never;

describe('in-place update planning (machine side)', () => {
  const cases: [string, Node, Partial<InPlaceStep> | InPlaceStep][] = [
    ['a node without the candidate label and no condition: nothing', node({}), { kind: 'none' }],
    ['a new candidate gets CandidateForUpdate', node({ [CANDIDATE]: 'true' }), cond('CandidateForUpdate')],
    [
      'a candidate that was selected at once still starts at CandidateForUpdate',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }),
      cond('CandidateForUpdate'),
    ],
    [
      'a candidate stays CandidateForUpdate until selected',
      node({ [CANDIDATE]: 'true' }, 'CandidateForUpdate'),
      { kind: 'none' },
    ],
    [
      'a selected candidate gets SelectedForUpdate',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }, 'CandidateForUpdate'),
      cond('SelectedForUpdate'),
    ],
    [
      'DrainSuccessful becomes ReadyForUpdate',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }, 'DrainSuccessful'),
      cond('ReadyForUpdate'),
    ],
    [
      'ReadyForUpdate waits for the agent (rechecking)',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }, 'ReadyForUpdate'),
      { kind: 'none', recheckAfterMs: READY_FOR_UPDATE_RECHECK_MS },
    ],
    [
      'update-result=successful gives UpdateSuccessful',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true', [RESULT]: 'successful' }, 'ReadyForUpdate'),
      cond('UpdateSuccessful'),
    ],
    [
      'UpdateSuccessful with its result label stays',
      node({ [CANDIDATE]: 'true', [SELECTED]: 'true', [RESULT]: 'successful' }, 'UpdateSuccessful'),
      { kind: 'none' },
    ],
    [
      'UpdateSuccessful without a result label is a new rollout: CandidateForUpdate',
      node({ [CANDIDATE]: 'true' }, 'UpdateSuccessful'),
      cond('CandidateForUpdate'),
    ],
    [
      'UpdateSuccessful without the candidate label (labels removed after the update): nothing',
      node({}, 'UpdateSuccessful'),
      { kind: 'none' },
    ],
    [
      'update-result=failed gives UpdateFailed with the reason',
      node({ [CANDIDATE]: 'true', [RESULT]: 'failed' }, 'ReadyForUpdate', T0, {
        [FAILED_REASON]: 'disk full',
      }),
      { kind: 'condition', reason: 'UpdateFailed', message: 'Node in-place update failed: disk full' },
    ],
    [
      'UpdateFailed stays',
      node({ [CANDIDATE]: 'true', [RESULT]: 'failed' }, 'UpdateFailed'),
      { kind: 'none' },
    ],
  ];
  for (const [name, n, want] of cases) {
    it(name, () => {
      expect(planInPlace(machine(), n, settings, T0 + 1000)).to.deep.include(want);
    });
  }

  it('drains a SelectedForUpdate node gracefully until the drain timeout counted from the selection', () => {
    const n = node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }, 'SelectedForUpdate', T0);
    const before = planInPlace(machine(), n, settings, T0 + 60_000);
    expect(before).to.deep.equal({
      kind: 'drain',
      selectedAt: T0,
      force: undefined,
      forceAt: T0 + settings.drainTimeoutMs,
    });
    const after = planInPlace(machine(), n, settings, T0 + settings.drainTimeoutMs);
    expect(after).to.include({ kind: 'drain' });
    expect((after as { force?: string }).force).to.contain('drain timeout');
    const own = planInPlace(machine('Running', {}, { drainTimeout: '1m' }), n, settings, T0 + 60_000);
    expect((own as { force?: string }).force).to.contain('drain timeout');
  });

  it('drains even when the selected label went away (the condition says what was started)', () => {
    const n = node({ [CANDIDATE]: 'true' }, 'SelectedForUpdate');
    expect(planInPlace(machine(), n, settings, T0)).to.include({ kind: 'drain' });
  });

  it('does not drain a machine that is not Running (an unhealthy or failed one is not updated)', () => {
    const n = node({ [CANDIDATE]: 'true', [SELECTED]: 'true' }, 'SelectedForUpdate');
    for (const phase of ['Unknown', 'Failed', 'Pending', 'InPlaceUpdateFailed']) {
      expect(planInPlace(machine(phase), n, settings, T0).kind, phase).to.equal('none');
    }
    expect(planInPlace(machine('InPlaceUpdating'), n, settings, T0).kind, 'resumed').to.equal('drain');
  });

  it('forces the drain with the force-drain=True label or a node NotReady for 5 minutes', () => {
    expect(inPlaceForceReason(machine('Running', { 'force-drain': 'True' }), T0, T0, 60_000)).to.contain(
      'force-drain=True',
    );
    expect(inPlaceForceReason(machine('Running', { 'force-drain': 'true' }), T0, T0, 60_000)).to.equal(
      undefined,
    );
    const notReady = machine('Running', {}, {}, [
      { type: 'Ready', status: 'False', lastTransitionTime: iso(T0) },
    ]);
    expect(inPlaceForceReason(notReady, T0, T0 + 299_000, 3_600_000)).to.equal(undefined);
    expect(inPlaceForceReason(notReady, T0, T0 + 300_000, 3_600_000)).to.contain('not been Ready');
  });
});
