import { expect } from 'chai';

import { API_VERSION, MachineResource, type Machine } from '../../../../lib/api/types.js';
import type { MachineController } from '../../../../lib/controllers/machine/controller.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node, Pod } from '../../../../lib/kube/types.js';
import { eventually } from '../../helpers/eventually.js';
import type { ControllerTestEnv } from '../env.js';
import { machineControllerEnv, rctx } from './harness.js';

const CANDIDATE = 'node.machine.sapcloud.io/candidate-for-update';
const SELECTED = 'node.machine.sapcloud.io/selected-for-update';
const RESULT = 'node.machine.sapcloud.io/update-result';

function runningMachine(labels: Record<string, string> = {}): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name: 'm1',
      namespace: 'default',
      uid: 'uid-m1',
      finalizers: ['machine.sapcloud.io/machine-controller-manager'],
      labels: { node: 'm1', ...labels },
    },
    spec: { class: { kind: 'MachineClass', name: 'small' }, providerID: 'virtual://virtual-zone-a/m1' },
    status: {
      currentStatus: { phase: 'Running', lastUpdateTime: '2026-11-21T09:00:00Z' },
      conditions: [{ type: 'Ready', status: 'True' }],
    },
  };
}

const node: Node = {
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'm1',
    labels: { 'virtual.mcm-ts.io/vm': 'true', 'node.gardener.cloud/machine-name': 'm1' },
    annotations: { 'virtual.mcm-ts.io/machine': 'default/m1', 'virtual.mcm-ts.io/machine-class': 'small' },
    finalizers: ['node.machine.sapcloud.io/machine-controller'],
  },
  spec: { providerID: 'virtual://virtual-zone-a/m1' },
  status: { conditions: [{ type: 'Ready', status: 'True' }] },
};

const pod: Pod = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web', namespace: 'default', uid: 'uid-web' },
  spec: { nodeName: 'm1', containers: [{ name: 'c', image: 'i' }] },
  status: { phase: 'Running' },
};

function setup(m: Machine): Promise<{ env: ControllerTestEnv; mc: MachineController }> {
  return machineControllerEnv([m], {
    seed: (env) => {
      env.seed(CoreResources.nodes, node);
      env.target.seed(CoreResources.pods, pod);
    },
  });
}

async function labelNode(env: ControllerTestEnv, labels: Record<string, string | null>): Promise<void> {
  await env.target.patch(CoreResources.nodes, 'm1', { metadata: { labels } }, { type: 'merge' });
  await env.settle();
}

function nodeNow(env: ControllerTestEnv): Node {
  return env.target.all(CoreResources.nodes)[0] as Node;
}

function machineNow(env: ControllerTestEnv): Machine {
  return env.api.all(MachineResource)[0] as Machine;
}

const reason = (n: Node): string | undefined =>
  n.status?.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason;

async function pass(env: ControllerTestEnv, mc: MachineController): Promise<void> {
  await mc.reconcile('default/m1', rctx);
  await env.settle();
}

describe('MachineController in-place update flow (in-memory API)', () => {
  it('answers the labels step by step, cordons and drains, and follows the agent’s result to Running', async () => {
    const { env, mc } = await setup(runningMachine());
    await pass(env, mc);
    expect(reason(nodeNow(env)), 'no candidate label: no condition').to.equal(undefined);

    await labelNode(env, { [CANDIDATE]: 'true' });
    await pass(env, mc);
    expect(reason(nodeNow(env))).to.equal('CandidateForUpdate');
    await pass(env, mc);
    expect(reason(nodeNow(env)), 'waits for the selection').to.equal('CandidateForUpdate');

    await labelNode(env, { [SELECTED]: 'true' });
    await pass(env, mc);
    expect(reason(nodeNow(env))).to.equal('SelectedForUpdate');
    expect(
      machineNow(env).status?.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason,
      'the machine mirrors the node a pass later',
    ).to.equal('CandidateForUpdate');

    // Drain: cordon, evict; the pod is gone once the pod cache says so.
    await pass(env, mc);
    expect(nodeNow(env).spec?.unschedulable).to.equal(true);
    expect(env.target.writes().some((w) => w.subresource === 'eviction' && w.name === 'web')).to.be.true;
    const draining = machineNow(env);
    expect(draining.status?.currentStatus?.phase, 'still Running while draining').to.equal('Running');
    expect(draining.status?.lastOperation).to.include({ type: 'InPlaceUpdate', state: 'Processing' });
    expect(draining.status?.lastOperation?.description).to.contain('pod default/web');
    expect(
      draining.status?.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason,
      'the condition is mirrored',
    ).to.equal('SelectedForUpdate');
    await eventually(() => env.informers.drain?.pods.list().length === 0, 'the pod cache shows the eviction');

    await pass(env, mc);
    expect(machineNow(env).status?.currentStatus?.phase).to.equal('InPlaceUpdating');
    expect(machineNow(env).status?.lastOperation?.description).to.equal(
      'Machine m1 is undergoing an in-place update',
    );
    expect(reason(nodeNow(env))).to.equal('DrainSuccessful');
    await pass(env, mc);
    expect(reason(nodeNow(env))).to.equal('ReadyForUpdate');
    const waiting = await mc.reconcile('default/m1', rctx);
    expect(waiting.requeueAfter, 'rechecks while the agent works').to.be.a('number');

    await labelNode(env, { [RESULT]: 'successful' });
    await pass(env, mc);
    expect(machineNow(env).status?.currentStatus?.phase).to.equal('InPlaceUpdateSuccessful');
    expect(reason(nodeNow(env))).to.equal('UpdateSuccessful');
    await pass(env, mc);
    expect(machineNow(env).status?.currentStatus?.phase).to.equal('Running');
    expect(machineNow(env).status?.lastOperation?.description).to.contain('re-joined');
    expect(env.recorder.reasons()).to.include.members(['InPlaceUpdating', 'InPlaceUpdateSuccessful']);
    await env.stop();
  });

  it('does not write the condition again when nothing changed', async () => {
    const { env, mc } = await setup(runningMachine());
    await labelNode(env, { [CANDIDATE]: 'true' });
    await pass(env, mc);
    await pass(env, mc);
    env.target.clearActions();
    await pass(env, mc);
    expect(env.target.writes()).to.have.length(0);
    await env.stop();
  });

  it('forces the drain with the force-drain=True label: the pod is deleted, not evicted', async () => {
    const { env, mc } = await setup(runningMachine({ 'force-drain': 'True' }));
    await labelNode(env, { [CANDIDATE]: 'true', [SELECTED]: 'true' });
    await pass(env, mc);
    await pass(env, mc);
    expect(reason(nodeNow(env))).to.equal('SelectedForUpdate');
    await pass(env, mc);
    const writes = env.target.writes();
    expect(writes.some((w) => w.subresource === 'eviction')).to.be.false;
    expect(writes.some((w) => w.verb === 'delete' && w.resource === 'pods' && w.name === 'web')).to.be.true;
    expect(machineNow(env).status?.currentStatus?.phase).to.equal('InPlaceUpdating');
    expect(env.recorder.reasons()).to.include('DrainForced');
    await env.stop();
  });
});
