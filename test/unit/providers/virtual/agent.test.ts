import { expect } from 'chai';

import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
  type MachineSet,
} from '../../../../lib/api/types.js';
import type { Node } from '../../../../lib/kube/types.js';
import {
  planUpdateAgent,
  reportPatch,
  resolveUpdateTarget,
  type UpdateTarget,
} from '../../../../lib/providers/virtual/agent.js';
import { DEFAULT_IN_PLACE_UPDATE } from '../../../../lib/providers/virtual/spec.js';
import { ControllerTestEnv } from '../../controllers/env.js';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const RESULT = 'node.machine.sapcloud.io/update-result';
const FAILED_REASON = 'node.machine.sapcloud.io/update-failed-reason';

function vmNode(reason: string | undefined, labels: Record<string, string> = {}, vm = true): Node {
  return {
    metadata: {
      name: 'm1',
      resourceVersion: '7',
      labels: { ...(vm ? { 'virtual.mcm-ts.io/vm': 'true' } : {}), ...labels },
      annotations: { 'virtual.mcm-ts.io/machine': 'default/m1', 'virtual.mcm-ts.io/machine-class': 'old' },
    },
    status: {
      conditions: [
        { type: 'Ready', status: 'True' },
        ...(reason === undefined
          ? []
          : [{ type: 'InPlaceUpdate', status: 'True' as const, reason, lastTransitionTime: iso(T0) }]),
      ],
    },
  };
}

const target = (over: Partial<UpdateTarget['update']> = {}, problem?: string): (() => UpdateTarget) => {
  return () => ({
    className: 'new',
    update: { ...DEFAULT_IN_PLACE_UPDATE, durationMs: 2000, ...over },
    ...(problem === undefined ? {} : { problem }),
  });
};

