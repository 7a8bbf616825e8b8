// Our manager beside gardener's real AWS provider sidecar, as the chart runs them: gardener's
// machine-controller of machine-controller-manager-provider-aws v0.28.0 (unchanged, built from the
// release's source in ../shared/third_party by `bash hack/tools.sh mcm-aws-anchor`) manages the
// Machines against the EC2 emulator, and our manager runs only the MachineSet, MachineDeployment
// and safety controllers. gardener's scenarios must pass with that split: create/delete, a
// deployment 0→1→6→2, a machine-type rollout within its surge bounds, an orphan instance collected,
// a class without ami starting nothing, and nothing left behind.

import { expect } from 'chai';

import { RunInstancesCommand, type Instance } from '@aws-sdk/client-ec2';

import { MachinePhase } from '../../lib/api/constants.js';
import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineClass,
} from '../../lib/api/types.js';
import type { Node } from '../../lib/kube/types.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import {
  CLUSTER_TAG,
  REGION,
  ROLE_TAG,
  isLive,
  provisionCloud,
  applySampleClass,
  instanceIdOf,
  tagOf,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { gardenerAwsMachineControllerPath, startGardenerMachineController } from '../harness/gardener.js';
import { startMoto, type Moto } from '../harness/moto.js';
import type { ManagedProcess } from '../harness/process.js';
import { FleetWatch } from './env/fleetwatch.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

