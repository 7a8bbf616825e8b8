import { expect } from 'chai';

import type { Machine } from '../../../../lib/api/types.js';
import { conditionsInSync, isNodeHealthy, planHealth } from '../../../../lib/controllers/machine/health.js';
import { defaultMachineControllerSettings as settings } from '../../../../lib/controllers/machine/settings.js';
import type { Node, NodeCondition } from '../../../../lib/kube/types.js';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

function machine(
  phase: string,
  opts: {
    since?: number;
    created?: number;
    spec?: Machine['spec'];
    conditions?: NodeCondition[];
    annotations?: Record<string, string>;
  } = {},
): Machine {
  return {
    metadata: {
      name: 'm1',
      namespace: 'default',
      creationTimestamp: iso(opts.created ?? T0),
      ...(opts.annotations === undefined ? {} : { annotations: opts.annotations }),
    },
    spec: { class: { name: 'c' }, ...(opts.spec ?? {}) },
    status: {
      currentStatus: { phase: phase as never, lastUpdateTime: iso(opts.since ?? T0) },
      ...(opts.conditions === undefined ? {} : { conditions: opts.conditions }),
    },
  };
}

function node(conds: NodeCondition[], taints: Node['spec'] = {}): Node {
  return { metadata: { name: 'm1' }, spec: taints, status: { conditions: conds } };
}

const ready: NodeCondition = { type: 'Ready', status: 'True' };
const notReady: NodeCondition = { type: 'Ready', status: 'False' };

describe('machine health planning', () => {
  it('treats a node as healthy only with Ready True and every problem condition False', () => {
    expect(isNodeHealthy([ready], settings.nodeConditions)).to.be.true;
    expect(isNodeHealthy([], settings.nodeConditions)).to.be.false;
    expect(isNodeHealthy([notReady], settings.nodeConditions)).to.be.false;
    expect(isNodeHealthy([ready, { type: 'DiskPressure', status: 'True' }], settings.nodeConditions)).to.be
      .false;
    expect(isNodeHealthy([ready, { type: 'DiskPressure', status: 'Unknown' }], settings.nodeConditions)).to.be
      .false;
    expect(isNodeHealthy([ready, { type: 'MemoryPressure', status: 'True' }], settings.nodeConditions)).to.be
      .true;
  });

  it('compares conditions by type and status only (reason too for InPlaceUpdate)', () => {
    expect(conditionsInSync([{ ...ready, reason: 'a' }], [{ ...ready, reason: 'b' }])).to.be.true;
    expect(conditionsInSync([ready], [notReady])).to.be.false;
    expect(
      conditionsInSync(
        [{ type: 'InPlaceUpdate', status: 'True', reason: 'A' }],
        [{ type: 'InPlaceUpdate', status: 'True', reason: 'B' }],
      ),
    ).to.be.false;
  });

  it('moves Pending to Running when the node is healthy, with the join duration', () => {
    const d = planHealth(machine('Pending'), node([ready]), settings, T0 + 42_000);
    expect(d.transition?.phase).to.equal('Running');
    expect(d.transition?.joinDurationMs).to.equal(42_000);
    expect(d.transition?.lastOperation).to.include({ type: 'Create', state: 'Successful' });
    expect(d.transition?.lastOperation.description).to.contain('joined the cluster in 42s');
    expect(d.conditions).to.deep.equal([ready]);
  });

  it('keeps Pending while the critical-components-not-ready taint is on the node', () => {
    const d = planHealth(
      machine('Pending'),
      node([ready], {
        taints: [{ key: 'node.gardener.cloud/critical-components-not-ready', effect: 'NoSchedule' }],
      }),
      settings,
      T0 + 1000,
    );
    expect(d.transition).to.equal(undefined);
    expect(d.recheckAfterMs).to.equal(settings.creationTimeoutMs - 1000);
  });

  it('fails a Pending machine whose node has not joined by the creation timeout', () => {
    const d = planHealth(machine('Pending'), undefined, settings, T0 + settings.creationTimeoutMs);
    expect(d.transition?.phase).to.equal('Failed');
    expect(d.transition?.reason).to.equal('join-timeout');
    expect(d.transition?.lastOperation.description).to.contain('its node never registered');
  });

  it('takes the creation timeout from the annotation first, then spec.creationTimeout', () => {
    const spec = { creationTimeout: '10m' };
    expect(
      planHealth(machine('Pending', { spec }), undefined, settings, T0 + 600_000).transition?.phase,
    ).to.equal('Failed');
    const annotated = machine('Pending', {
      spec,
      annotations: { 'node.machine.sapcloud.io/effective-creation-timeout': '1m' },
    });
    expect(planHealth(annotated, undefined, settings, T0 + 60_000).transition?.phase).to.equal('Failed');
  });

  it('moves Running to Unknown when the node turns unhealthy, or disappears after having been seen', () => {
    expect(planHealth(machine('Running'), node([notReady]), settings, T0).transition?.phase).to.equal(
      'Unknown',
    );
    const seen = machine('Running', { conditions: [ready] });
    expect(planHealth(seen, undefined, settings, T0).transition?.phase).to.equal('Unknown');
    expect(planHealth(machine('Running'), node([ready]), settings, T0).transition).to.equal(undefined);
  });

  it('moves Unknown back to Running when the node recovers', () => {
    const d = planHealth(machine('Unknown'), node([ready]), settings, T0);
    expect(d.transition?.phase).to.equal('Running');
    expect(d.transition?.reason).to.equal('rejoined');
  });

  it('fails an Unknown machine after the health timeout, within the replacement budget', () => {
    const before = planHealth(machine('Unknown'), node([notReady]), settings, T0 + 60_000);
    expect(before.transition).to.equal(undefined);
    expect(before.recheckAfterMs).to.equal(settings.healthTimeoutMs - 60_000);
    const after = planHealth(machine('Unknown'), node([notReady]), settings, T0 + settings.healthTimeoutMs);
    expect(after.transition?.phase).to.equal('Failed');
    expect(after.transition?.needsBudget).to.be.true;
  });

  it('never fails an Unknown machine with disableHealthTimeout', () => {
    const m = machine('Unknown', { spec: { disableHealthTimeout: true } });
    expect(planHealth(m, node([notReady]), settings, T0 + 10 * settings.healthTimeoutMs).transition).to.equal(
      undefined,
    );
  });

  it('uses spec.nodeConditions instead of the flag', () => {
    const m = machine('Running', { spec: { nodeConditions: 'MemoryPressure' } });
    expect(
      planHealth(m, node([ready, { type: 'MemoryPressure', status: 'True' }]), settings, T0).transition
        ?.phase,
    ).to.equal('Unknown');
    expect(
      planHealth(m, node([ready, { type: 'DiskPressure', status: 'True' }]), settings, T0).transition,
    ).to.equal(undefined);
  });
});
