import { expect } from 'chai';

import { API_VERSION, MachineResource, type Machine } from '../../../../lib/api/types.js';
import { defaultMachineControllerSettings } from '../../../../lib/controllers/machine/settings.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { machineControllerEnv, rctx } from './harness.js';

function machine(
  name: string,
  extra: Partial<Machine['metadata']> = {},
  status?: Machine['status'],
): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      finalizers: ['machine.sapcloud.io/machine-controller-manager'],
      ...extra,
    },
    spec: { class: { kind: 'MachineClass', name: 'small' } },
    ...(status === undefined ? {} : { status }),
  };
}

describe('MachineController reconcile (in-memory API)', () => {
  it('adds its finalizer first and does nothing else in that pass', async () => {
    const { env, mc } = await machineControllerEnv([machine('m1', { finalizers: [] })]);
    await mc.reconcile('default/m1', rctx);
    const writes = [...env.api.writes(), ...env.target.writes()];
    expect(writes).to.have.length(1);
    expect(writes[0]).to.include({ verb: 'patch', name: 'm1' });
    expect(JSON.stringify(writes[0]?.body)).to.contain('machine.sapcloud.io/machine-controller-manager');
    await env.stop();
  });

  it('creates the VM (a Node), records its identity on the machine, then moves it to Pending', async () => {
    const { env, mc } = await machineControllerEnv([machine('m1')]);
    const result = await mc.reconcile('default/m1', rctx);
    const targetWrites = env.target.writes();
    expect(targetWrites.map((w) => `${w.verb} ${w.resource} ${w.name ?? ''}`)).to.deep.equal([
      'create nodes m1',
    ]);
    const node = (targetWrites[0]?.body ?? {}) as Node;
    expect(node.metadata.name).to.equal('m1');
    expect(node.spec?.providerID).to.equal('virtual://virtual-zone-a/m1');
    const controlWrites = env.api.writes();
    expect(controlWrites.map((w) => `${w.verb} ${w.subresource ?? ''}`)).to.deep.equal([
      'patch ',
      'patch status',
    ]);
    expect(controlWrites[0]?.body).to.deep.equal({
      metadata: { labels: { node: 'm1' }, annotations: { 'machinepriority.machine.sapcloud.io': '3' } },
      spec: { providerID: 'virtual://virtual-zone-a/m1' },
    });
    const status = (controlWrites[1]?.body as { status: Machine['status'] }).status;
    expect(status?.currentStatus?.phase).to.equal('Pending');
    expect(status?.lastOperation).to.include({ type: 'Create', state: 'Processing' });
    expect(result.requeueAfter).to.equal(defaultMachineControllerSettings.creationTimeoutMs);
    await env.stop();
  });

  it('gives a joining machine’s node its template labels and taints before the machine reads Running', async () => {
    // The autoscaler counts the node as its group's capacity once the machine is Running: by then
    // the node must carry what the group's template node promised the pending pods.
    const joining = machine(
      'm1',
      { labels: { node: 'm1' } },
      { currentStatus: { phase: 'Pending', timeoutActive: true, lastUpdateTime: '2026-11-21T09:59:00Z' } },
    );
    joining.spec = {
      ...joining.spec,
      providerID: 'virtual://virtual-zone-a/m1',
      nodeTemplate: {
        metadata: { labels: { pool: 'a' } },
        spec: { taints: [{ key: 'dedicated', value: 'a', effect: 'NoSchedule' }] },
      },
    };
    const node: Node = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'm1', uid: 'node-uid', labels: { 'virtual.mcm-ts.io/vm': 'true' } },
      spec: { providerID: 'virtual://virtual-zone-a/m1' },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    };
    const { env, mc } = await machineControllerEnv([joining]);
    env.seed(CoreResources.nodes, node);
    await env.settle();
    const order: string[] = [];
    const record =
      (side: string) => (a: { verb: string; resource: string; subresource?: string | undefined }) => {
        if (a.verb !== 'get' && a.verb !== 'list' && a.verb !== 'watch')
          order.push(
            `${side} ${a.resource}:${a.verb}${a.subresource === undefined ? '' : `/${a.subresource}`}`,
          );
        return undefined;
      };
    env.api.react(record('control'));
    env.target.react(record('target'));
    await mc.reconcile('default/m1', rctx);
    const running = order.indexOf('control machines.machine.sapcloud.io:patch/status');
    const templated = order.indexOf('target nodes:patch');
    expect(running, `machine status written (${order.join(', ')})`).to.be.greaterThan(-1);
    expect(templated, `node patched (${order.join(', ')})`).to.be.greaterThan(-1);
    expect(templated, `node template before Running (${order.join(', ')})`).to.be.lessThan(running);
    const patched = env.target.writes().find((w) => w.verb === 'patch' && w.subresource === undefined);
    expect((patched?.body as Node).metadata.labels).to.include({ pool: 'a' });
    expect((patched?.body as Node).spec?.taints).to.deep.equal([
      { key: 'dedicated', value: 'a', effect: 'NoSchedule' },
    ]);
    const status = env.api.writes().find((w) => w.subresource === 'status');
    expect((status?.body as { status: Machine['status'] }).status?.currentStatus?.phase).to.equal('Running');
    await env.stop();
  });

  it('creates nothing for a machine whose class is missing, and says why in status and an event', async () => {
    const { env, mc } = await machineControllerEnv([machine('m1')], { machineClass: null });
    const result = await mc.reconcile('default/m1', rctx);
    expect(env.target.writes()).to.have.length(0);
    const writes = env.api.writes();
    expect(writes).to.have.length(1);
    const status = (writes[0]?.body as { status: Machine['status'] }).status;
    expect(status?.lastOperation?.description).to.match(/MachineClass default\/small not found/);
    expect(status?.currentStatus, 'the phase is left alone').to.equal(undefined);
    expect(env.recorder.reasons()).to.deep.equal(['MachineClassNotFound']);
    expect(result.requeueAfter).to.equal(3 * 60_000);
    // The same problem again writes nothing new.
    await env.settle();
    await mc.reconcile('default/m1', rctx);
    expect(env.api.writes()).to.have.length(1);
    await env.stop();
  });

  it('deletes in order: node condition and cordon, Terminating with the VM step, VM, node finalizer, machine finalizer', async () => {
    const deleting = machine(
      'm1',
      { labels: { node: 'm1' }, deletionTimestamp: '2026-11-21T09:59:00Z' },
      {
        currentStatus: { phase: 'Running' },
      },
    );
    deleting.spec = { ...deleting.spec, providerID: 'virtual://virtual-zone-a/m1' };
    const node: Node = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: 'm1',
        uid: 'node-uid',
        labels: { 'virtual.mcm-ts.io/vm': 'true', 'topology.kubernetes.io/zone': 'virtual-zone-a' },
        annotations: {
          'virtual.mcm-ts.io/machine': 'default/m1',
          'virtual.mcm-ts.io/machine-class': 'small',
        },
        finalizers: ['node.machine.sapcloud.io/machine-controller'],
      },
      spec: { providerID: 'virtual://virtual-zone-a/m1' },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    };
    const { env, mc } = await machineControllerEnv([deleting]);
    env.seed(CoreResources.nodes, node);
    await env.settle();
    env.api.clearActions();
    env.target.clearActions();
    // What the machine said when its VM (the virtual cloud's Node) was deleted.
    let atVmDeletion: Machine['status'] | undefined;
    env.target.react((a) => {
      if (a.verb === 'delete' && a.resource === 'nodes')
        atVmDeletion = env.api.peek<Machine>(MachineResource, 'm1', 'default')?.status;
      return undefined;
    });
    const result = await mc.reconcile('default/m1', rctx);
    expect(result).to.deep.equal({});
    const steps = [...env.api.writes(), ...env.target.writes()].map(
      (w) => `${w.resource}:${w.verb}${w.subresource === undefined ? '' : `/${w.subresource}`}`,
    );
    expect(steps).to.deep.equal([
      'machines.machine.sapcloud.io:patch/status',
      'machines.machine.sapcloud.io:patch',
      'nodes:patch/status',
      'nodes:patch',
      'nodes:delete',
      'nodes:patch',
    ]);
    const [terminating] = env.api.writes();
    const written = (terminating?.body as { status: Machine['status'] }).status;
    expect(written?.currentStatus?.phase, 'one status write: the mark').to.equal('Terminating');
    expect(written?.deletionStep, 'with the step after the drain').to.equal('DeleteVM');
    expect(atVmDeletion?.currentStatus?.phase, 'Terminating before the VM goes').to.equal('Terminating');
    expect(atVmDeletion?.deletionStep, 'and DeleteVM recorded before it').to.equal('DeleteVM');
    await env.stop();
  });
});
