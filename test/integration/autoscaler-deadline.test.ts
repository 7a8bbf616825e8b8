// The autoscaler's scaling calls under pressure: a client budget eaten by a scale-up, concurrent
// updates of the MachineDeployment, and an API server that stops answering. A call either lands
// within its deadline or changes nothing.

import { status } from '@grpc/grpc-js';
import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { Annotation } from '../../lib/api/constants.js';
import { MachineDeploymentResource, type MachineDeployment } from '../../lib/api/types.js';
import { Manager } from '../../lib/manager.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { FaultProxy } from '../harness/proxy.js';
import { LifecycleEnv, NS, phaseOf, testLogger } from './env/lifecycle.js';
import { until } from './env/until.js';

describe('autoscaler scaling calls with deadlines (real kube-apiserver, manager with a budget of 2 qps)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;
  let proxy: FaultProxy;
  let manager: Manager;
  let ca: CloudProviderClient;
  const id = `${NS}/dl`;

  const deployment = (): Promise<MachineDeployment> =>
    env.client.get<MachineDeployment>(MachineDeploymentResource, 'dl', NS);

  /** The node of a Running machine of the group, as the autoscaler names it. */
  async function runningNode(exclude: string[] = []): Promise<{ providerID: string; name: string }> {
    return until('a Running machine with a node', async () => {
      const nodes = await env.nodes();
      for (const m of await env.machines('dl')) {
        if (phaseOf(m) !== 'Running' || m.metadata.deletionTimestamp !== undefined) continue;
        const n = nodes.find((x) => x.metadata.name === m.metadata.labels?.node);
        if (n?.spec?.providerID !== undefined && !exclude.includes(n.metadata.name ?? ''))
          return { providerID: n.spec.providerID, name: n.metadata.name ?? '' };
      }
      return undefined;
    });
  }

  before(async function () {
    this.timeout(240_000);
    env = await LifecycleEnv.start();
    await env.createClass('virtual', {});
    const server = new URL(env.cp.server);
    proxy = new FaultProxy(server.hostname, Number(server.port));
    const port = await proxy.start();
    const kc = new KubeConfig();
    kc.loadFromFile(env.cp.kubeconfigPath);
    const cluster = kc.getCurrentCluster();
    if (cluster === null) throw new Error('no cluster');
    kc.clusters = [{ ...cluster, server: `https://127.0.0.1:${port}` }];
    await env.createDeployment('dl', 3, 'virtual');
    manager = new Manager(
      env.config({
        kubeApiQps: 2,
        kubeApiBurst: 2,
        grpcAddress: '127.0.0.1:0',
        grpcInsecure: true,
        nodeGroups: [{ min: 1, max: 60, namespace: NS, name: 'dl' }],
      }),
      { logger: testLogger(), controlKubeConfig: kc, registry: newRegistry() },
    );
    await manager.start();
    ca = cloudProviderClient(`127.0.0.1:${manager.grpcPort}`);
    await until(
      '3 Running machines',
      async () => (await env.machines('dl')).filter((m) => phaseOf(m) === 'Running').length === 3,
      120_000,
    );
  });

  after(async () => {
    ca.close();
    await manager.stop();
    await proxy.stop();
    await env.stop();
  });

  it('DeleteNodes with a 1 s deadline lands while a 3→40 scale-up has used up the controllers’ budget and updates the deployment', async () => {
    await env.scale('dl', 40);
    // The controllers now queue dozens of requests behind a budget of 2 per second and write the
    // deployment's status as machines appear: the autoscaler's write must not wait behind them.
    await until('the scale-up under way', async () => (await env.machines('dl')).length >= 6, 60_000);
    const victim = await runningNode();
    await ca.call('NodeGroupDeleteNodes', { id, nodes: [victim] }, { deadlineMs: 1000 });
    const mcd = await deployment();
    expect(mcd.spec?.replicas).to.equal(39);
    expect(mcd.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '').to.contain(`${victim.name}~`);
  });

  it('DeleteNodes whose deadline passes while the API server does not answer changes nothing, also once it answers again', async () => {
    const before = await deployment();
    const victim = await runningNode(
      (before.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '')
        .split(',')
        .map((e) => e.split('~')[0] ?? ''),
    );
    proxy.pause();
    let code: number | undefined;
    try {
      await ca.call('NodeGroupDeleteNodes', { id, nodes: [victim] }, { deadlineMs: 1000 });
    } catch (err) {
      code = grpcCode(err);
    } finally {
      // Give the server time to see its deadline pass with the write still stuck, then let the
      // connection flow again: a write that was merely held back would land now.
      await new Promise((r) => setTimeout(r, 1500));
      proxy.resume();
    }
    expect(code).to.equal(status.DEADLINE_EXCEEDED);
    await new Promise((r) => setTimeout(r, 3000));
    const after = await deployment();
    expect(after.spec?.replicas, 'replicas unchanged').to.equal(before.spec?.replicas);
    expect(after.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '').to.not.contain(
      `${victim.name}~`,
    );
  });
});
