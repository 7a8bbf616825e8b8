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

function node(
  conds: NodeCondition[],
  taints: Node['spec'] = {},
  meta: { labels?: Record<string, string>; annotations?: Record<string, string> } = {},
): Node {
  return { metadata: { name: 'm1', ...meta }, spec: taints, status: { conditions: conds } };
}

const RESULT = 'node.machine.sapcloud.io/update-result';
const FAILED_REASON = 'node.machine.sapcloud.io/update-failed-reason';

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

  it('moves a Pending machine without node to Failed at once when its VM is gone (NotFound), within no budget', () => {
    const d = planHealth(
      machine('Pending', { spec: { providerID: 'p://vm-1' } }),
      undefined,
      settings,
      T0 + 60_000,
      { vmGone: true },
    );
    expect(d.transition?.phase).to.equal('Failed');
    expect(d.transition?.reason).to.equal('vm-not-found');
    expect(d.transition?.needsBudget).to.equal(false);
    expect(d.transition?.lastOperation).to.include({
      type: 'Create',
      state: 'Failed',
      errorCode: 'NotFound',
    });
    expect(d.transition?.lastOperation.description).to.contain('VM p://vm-1 of machine m1 no longer exists');
    const waiting = planHealth(machine('Pending'), undefined, settings, T0 + 60_000);
    expect(waiting.transition, 'without that answer it waits for the creation timeout').to.equal(undefined);
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

  it('keeps Failed a machine whose VM the cloud reported stopped (an interruption deadline), though its node still reads Ready', () => {
    const stopped = machine('Failed', {
      annotations: { 'machine.mcm-ts.io/interruption-deadline': iso(T0 - 5_000) },
    });
    expect(planHealth(stopped, node([ready]), settings, T0).transition).to.equal(undefined);
    // Without the notice, a Failed machine whose node recovers rejoins (MCM).
    expect(planHealth(machine('Failed'), node([ready]), settings, T0).transition?.reason).to.equal(
      'rejoined',
    );
  });

  it('fails a Running machine whose VM its provider reported failed at once, within the replacement budget, though its node reads Ready', () => {
    const failure = { 'machine.mcm-ts.io/vm-failure': 'InstanceImpaired' };
    for (const phase of ['Running', 'Unknown', 'InPlaceUpdating']) {
      const d = planHealth(
        machine(phase, { annotations: failure, conditions: [ready] }),
        node([ready]),
        settings,
        T0,
      );
      expect(d.transition, phase).to.deep.include({
        phase: 'Failed',
        reason: 'vm-failed',
        needsBudget: true,
      });
      expect(d.transition?.lastOperation.description).to.contain('InstanceImpaired');
    }
    // Not with disableHealthTimeout (the user's opt-out of automatic failing).
    const off = machine('Running', { annotations: failure, spec: { disableHealthTimeout: true } });
    expect(planHealth(off, node([ready]), settings, T0).transition).to.equal(undefined);
    // Once Failed it stays Failed while its node still reads Ready.
    const failed = machine('Failed', { annotations: failure, conditions: [ready] });
    expect(planHealth(failed, node([ready]), settings, T0).transition).to.equal(undefined);
  });

  it('fails a Pending machine whose VM its provider reported failed at once as a failed launch, without the budget', () => {
    const m = machine('Pending', { annotations: { 'machine.mcm-ts.io/vm-failure': 'InstanceTerminated' } });
    const d = planHealth(m, undefined, settings, T0 + 5_000);
    expect(d.transition).to.deep.include({ phase: 'Failed', reason: 'launch-failed', needsBudget: false });
    expect(d.transition?.lastOperation).to.deep.include({ type: 'Create', state: 'Failed' });
    expect(d.transition?.lastOperation.description).to.contain('launch').and.to.contain('InstanceTerminated');
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

  describe('in-place update phases', () => {
    const succeeded = { labels: { [RESULT]: 'successful' } };
    const failed = { labels: { [RESULT]: 'failed' }, annotations: { [FAILED_REASON]: 'disk full' } };

    it('moves InPlaceUpdating to InPlaceUpdateSuccessful on update-result=successful', () => {
      const d = planHealth(machine('InPlaceUpdating'), node([ready], {}, succeeded), settings, T0 + 1000);
      expect(d.transition?.phase).to.equal('InPlaceUpdateSuccessful');
      expect(d.transition?.reason).to.equal('inplace-successful');
      expect(d.transition?.lastOperation).to.deep.include({
        type: 'InPlaceUpdate',
        state: 'Successful',
        description: 'Machine m1 successfully updated in place',
      });
      expect(d.transition?.needsBudget).to.be.false;
    });

    it('moves InPlaceUpdating to InPlaceUpdateFailed on update-result=failed, with the reason', () => {
      const d = planHealth(machine('InPlaceUpdating'), node([ready], {}, failed), settings, T0 + 1000);
      expect(d.transition?.phase).to.equal('InPlaceUpdateFailed');
      expect(d.transition?.reason).to.equal('inplace-failed');
      expect(d.transition?.lastOperation).to.include({ type: 'InPlaceUpdate', state: 'Failed' });
      expect(d.transition?.lastOperation.description).to.contain('disk full');
    });

    it('moves InPlaceUpdateFailed to InPlaceUpdateSuccessful when a later result is successful', () => {
      const d = planHealth(machine('InPlaceUpdateFailed'), node([ready], {}, succeeded), settings, T0);
      expect(d.transition?.phase).to.equal('InPlaceUpdateSuccessful');
    });

    it('does not judge health while InPlaceUpdating or InPlaceUpdateFailed (no Unknown, no Running)', () => {
      for (const phase of ['InPlaceUpdating', 'InPlaceUpdateFailed']) {
        expect(planHealth(machine(phase), node([notReady]), settings, T0 + 1000).transition, phase).to.equal(
          undefined,
        );
        expect(planHealth(machine(phase), node([ready]), settings, T0 + 1000).transition, phase).to.equal(
          undefined,
        );
      }
    });

    it('fails InPlaceUpdating after the in-place timeout (spec first, then the flag), rechecking until then', () => {
      const before = planHealth(machine('InPlaceUpdating'), node([ready]), settings, T0 + 60_000);
      expect(before.transition).to.equal(undefined);
      expect(before.recheckAfterMs).to.equal(settings.inPlaceUpdateTimeoutMs - 60_000);
      const after = planHealth(
        machine('InPlaceUpdating'),
        node([ready]),
        settings,
        T0 + settings.inPlaceUpdateTimeoutMs,
      );
      expect(after.transition?.phase).to.equal('InPlaceUpdateFailed');
      expect(after.transition?.reason).to.equal('inplace-timeout');
      expect(after.transition?.lastOperation.description).to.contain('in-place update timeout of 20m');
      const own = machine('InPlaceUpdating', { spec: { inPlaceUpdateTimeout: '2m' } });
      expect(planHealth(own, node([ready]), settings, T0 + 119_000).transition).to.equal(undefined);
      expect(planHealth(own, node([ready]), settings, T0 + 120_000).transition?.phase).to.equal(
        'InPlaceUpdateFailed',
      );
    });

    it('fails InPlaceUpdateFailed after the health timeout within the replacement budget, naming the reason', () => {
      const m = machine('InPlaceUpdateFailed', { spec: { healthTimeout: '5s' } });
      const before = planHealth(m, node([ready], {}, failed), settings, T0 + 4000);
      expect(before.transition).to.equal(undefined);
      expect(before.recheckAfterMs).to.equal(1000);
      const after = planHealth(m, node([ready], {}, failed), settings, T0 + 5000);
      expect(after.transition?.phase).to.equal('Failed');
      expect(after.transition?.needsBudget).to.be.true;
      expect(after.transition?.reason).to.equal('health-timeout');
      expect(after.transition?.lastOperation).to.include({ type: 'InPlaceUpdate', state: 'Failed' });
      expect(after.transition?.lastOperation.description).to.contain('disk full');
      const timedOut = planHealth(m, node([ready]), settings, T0 + 5000);
      expect(timedOut.transition?.lastOperation.description).to.contain('did not finish in time');
    });

    it('keeps a Failed machine Failed while its healthy node says its in-place update failed', () => {
      expect(planHealth(machine('Failed'), node([ready], {}, failed), settings, T0).transition).to.equal(
        undefined,
      );
      expect(planHealth(machine('Failed'), node([ready]), settings, T0).transition?.phase).to.equal(
        'Running',
      );
    });

    it('keeps InPlaceUpdateFailed with disableHealthTimeout', () => {
      const m = machine('InPlaceUpdateFailed', { spec: { disableHealthTimeout: true } });
      const d = planHealth(m, node([ready], {}, failed), settings, T0 + 10 * settings.healthTimeoutMs);
      expect(d.transition).to.equal(undefined);
      expect(d.recheckAfterMs).to.equal(undefined);
    });

    it('moves InPlaceUpdateSuccessful to Running once the node is healthy, not before', () => {
      const d = planHealth(machine('InPlaceUpdateSuccessful'), node([ready], {}, succeeded), settings, T0);
      expect(d.transition?.phase).to.equal('Running');
      expect(d.transition?.lastOperation).to.include({ type: 'HealthCheck', state: 'Successful' });
      expect(d.transition?.lastOperation.description).to.contain('re-joined');
      expect(
        planHealth(machine('InPlaceUpdateSuccessful'), node([notReady]), settings, T0).transition,
      ).to.equal(undefined);
    });

    it('mirrors a change of the InPlaceUpdate reason onto the machine', () => {
      const cond = (reason: string): NodeCondition => ({ type: 'InPlaceUpdate', status: 'True', reason });
      const m = machine('Running', { conditions: [ready, cond('CandidateForUpdate')] });
      const d = planHealth(m, node([ready, cond('SelectedForUpdate')]), settings, T0);
      expect(d.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason).to.equal('SelectedForUpdate');
      const same = planHealth(m, node([ready, cond('CandidateForUpdate')]), settings, T0);
      expect(same.conditions).to.equal(undefined);
    });
  });
});
