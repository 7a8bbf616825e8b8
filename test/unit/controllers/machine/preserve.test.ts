import { expect } from 'chai';

import type { Machine } from '../../../../lib/api/types.js';
import { effectivePreserve, planPreservation } from '../../../../lib/controllers/machine/preserve.js';
import { defaultMachineControllerSettings as settings } from '../../../../lib/controllers/machine/settings.js';
import type { Node } from '../../../../lib/kube/types.js';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString();
const P = 'node.machine.sapcloud.io/preserve';
const LAST = 'node.machine.sapcloud.io/last-applied-node-preserve-value';

function machine(phase: string, annotations: Record<string, string> = {}, expiry?: number): Machine {
  return {
    metadata: { name: 'm', namespace: 'ns', annotations },
    status: {
      currentStatus: {
        phase: phase as never,
        ...(expiry === undefined ? {} : { preserveExpiryTime: iso(expiry) }),
      },
    },
  };
}

function node(annotations: Record<string, string> = {}): Node {
  return { metadata: { name: 'm', annotations } };
}

describe('preservation planning', () => {
  it('lets the node’s value win, records it on the machine and drops the machine’s own', () => {
    const e = effectivePreserve(machine('Running', { [P]: 'when-failed' }), node({ [P]: 'now' }));
    expect(e).to.deep.equal({
      value: 'now',
      source: 'node',
      machineAnnotations: { [LAST]: 'now', [P]: null },
    });
  });

  it('uses the machine’s value when the node has none and none was applied from it', () => {
    expect(effectivePreserve(machine('Running', { [P]: 'now' }), node()).source).to.equal('machine');
    expect(effectivePreserve(machine('Running', { [P]: 'now' }), undefined).value).to.equal('now');
  });

  it('treats a node value that was removed as "stop" once it had been applied', () => {
    const e = effectivePreserve(machine('Running', { [LAST]: 'now' }), node());
    expect(e.value).to.equal('');
    expect(e.source).to.equal('node');
    expect(e.machineAnnotations).to.deep.equal({ [LAST]: null });
  });

  it('ignores (and reports) values other than now, when-failed, auto-preserved and false', () => {
    const e = effectivePreserve(machine('Failed', { [P]: 'forever' }), undefined);
    expect(e.value).to.equal('');
    expect(e.invalid).to.equal('forever');
  });

  it('reports an empty value as invalid (gardener master #1118): on the machine it counts as none, on the node nothing changes', () => {
    const own = effectivePreserve(machine('Failed', { [P]: '' }), undefined);
    expect(own).to.deep.include({ value: '', source: 'machine', invalid: '' });
    // A preserved machine whose node's value is empty: neither started nor stopped.
    const preserved = machine('Failed', { [LAST]: 'now' }, T0 + 60_000);
    const plan = planPreservation(preserved, node({ [P]: '' }), T0, settings);
    expect(plan).to.deep.include({ action: 'none', drain: false, removeAnnotation: false });
    expect(plan.effective).to.deep.include({ source: 'node', invalid: '' });
    expect(plan.effective.machineAnnotations, 'no bookkeeping either').to.equal(undefined);
    expect(planPreservation(preserved, node({ [P]: 'forever' }), T0, settings).action).to.equal('none');
    // A removed node value is no invalid one: it stops what the node started.
    expect(planPreservation(preserved, node(), T0, settings).action).to.equal('stop');
  });

  const cases: [
    string,
    Machine,
    Node | undefined,
    { action: string; drain: boolean; removeAnnotation: boolean },
  ][] = [
    [
      'now starts preservation of a Running machine',
      machine('Running', { [P]: 'now' }),
      node(),
      { action: 'start', drain: false, removeAnnotation: false },
    ],
    [
      'when-failed waits while Running',
      machine('Running', { [P]: 'when-failed' }),
      node(),
      { action: 'none', drain: false, removeAnnotation: false },
    ],
    [
      'when-failed starts (and drains) once Failed',
      machine('Failed', { [P]: 'when-failed' }),
      node(),
      { action: 'start', drain: true, removeAnnotation: false },
    ],
    [
      'an active preservation of a Failed machine is kept and drained',
      machine('Failed', { [P]: 'when-failed' }, T0 + 1000),
      node(),
      { action: 'keep', drain: true, removeAnnotation: false },
    ],
    [
      'false stops an active one',
      machine('Failed', { [P]: 'false' }, T0 + 1000),
      node(),
      { action: 'stop', drain: false, removeAnnotation: false },
    ],
    [
      'an auto-preserved machine that recovered stops and loses its annotation',
      machine('Running', { [P]: 'auto-preserved' }, T0 + 1000),
      node(),
      { action: 'stop', drain: false, removeAnnotation: true },
    ],
    [
      'an expired preservation stops and its annotation goes, so it does not start again',
      machine('Failed', { [P]: 'now' }, T0 - 1),
      node(),
      { action: 'stop', drain: false, removeAnnotation: true },
    ],
  ];
  for (const [name, m, n, want] of cases) {
    it(name, () => {
      const plan = planPreservation(m, n, T0, settings);
      expect({
        action: plan.action,
        drain: plan.drain,
        removeAnnotation: plan.removeAnnotation,
      }).to.deep.equal(want);
    });
  }

  it('sets the expiry from spec.machinePreserveTimeout, else the flag, and names who asked', () => {
    const m = machine('Running', { [P]: 'now' });
    expect(planPreservation(m, undefined, T0, settings).expiry).to.equal(T0 + settings.preserveTimeoutMs);
    m.spec = { machinePreserveTimeout: '1h' };
    expect(planPreservation(m, undefined, T0, settings).expiry).to.equal(T0 + 3_600_000);
    expect(
      planPreservation(machine('Failed', { [P]: 'auto-preserved' }), undefined, T0, settings).reason,
    ).to.equal('Preserved by MCM.');
  });
});
