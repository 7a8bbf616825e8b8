// The newest pinned cluster-autoscaler against our externalgrpc server while gardener's provider
// app manages the Machines (the provider-sidecar split: our manager runs only the MachineSet,
// MachineDeployment and safety controllers): it scales a group up for pending pods and back down,
// and the machines deleted are exactly the ones it chose.

import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { expect } from 'chai';

import { API_VERSION, MachineClassResource, MachineDeploymentResource } from '../../lib/api/types.js';
import type { MachineDeployment } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Pod } from '../../lib/kube/types.js';
import { startAutoscaler, requireAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { gardenerMachineControllerPath, startGardenerMachineController } from '../harness/gardener.js';
import type { ManagedProcess } from '../harness/process.js';
import { newestAutoscalerVersion } from '../harness/tools.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { LifecycleEnv, NS, phaseOf } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';

const USER_DATA = '#!/bin/bash\n# join with <<BOOTSTRAP_TOKEN>> as <<MACHINE_NAME>>\n';

describe('cluster-autoscaler e2e with a gardener provider sidecar (our MachineSet/MachineDeployment/safety controllers, gardener’s machine controller)', function () {
  this.timeout(900_000);
  const version = newestAutoscalerVersion();
  let env: LifecycleEnv;
  let sidecar: ManagedProcess | undefined;
  let ca: Autoscaler | undefined;

  const pods = async (): Promise<Pod[]> =>
    (
      await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: 'app=split-pods' })
    ).items.filter((p) => p.metadata.deletionTimestamp === undefined);
  const running = (p: Pod): boolean => p.spec?.nodeName !== undefined && p.status?.phase === 'Running';

  before(async function () {
    this.timeout(300_000);
    requireAutoscaler(version);
    gardenerMachineControllerPath();
    env = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
    const dir = path.join(env.cp.workDir, 'tls');
    mkdirSync(dir);
    const tls = writeMtlsBundle(dir, createMtlsBundle());
    await env.client.create(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'split-userdata', namespace: NS },
      data: { userData: Buffer.from(USER_DATA).toString('base64') },
    });
    // gardener's provider app wants cpu, gpu and memory in a class's node template.
    await env.client.create(MachineClassResource, {
      apiVersion: API_VERSION,
      kind: 'MachineClass',
      metadata: { name: 'split', namespace: NS },
      provider: 'virtual',
      providerSpec: {},
      secretRef: { name: 'split-userdata', namespace: NS },
      nodeTemplate: {
        capacity: { cpu: '2', gpu: '0', memory: '4Gi', pods: '20' },
        instanceType: 'v-split',
        region: 'eu-virtual',
        zone: 'eu-virtual-a',
      },
    });
    await env.createDeployment(
      'split',
      0,
      'split',
      {},
      { nodeTemplate: { metadata: { labels: { pool: 'split' } } } },
    );
    await env.client.patch(
      MachineDeploymentResource,
      'split',
      { metadata: { annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '5' } } },
      { type: 'merge', namespace: NS },
    );
    sidecar = await startGardenerMachineController(env.cp, NS, ['--machine-drain-timeout=30s']);
    await env.startManager({
      controllers: ['machineset', 'machinedeployment', 'safety'],
      grpcAddress: '127.0.0.1:0',
      grpcTlsCertFile: tls.serverCertFile,
      grpcTlsKeyFile: tls.serverKeyFile,
      grpcClientCaFile: tls.caFile,
    });
    ca = await startAutoscaler({
      version,
      controlPlane: env.cp,
      address: `127.0.0.1:${env.manager?.grpcPort ?? 0}`,
      tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
      grpcTimeout: '10s',
    });
  });

  after(async () => {
    await ca?.stop();
    await env.stopManager();
    await sidecar?.stop(5000);
    await env.stop();
  });

  it(`cluster-autoscaler ${version} scales the group up from zero for pending pods through gardener’s machine controller`, async () => {
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: 'split-pods', namespace: NS, pool: 'split', replicas: 3 }),
    );
    await until(
      '3 pods running on new nodes',
      async () => {
        const ps = await pods();
        return ps.length === 3 && ps.every(running);
      },
      300_000,
    );
    // gardener's machine controller marks a machine Running on its own pass after the Node turned
    // Ready, which may come after the scheduler has already placed a pod there.
    await until(
      '3 machines Running',
      async () => {
        const ms = await env.machines('split');
        return ms.length === 3 && ms.every((m) => phaseOf(m) === 'Running');
      },
      60_000,
    );
    const machines = await env.machines('split');
    expect(machines.filter((m) => phaseOf(m) === 'Running')).to.have.length(3);
    const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'split', NS);
    expect(mcd.spec?.replicas).to.equal(3);
  });

  it(`cluster-autoscaler ${version} scales down exactly the idle machines and leaves the busy one`, async () => {
    await env.client.patch(
      AppsDeployments,
      'split-pods',
      { spec: { replicas: 1 } },
      { type: 'merge', namespace: NS },
    );
    const busy = await until('one pod left', async () => {
      const ps = await pods();
      return ps.length === 1 && ps[0]?.spec?.nodeName !== undefined ? ps[0].spec.nodeName : undefined;
    });
    await until(
      'the group down to the busy machine',
      async () => (await env.machines('split')).length === 1,
      300_000,
    );
    const left = await env.machines('split');
    expect(left.map((m) => m.metadata.labels?.node)).to.deep.equal([busy]);
    const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'split', NS);
    expect(mcd.spec?.replicas).to.equal(1);
    expect((await pods()).map((p) => p.spec?.nodeName)).to.deep.equal([busy]);
  });
});
