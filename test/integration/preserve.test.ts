import { expect } from 'chai';

import { MachineResource, type Machine } from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const PRESERVE = 'node.machine.sapcloud.io/preserve';

async function node(env: LifecycleEnv, name: string): Promise<Node> {
  return env.client.get<Node>(CoreResources.nodes, name);
}

describe('machine preservation (real kube-apiserver, kwok running pods)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start({ kwok: true });
    await env.startManager();
  });

  after(async () => {
    await env.stop();
  });

  it('keeps a preserved Failed machine, taints and drains its node, and lets it go when preservation ends', async () => {
    await env.createClass('fragile', { failure: { notReadyAfter: '5s' } });
    await env.createDeployment('keep', 1, 'fragile', {}, { healthTimeout: '2s', drainTimeout: '4s' });
    await env.client.patch(
      {
        group: 'machine.sapcloud.io',
        version: 'v1alpha1',
        plural: 'machinedeployments',
        kind: 'MachineDeployment',
        namespaced: true,
      },
      'keep',
      { spec: { template: { metadata: { annotations: { [PRESERVE]: 'when-failed' } } } } },
      { type: 'merge', namespace: NS },
    );
    const m = await until('a Running machine that asks to be preserved when failed', async () =>
      (await env.machines('keep')).find(
        (x) => phaseOf(x) === 'Running' && x.metadata.annotations?.[PRESERVE] === 'when-failed',
      ),
    );
    const name = m.metadata.name ?? '';
    await env.client.create<Pod>(CoreResources.pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'debug-me', namespace: NS },
      spec: {
        nodeName: name,
        terminationGracePeriodSeconds: 30,
        containers: [{ name: 'c', image: 'registry.invalid/c:1' }],
      },
    });
    const failed = await until(
      'the machine Failed and preserved',
      async () => {
        const got = await env.client.get<Machine>(MachineResource, name, NS);
        return phaseOf(got) === 'Failed' && got.status?.currentStatus?.preserveExpiryTime !== undefined
          ? got
          : undefined;
      },
      60_000,
    );
    expect(Date.parse(failed.status?.currentStatus?.preserveExpiryTime ?? '')).to.be.greaterThan(
      Date.now() + 95 * 3_600_000,
    );
    const drained = await until(
      'its node tainted, protected from scale-down and drained',
      async () => {
        const n = await node(env, name);
        const cond = n.status?.conditions?.find((c) => c.type === 'Preserved');
        return cond?.status === 'True' &&
          (cond.message ?? '').startsWith('Preserved node drained successfully.')
          ? n
          : undefined;
      },
      60_000,
    );
    expect(drained.spec?.taints).to.deep.include({
      key: 'node.machine.sapcloud.io/preserved',
      effect: 'NoSchedule',
    });
    expect(drained.spec?.unschedulable, 'a taint, not a cordon').to.not.equal(true);
    expect(drained.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled']).to.equal(
      'true',
    );
    expect(drained.status?.conditions?.find((c) => c.type === 'Preserved')?.reason).to.equal(
      'Preserved by user.',
    );
    await until('the pod is gone', async () => {
      try {
        await env.client.get(CoreResources.pods, 'debug-me', NS);
        return false;
      } catch {
        return true;
      }
    });
    // The MachineSet keeps it (no replacement deletes it) for as long as it is preserved.
    await new Promise((r) => setTimeout(r, 3000));
    const still = await env.client.get<Machine>(MachineResource, name, NS);
    expect(still.metadata.deletionTimestamp, 'not deleted while preserved').to.equal(undefined);

    await env.client.patch(
      MachineResource,
      name,
      { metadata: { annotations: { [PRESERVE]: 'false' } } },
      { type: 'merge', namespace: NS },
    );
    await until(
      'the machine is replaced once preservation ends',
      async () => {
        const ms = await env.machines('keep');
        return !ms.some((x) => x.metadata.name === name) && ms.length === 1;
      },
      60_000,
    );
    await env.scale('keep', 0);
  });

  it('never uncordons a node a user cordoned when its preservation ends', async () => {
    await env.createClass('steady');
    await env.createDeployment('cordon', 1, 'steady');
    const m = await until('Running', async () =>
      (await env.machines('cordon')).find((x) => phaseOf(x) === 'Running'),
    );
    const name = m.metadata.name ?? '';
    await env.client.patch(
      CoreResources.nodes,
      name,
      { metadata: { annotations: { [PRESERVE]: 'now' } } },
      { type: 'merge' },
    );
    await until('preserved by the node’s annotation', async () => {
      const got = await env.client.get<Machine>(MachineResource, name, NS);
      return got.status?.currentStatus?.preserveExpiryTime !== undefined;
    });
    const preserved = await until('the node reports Preserved', async () => {
      const n = await node(env, name);
      return n.status?.conditions?.some((c) => c.type === 'Preserved' && c.status === 'True') === true
        ? n
        : undefined;
    });
    expect(preserved.spec?.taints ?? [], 'a Running preserved machine is not tainted').to.not.deep.include({
      key: 'node.machine.sapcloud.io/preserved',
      effect: 'NoSchedule',
    });
    // Every state of the node from the user's cordon on: none may be schedulable again.
    let cordoned = false;
    const uncordoned: string[] = [];
    const stopWatch = await watchEvents<Node>(
      env.client,
      '',
      CoreResources.nodes,
      { fieldSelector: `metadata.name=${name}` },
      (ev) => {
        if (ev.type === 'DELETED') return;
        if (ev.object.spec?.unschedulable === true) cordoned = true;
        else if (cordoned) uncordoned.push(ev.object.metadata.resourceVersion ?? '');
      },
    );
    await env.client.patch(CoreResources.nodes, name, { spec: { unschedulable: true } }, { type: 'merge' });
    await env.client.patch(
      CoreResources.nodes,
      name,
      { metadata: { annotations: { [PRESERVE]: 'false' } } },
      { type: 'merge' },
    );
    const ended = await until('preservation ended', async () => {
      const n = await node(env, name);
      return n.status?.conditions?.some((c) => c.type === 'Preserved' && c.status === 'False') === true
        ? n
        : undefined;
    });
    expect(ended.spec?.unschedulable, 'still cordoned').to.equal(true);
    expect(
      ended.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled'],
      'our scale-down protection is removed',
    ).to.equal(undefined);
    const got = await env.client.get<Machine>(MachineResource, name, NS);
    expect(got.status?.currentStatus?.preserveExpiryTime).to.equal(undefined);
    expect(got.metadata.annotations?.['node.machine.sapcloud.io/last-applied-node-preserve-value']).to.equal(
      'false',
    );
    await stopWatch();
    expect(cordoned, "the watch saw the user's cordon").to.equal(true);
    expect(uncordoned, 'node states after the cordon that were schedulable again').to.deep.equal([]);
    await env.scale('cordon', 0);
  });
});
