// The autoscaler's scaling calls under pressure: a client budget eaten by a scale-up, concurrent
// updates of the MachineDeployment, and a connection to the API server that stops delivering. A
// call either lands within its deadline or changes nothing: its write in flight is cancelled when
// the deadline passes, so a network that delivers again has nothing of it left to deliver.

import { status } from '@grpc/grpc-js';
import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { Annotation } from '../../lib/api/constants.js';
import { MachineDeploymentResource, type MachineDeployment } from '../../lib/api/types.js';
import { Manager } from '../../lib/manager.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { HttpFaultProxy } from '../harness/proxy.js';
import { LifecycleEnv, NS, phaseOf, testLogger } from './env/lifecycle.js';
import { until } from './env/until.js';

describe('autoscaler scaling calls with deadlines (real kube-apiserver, manager with a budget of 2 qps)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;
  let proxy: HttpFaultProxy;
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
    const kc = new KubeConfig();
    kc.loadFromFile(env.cp.kubeconfigPath);
    const cluster = kc.getCurrentCluster();
    if (cluster?.caData === undefined) throw new Error('the harness kubeconfig has no cluster CA');
    // The manager talks to the API server through a proxy that can stall the connection and tells
    // which requests it held back and which it sent on.
    proxy = new HttpFaultProxy(new URL(env.cp.server), Buffer.from(cluster.caData, 'base64'));
    const port = await proxy.start();
    kc.clusters = [{ ...cluster, server: `http://127.0.0.1:${port}` }];
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
    const stalledAt = Date.now();
    proxy.stall();
    let code: number | undefined;
    try {
      await ca.call('NodeGroupDeleteNodes', { id, nodes: [victim] }, { deadlineMs: 1000 });
    } catch (err) {
      code = grpcCode(err);
    } finally {
      // Give the server time to see its deadline pass with the write still held, then let the
      // connection deliver again: a write the server merely stopped waiting for would land now.
      await new Promise((r) => setTimeout(r, 1500));
      proxy.unstall();
    }
    expect(code).to.equal(status.DEADLINE_EXCEEDED);
    const writes = proxy.requests.filter(
      (r) => r.method === 'PATCH' && r.path.endsWith('/machinedeployments/dl') && r.at >= stalledAt,
    );
    expect(writes, 'the scaling write was sent while the connection stalled').to.not.deep.equal([]);
    await new Promise((r) => setTimeout(r, 3000));
    expect(
      writes.filter((r) => r.forwardedAt !== undefined),
      'scaling writes the API server received after the deadline',
    ).to.deep.equal([]);
    const after = await deployment();
    expect(after.spec?.replicas, 'replicas unchanged').to.equal(before.spec?.replicas);
    expect(after.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '').to.not.contain(
      `${victim.name}~`,
    );
  });
});