describe('virtual provider: the simulated node update agent', () => {
  it('does nothing before ReadyForUpdate, for non-VM nodes, or once a result is reported', () => {
    const never = (): UpdateTarget => {
      throw new Error('the target is not needed');
    };
    expect(planUpdateAgent(vmNode(undefined), never, T0)).to.deep.equal({ kind: 'none' });
    expect(planUpdateAgent(vmNode('DrainSuccessful'), never, T0)).to.deep.equal({ kind: 'none' });
    expect(planUpdateAgent(vmNode('ReadyForUpdate', {}, false), never, T0)).to.deep.equal({ kind: 'none' });
    expect(planUpdateAgent(vmNode('ReadyForUpdate', { [RESULT]: 'successful' }), never, T0)).to.deep.equal({
      kind: 'none',
    });
  });

  it('waits the update duration from the ReadyForUpdate transition, then reports success with the class', () => {
    expect(planUpdateAgent(vmNode('ReadyForUpdate'), target(), T0 + 500)).to.deep.equal({
      kind: 'none',
      recheckAfterMs: 1500,
    });
    expect(planUpdateAgent(vmNode('ReadyForUpdate'), target(), T0 + 2000)).to.deep.equal({
      kind: 'report',
      result: 'successful',
      className: 'new',
    });
  });

  it('reports failure with the configured reason, and at once when the target cannot be used', () => {
    expect(
      planUpdateAgent(vmNode('ReadyForUpdate'), target({ fail: true, failureReason: 'boom' }), T0 + 2000),
    ).to.deep.equal({ kind: 'report', result: 'failed', reason: 'boom' });
    expect(planUpdateAgent(vmNode('ReadyForUpdate'), target({}, 'no such class'), T0)).to.deep.equal({
      kind: 'report',
      result: 'failed',
      reason: 'no such class',
    });
  });

  it('reports through a conditional patch of the label and annotations', () => {
    const node = vmNode('ReadyForUpdate');
    expect(reportPatch(node, { kind: 'report', result: 'successful', className: 'new' })).to.deep.equal({
      metadata: {
        resourceVersion: '7',
        labels: { [RESULT]: 'successful' },
        annotations: { 'virtual.mcm-ts.io/updated-to': 'new', [FAILED_REASON]: null },
      },
    });
    expect(reportPatch(node, { kind: 'report', result: 'failed', reason: 'boom' })).to.deep.equal({
      metadata: {
        resourceVersion: '7',
        labels: { [RESULT]: 'failed' },
        annotations: { [FAILED_REASON]: 'boom' },
      },
    });
  });

  describe('the target class', () => {
    function cls(name: string, providerSpec: Record<string, unknown>, provider = 'virtual'): MachineClass {
      return {
        apiVersion: API_VERSION,
        kind: 'MachineClass',
        metadata: { name, namespace: 'default' },
        provider,
        providerSpec,
      };
    }
    function machine(owned: boolean): Machine {
      return {
        apiVersion: API_VERSION,
        kind: 'Machine',
        metadata: {
          name: 'm1',
          namespace: 'default',
          uid: 'uid-m1',
          ...(owned
            ? {
                ownerReferences: [
                  {
                    apiVersion: API_VERSION,
                    kind: 'MachineSet',
                    name: 'ms',
                    uid: 'uid-ms',
                    controller: true,
                  },
                ],
              }
            : {}),
        },
        spec: { class: { kind: 'MachineClass', name: 'old' } },
      };
    }
    const ms: MachineSet = {
      apiVersion: API_VERSION,
      kind: 'MachineSet',
      metadata: {
        name: 'ms',
        namespace: 'default',
        uid: 'uid-ms',
        ownerReferences: [
          { apiVersion: API_VERSION, kind: 'MachineDeployment', name: 'md', uid: 'uid-md', controller: true },
        ],
      },
      spec: { replicas: 1 },
    };
    const md: MachineDeployment = {
      apiVersion: API_VERSION,
      kind: 'MachineDeployment',
      metadata: { name: 'md', namespace: 'default', uid: 'uid-md' },
      spec: { replicas: 1, template: { spec: { class: { kind: 'MachineClass', name: 'new' } } } },
    };

    async function env(owned: boolean, classes: MachineClass[]): Promise<ControllerTestEnv> {
      const e = new ControllerTestEnv();
      e.seed(MachineResource, machine(owned));
      e.seed(MachineSetResource, ms);
      e.seed(MachineDeploymentResource, md);
      for (const c of classes) e.seed(MachineClassResource, c);
      await e.start();
      return e;
    }

    it('is the class the machine’s deployment now names', async () => {
      const e = await env(true, [
        cls('old', {}),
        cls('new', { inPlaceUpdate: { duration: '2s', fail: true } }),
      ]);
      const t = resolveUpdateTarget(e.informers, vmNode('ReadyForUpdate'), 'default');
      expect(t).to.deep.equal({
        className: 'new',
        update: { durationMs: 2000, fail: true, failureReason: DEFAULT_IN_PLACE_UPDATE.failureReason },
      });
      await e.stop();
    });

    it('is the machine’s own class without a deployment', async () => {
      const e = await env(false, [cls('old', { inPlaceUpdate: { duration: '1s' } })]);
      const t = resolveUpdateTarget(e.informers, vmNode('ReadyForUpdate'), 'default');
      expect(t.className).to.equal('old');
      expect(t.update.durationMs).to.equal(1000);
      await e.stop();
    });

    it('names the problem when the class is missing, of another provider, or invalid', async () => {
      const missing = await env(true, []);
      expect(resolveUpdateTarget(missing.informers, vmNode('ReadyForUpdate'), 'default').problem).to.equal(
        'MachineClass default/new not found',
      );
      await missing.stop();
      const foreign = await env(true, [cls('new', {}, 'aws')]);
      expect(resolveUpdateTarget(foreign.informers, vmNode('ReadyForUpdate'), 'default').problem).to.contain(
        'of provider aws',
      );
      await foreign.stop();
      const invalid = await env(true, [cls('new', { inPlaceUpdate: { fail: 'sometimes' } })]);
      expect(resolveUpdateTarget(invalid.informers, vmNode('ReadyForUpdate'), 'default').problem).to.contain(
        'providerSpec.inPlaceUpdate.fail',
      );
      await invalid.stop();
    });

    it('uses the defaults and the VM’s own class without control caches', () => {
      expect(resolveUpdateTarget(undefined, vmNode('ReadyForUpdate'), 'default')).to.deep.equal({
        className: 'old',
        update: DEFAULT_IN_PLACE_UPDATE,
      });
    });
  });
});