describe('beside gardener’s AWS machine-controller (provider-aws v0.28.0, real process) on the EC2 emulator: our manager with --controllers=machineset,machinedeployment,safety', function () {
  this.timeout(240_000);
  let moto: Moto;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  let sidecar: ManagedProcess;

  const live = async (): Promise<Instance[]> => (await taggedInstances(cloud.ec2)).filter(isLive);

  /** The machines of app: n, all Running with a Ready Node of their own live instance, no other instance of the class's type. */
  async function settled(app: string, n: number, machineType: string): Promise<Machine[]> {
    return until(
      `${n} Running machines of ${app}, one live ${machineType} instance each`,
      async () => {
        const ms = await env.machines(app);
        if (ms.length !== n || ms.some((m) => phaseOf(m) !== MachinePhase.Running)) return undefined;
        const nodes = new Map((await env.nodes()).map((node) => [node.metadata.name ?? '', node]));
        for (const m of ms) {
          const node = nodes.get(m.metadata.labels?.node ?? '');
          if (node === undefined || !isReady(node)) return undefined;
          if (instanceIdOf(node.spec?.providerID ?? '') !== instanceIdOf(m.spec?.providerID ?? ''))
            return undefined;
        }
        const ids = (await live())
          .filter((i) => i.InstanceType === machineType)
          .map((i) => i.InstanceId ?? '');
        const mine = ms.map((m) => instanceIdOf(m.spec?.providerID ?? ''));
        return ids.length === n && mine.every((id) => ids.includes(id)) ? ms : undefined;
      },
      180_000,
    );
  }

  const applyClass = (name: string, edit?: (c: MachineClass) => void): Promise<void> =>
    applySampleClass(env.client, cloud, NS, name, edit);

  before(async function () {
    this.timeout(240_000);
    const binary = gardenerAwsMachineControllerPath();
    moto = await startMoto();
    env = await LifecycleEnv.start({ kwok: true });
    cloud = await provisionCloud(moto.endpoint);
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
      // A real instance boots before its kubelet registers; gardener's controller takes a Node that
      // exists before its CreateMachine call returned for a stale one.
      bootDelayMs: 2_000,
    });
    kubelet.start();
    await applyClass('gaws');
    await applyClass('gaws-large', (c) => {
      c.providerSpec.machineType = 'm5.large';
    });
    await applyClass('gaws-no-ami', (c) => {
      delete c.providerSpec.ami;
    });
    sidecar = await startGardenerMachineController(env.cp, NS, ['--machine-safety-orphan-vms-period=10s'], {
      command: binary,
      // The AWS SDK's standard endpoint variable, as the chart's sidecar env would set it.
      env: { ...process.env, AWS_ENDPOINT_URL_EC2: moto.endpoint },
    });
    await env.startManager({ controllers: ['machineset', 'machinedeployment', 'safety'] });
  });

  after(async () => {
    await env.stopManager();
    await sidecar.stop(5000);
    await kubelet.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    await env.stop();
    await moto.stop();
  });

  it('scales gardener’s sample class 0→1→6→2: machines Running through gardener’s AWS controller, one tagged instance each', async () => {
    await env.createDeployment('gaws', 0, 'gaws');
    let ms: Machine[] = [];
    for (const n of [1, 6, 2]) {
      await env.scale('gaws', n);
      ms = await settled('gaws', n, 't2.large');
    }
    const instances = new Map((await live()).map((i) => [i.InstanceId ?? '', i]));
    for (const m of ms) {
      const name = m.metadata.name ?? '';
      expect(m.metadata.finalizers, `finalizers of ${name}`).to.include(
        'machine.sapcloud.io/machine-controller-manager',
      );
      expect(m.spec?.providerID, `providerID of ${name}`).to.match(/^aws:\/\/\/eu-west-1\/i-/);
      const instance = instances.get(instanceIdOf(m.spec?.providerID ?? ''));
      expect(instance && tagOf(instance, 'Name'), `Name tag of ${name}'s instance`).to.equal(name);
      expect(instance && tagOf(instance, ROLE_TAG), `role tag of ${name}'s instance`).to.equal('1');
    }
    const mcd = await env.client.get(MachineDeploymentResource, 'gaws', NS);
    expect((mcd as { status?: { readyReplicas?: number } }).status?.readyReplicas).to.equal(2);
  });

  it('replaces a deleted machine, and its instance is terminated', async () => {
    const [victim] = await env.machines('gaws');
    if (victim === undefined) throw new Error('no machine of gaws');
    const victimInstance = instanceIdOf(victim.spec?.providerID ?? '');
    await env.client.delete(MachineResource, victim.metadata.name ?? '', { namespace: NS });
    await until('the deleted machine gone', async () =>
      (await env.machines('gaws')).every((m) => m.metadata.name !== victim.metadata.name),
    );
    const ms = await settled('gaws', 2, 't2.large');
    expect(ms.map((m) => instanceIdOf(m.spec?.providerID ?? ''))).to.not.include(victimInstance);
    const gone = (await taggedInstances(cloud.ec2)).find((i) => i.InstanceId === victimInstance);
    expect(gone?.State?.Name, 'the deleted machine’s instance').to.be.oneOf(['shutting-down', 'terminated']);
  });

  it('an instance with the cluster and role tags and no machine is terminated by gardener’s orphan collection; the machines’ instances stay', async () => {
    const kept = (await env.machines('gaws')).map((m) => instanceIdOf(m.spec?.providerID ?? ''));
    const run = await cloud.ec2.send(
      new RunInstancesCommand({
        ImageId: cloud.ami,
        InstanceType: 't2.large',
        MinCount: 1,
        MaxCount: 1,
        SubnetId: cloud.subnetId,
        TagSpecifications: [
          {
            ResourceType: 'instance',
            Tags: [
              { Key: CLUSTER_TAG, Value: '1' },
              { Key: ROLE_TAG, Value: '1' },
              { Key: 'Name', Value: 'gaws-no-such-machine' },
            ],
          },
        ],
      }),
    );
    const orphan = run.Instances?.[0]?.InstanceId ?? '';
    expect(orphan).to.match(/^i-/);
    await until(
      'the orphan instance terminated',
      async () =>
        (await taggedInstances(cloud.ec2)).find((i) => i.InstanceId === orphan)?.State?.Name === 'terminated',
      90_000,
    );
    expect((await live()).map((i) => i.InstanceId).sort()).to.deep.equal([...kept].sort());
  });

  it('rolls to another machineType within maxSurge 1 / maxUnavailable 0, terminating every old instance', async () => {
    const old = (await env.machines('gaws')).map((m) => instanceIdOf(m.spec?.providerID ?? ''));
    const watch = new FleetWatch(env, 'gaws');
    await watch.start();
    await env.client.patch(
      MachineDeploymentResource,
      'gaws',
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: 'gaws-large' } } } } },
      { type: 'merge', namespace: NS },
    );
    await until(
      'every machine of the new class',
      async () => {
        const ms = await env.machines('gaws');
        return ms.length === 2 && ms.every((m) => m.spec?.class?.name === 'gaws-large');
      },
      180_000,
    );
    await settled('gaws', 2, 'm5.large');
    await watch.stop();
    expect(watch.maxTotal, 'never more than replicas + maxSurge machines').to.be.at.most(3);
    expect(watch.minRunning, 'never fewer than replicas - maxUnavailable Running').to.be.at.least(2);
    // The watch saw the rollout itself: old and new machines at once, each new one created and
    // each old one deleted while it watched.
    expect(watch.mixed, 'old and new machines existed at once').to.equal(true);
    expect(watch.created.size, 'new machines created while watched').to.equal(2);
    expect(watch.deleted.size, 'old machines deleted while watched').to.equal(2);
    await until('the old instances terminated', async () => {
      const all = await taggedInstances(cloud.ec2);
      return old.every((id) => all.find((i) => i.InstanceId === id)?.State?.Name === 'terminated');
    });
    expect((await live()).map((i) => i.InstanceType)).to.deep.equal(['m5.large', 'm5.large']);
  });

  it('a class without ami starts no instance; gardener’s controller reports the field on the machine and deletes it once the class is fixed', async () => {
    await env.createDeployment('gaws-bad', 1, 'gaws-no-ami');
    const machine = await until(
      'the machine reports its class problem',
      async () => {
        const [m] = await env.machines('gaws-bad');
        return m?.status?.lastOperation?.description?.includes('AMI is required') === true ? m : undefined;
      },
      60_000,
    );
    const name = machine.metadata.name ?? '';
    expect(machine.spec?.providerID ?? '').to.equal('');
    // Our MachineSet controller keeps exactly one machine for it, not a stream of replacements.
    expect((await env.machines('gaws-bad')).map((m) => m.metadata.name)).to.deep.equal([name]);
    // gardener's AWS driver validates the class before a delete too, so the machine stays (with
    // its deletion timestamp) until the class is fixed; fixing it then deletes the machine without
    // ever starting an instance.
    await env.client.delete(MachineDeploymentResource, 'gaws-bad', { namespace: NS });
    await until('the machine marked for deletion', async () => {
      const [m] = await env.machines('gaws-bad');
      return m?.metadata.deletionTimestamp !== undefined;
    });
    await env.client.patch(
      MachineClassResource,
      'gaws-no-ami',
      { providerSpec: { ami: cloud.ami } },
      { type: 'merge', namespace: NS },
    );
    await until('no machine of gaws-bad', async () => (await env.machines('gaws-bad')).length === 0, 120_000);
    expect(
      (await taggedInstances(cloud.ec2)).filter((i) => tagOf(i, 'Name') === name),
      'no instance was ever started for the machine',
    ).to.deep.equal([]);
  });

  it('deleting the deployment leaves no machine, no MachineSet and no live instance', async () => {
    await env.client.delete(MachineDeploymentResource, 'gaws', { namespace: NS });
    await until('no machine left', async () => (await env.machines('gaws')).length === 0, 150_000);
    await until('no live instance left', async () => (await live()).length === 0, 60_000);
    await until(
      'no MachineSet left',
      async () => (await env.client.list(MachineSetResource, { namespace: NS })).items.length === 0,
      60_000,
    );
  });
});
