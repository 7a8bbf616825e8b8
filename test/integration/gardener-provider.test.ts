// Our manager beside a gardener provider sidecar, as the chart runs them: gardener's own provider
// app (pkg/util/provider/app of MCM v0.62.1, unchanged, with the virtual cloud's Go driver that
// test/bench/anchor builds) manages the Machines, and our manager runs only the MachineSet,
// MachineDeployment and safety controllers. gardener's scenarios must pass with that split on a
// real kube-apiserver: create/delete, a deployment 0→1→6→2, a class change rollout, and nothing
// left behind.

import { expect } from 'chai';

import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
} from '../../lib/api/types.js';
import type { Machine, MachineDeployment } from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { gardenerMachineControllerPath, startGardenerMachineController } from '../harness/gardener.js';
import type { ManagedProcess } from '../harness/process.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const USER_DATA = '#!/bin/bash\n# join with <<BOOTSTRAP_TOKEN>> as <<MACHINE_NAME>>\n';

describe('beside gardener’s provider machine-controller (MCM v0.62.1 provider app, real process): our manager with --controllers=machineset,machinedeployment,safety', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;
  let sidecar: ManagedProcess;

  /** The virtual cloud's VMs: Nodes labelled as its records. */
  const vms = async (): Promise<Node[]> =>
    (await env.client.list<Node>(CoreResources.nodes, { labelSelector: 'virtual.mcm-ts.io/vm=true' })).items;
  const running = async (app: string): Promise<Machine[]> =>
    (await env.machines(app)).filter(
      (m) => phaseOf(m) === 'Running' && m.metadata.deletionTimestamp === undefined,
    );

  /** Every machine of app Running with its own VM, and exactly those VMs of the class. */
  async function settled(app: string, n: number, className: string): Promise<void> {
    await until(
      `${n} Running machines of ${app}, one VM each`,
      async () => {
        const ms = await env.machines(app);
        if (ms.length !== n || ms.some((m) => phaseOf(m) !== 'Running')) return false;
        const mine = (await vms()).filter(
          (v) => v.metadata.annotations?.['virtual.mcm-ts.io/machine-class'] === className,
        );
        const ids = new Set(mine.map((v) => v.spec?.providerID));
        return mine.length === n && ms.every((m) => ids.has(m.spec?.providerID));
      },
      150_000,
    );
  }

  before(async function () {
    this.timeout(240_000);
    gardenerMachineControllerPath();
    env = await LifecycleEnv.start();
    await env.client.create(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'gp-userdata', namespace: NS },
      data: { userData: Buffer.from(USER_DATA).toString('base64') },
    });
    for (const name of ['gp', 'gp-next']) {
      await env.client.create(MachineClassResource, {
        apiVersion: API_VERSION,
        kind: 'MachineClass',
        metadata: { name, namespace: NS },
        provider: 'virtual',
        providerSpec: {},
        secretRef: { name: 'gp-userdata', namespace: NS },
      });
    }
    sidecar = await startGardenerMachineController(env.cp, NS, ['--machine-safety-orphan-vms-period=10s']);
    await env.startManager({ controllers: ['machineset', 'machinedeployment', 'safety'] });
  });

  after(async () => {
    await env.stopManager();
    await sidecar.stop(5000);
    await env.stop();
  });

  it('scales a MachineDeployment 0→1→6→2: machines Running through gardener’s machine controller, one VM each', async () => {
    await env.createDeployment('gp', 0, 'gp');
    for (const n of [1, 6, 2]) {
      await env.scale('gp', n);
      await settled('gp', n, 'gp');
    }
    // The machines carry what gardener's controller writes: its finalizer and the node label.
    for (const m of await env.machines('gp')) {
      expect(m.metadata.finalizers).to.include('machine.sapcloud.io/machine-controller-manager');
      expect(m.metadata.labels?.node, `node label of ${m.metadata.name ?? ''}`)
        .to.be.a('string')
        .and.not.equal('');
    }
    const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'gp', NS);
    expect(mcd.status?.readyReplicas).to.equal(2);
  });

  it('replaces a deleted machine, and its VM goes with it', async () => {
    const [victim] = await running('gp');
    if (victim === undefined) throw new Error('no Running machine');
    await env.client.delete(MachineResource, victim.metadata.name ?? '', { namespace: NS });
    await until('the deleted machine gone', async () =>
      (await env.machines('gp')).every((m) => m.metadata.name !== victim.metadata.name),
    );
    await settled('gp', 2, 'gp');
    expect((await vms()).map((v) => v.spec?.providerID)).to.not.include(victim.spec?.providerID);
  });

  it('rolls every machine over to a new class, leaving no VM of the old one', async () => {
    await env.client.patch(
      MachineDeploymentResource,
      'gp',
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: 'gp-next' } } } } },
      { type: 'merge', namespace: NS },
    );
    await until(
      'the rollout to gp-next',
      async () => {
        const ms = await env.machines('gp');
        return (
          ms.length === 2 && ms.every((m) => m.spec?.class?.name === 'gp-next' && phaseOf(m) === 'Running')
        );
      },
      150_000,
    );
    await settled('gp', 2, 'gp-next');
    await until('no VM of the old class', async () =>
      (await vms()).every((v) => v.metadata.annotations?.['virtual.mcm-ts.io/machine-class'] !== 'gp'),
    );
  });

  it('deleting the deployment leaves no machine, no MachineSet and no VM', async () => {
    await env.client.delete(MachineDeploymentResource, 'gp', { namespace: NS });
    await until('no machine left', async () => (await env.machines('gp')).length === 0, 150_000);
    await until('no VM left', async () => (await vms()).length === 0, 60_000);
    await until(
      'no MachineSet left',
      async () => (await env.client.list(MachineSetResource, { namespace: NS })).items.length === 0,
      60_000,
    );
  });
});
