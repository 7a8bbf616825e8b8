// The externalgrpc server's reads cost the API server nothing (issue #49): every question the
// cluster-autoscaler asks in a loop (the groups, the group of each node, each group's nodes, size,
// template, options and prices) is answered from the shared informers' caches. Counted, not
// timed: the API requests of the client the server and its informers use, from its own metrics,
// between the caches' sync and the end of the calls, must be zero (watches left out: one that
// ends meanwhile is opened again by its informer, whatever the calls do). A read that goes to the API
// server, at 5,000 nodes a request per node per autoscaler loop, fails here.

import * as grpc from '@grpc/grpc-js';
import { expect } from 'chai';
import type { Registry } from 'prom-client';

import { Label } from '../../lib/api/constants.js';
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
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { AutoscalerServer } from '../../lib/autoscaler/server.js';
import { SharedInformers } from '../../lib/controllers/context.js';
import { KubeClient } from '../../lib/kube/client.js';
import { RealClock } from '../../lib/kube/clock.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { clientRequestCounts } from './env/budget.js';

const NS = 'default';
const GROUPS = 20;
const PER_GROUP = 50;
const CLASS = 'reads';

/** Runs `work` with at most `n` at once. */
async function pool(work: (() => Promise<unknown>)[], n: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < work.length) await work[next++]?.();
    }),
  );
}

describe(`externalgrpc reads at ${GROUPS * PER_GROUP} nodes in ${GROUPS} groups (real kube-apiserver)`, function () {
  this.timeout(300_000);
  let cp: ControlPlane;
  let seeder: KubeClient;
  let registry: Registry;
  let informers: SharedInformers | undefined;
  let server: AutoscalerServer | undefined;
  let ca: CloudProviderClient | undefined;

  before(async () => {
    cp = await startControlPlane({ installCRDs: true });
    seeder = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 2000, burst: 2000, userAgent: 'seed' });
    await seeder.create<MachineClass>(MachineClassResource, {
      apiVersion: API_VERSION,
      kind: 'MachineClass',
      metadata: { name: CLASS, namespace: NS },
      provider: 'virtual',
      providerSpec: {},
      nodeTemplate: {
        capacity: { cpu: '4', memory: '8Gi', pods: '110' },
        instanceType: 'reads.4x8',
        region: 'reads',
        zone: 'reads-a',
      },
    });
    const work: (() => Promise<unknown>)[] = [];
    for (let g = 0; g < GROUPS; g++) {
      const name = `pool-${g}`;
      const template = {
        metadata: { labels: { pool: name } },
        spec: { class: { kind: 'MachineClass', name: CLASS } },
      };
      const mcd = await seeder.create<MachineDeployment>(MachineDeploymentResource, {
        apiVersion: API_VERSION,
        kind: 'MachineDeployment',
        metadata: {
          name,
          namespace: NS,
          annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: String(PER_GROUP * 2) },
        },
        spec: { replicas: PER_GROUP, selector: { matchLabels: { pool: name } }, template },
      });
      const ms = await seeder.create<MachineSet>(MachineSetResource, {
        apiVersion: API_VERSION,
        kind: 'MachineSet',
        metadata: {
          name: `${name}-a`,
          namespace: NS,
          labels: { pool: name },
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind: 'MachineDeployment',
              name,
              uid: mcd.metadata.uid ?? '',
              controller: true,
            },
          ],
        },
        spec: { replicas: PER_GROUP, selector: { matchLabels: { pool: name } }, template },
      });
      for (let i = 0; i < PER_GROUP; i++) {
        const m = `${name}-m${i}`;
        const providerID = `virtual://reads/${m}`;
        work.push(async () => {
          await seeder.create<Machine>(MachineResource, {
            apiVersion: API_VERSION,
            kind: 'Machine',
            metadata: {
              name: m,
              namespace: NS,
              labels: { pool: name, [Label.Node]: m },
              ownerReferences: [
                {
                  apiVersion: API_VERSION,
                  kind: 'MachineSet',
                  name: `${name}-a`,
                  uid: ms.metadata.uid ?? '',
                  controller: true,
                },
              ],
            },
            spec: { class: { kind: 'MachineClass', name: CLASS }, providerID },
          });
          await seeder.patch(
            MachineResource,
            m,
            { status: { currentStatus: { phase: 'Running', lastUpdateTime: new Date().toISOString() } } },
            { type: 'merge', namespace: NS, subresource: 'status' },
          );
        });
        work.push(async () => {
          await seeder.create<Node>(CoreResources.nodes, {
            apiVersion: 'v1',
            kind: 'Node',
            metadata: { name: m, labels: { pool: name, [Label.NodeMachineName]: m } },
            spec: { providerID },
          });
          await seeder.patch(
            CoreResources.nodes,
            m,
            {
              status: {
                capacity: { cpu: '4', memory: '8Gi', pods: '110' },
                allocatable: { cpu: '4', memory: '8Gi', pods: '110' },
                conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }],
              },
            },
            { type: 'merge', subresource: 'status' },
          );
        });
      }
    }
    await pool(work, 32);

    // The server as the manager builds it: one client for its writes and its informers.
    registry = newRegistry();
    const client = new KubeClient({
      kubeConfig: cp.kubeConfig,
      qps: 200,
      burst: 400,
      userAgent: 'reads',
      registry,
    });
    informers = new SharedInformers({ client, target: client, namespace: NS, logger: nullLogger, registry });
    server = new AutoscalerServer({
      address: '127.0.0.1:0',
      tls: undefined,
      groups: [],
      gpuLabel: '',
      gpuTypes: [],
      namespace: NS,
      client,
      informers,
      clock: new RealClock(),
      logger: nullLogger,
      registry,
      unhealthy: () => undefined,
    });
    informers.start();
    await informers.waitForSync();
    await server.start();
    ca = cloudProviderClient(`127.0.0.1:${server.port}`);
  });

  after(async () => {
    ca?.close();
    await server?.stop();
    await informers?.stop();
    await cp.stop();
  });

  it('answers every question of an autoscaler loop, for every node and group, without one API request', async () => {
    if (ca === undefined) throw new Error('no client');
    const call = ca.call.bind(ca);
    // What the informers' lists and watches cost is not the calls': counted from here.
    const before = await clientRequestCounts(registry);

    await call('Refresh');
    const groups = ((await call('NodeGroups')).nodeGroups as { id: string }[]).map((g) => g.id);
    expect(groups, 'every deployment a group').to.have.length(GROUPS);
    let forNode = 0;
    for (let g = 0; g < GROUPS; g++) {
      for (let i = 0; i < PER_GROUP; i++) {
        const m = `pool-${g}-m${i}`;
        const r = await call('NodeGroupForNode', { node: { name: m, providerID: `virtual://reads/${m}` } });
        if ((r.nodeGroup as { id?: string } | undefined)?.id === `${NS}/pool-${g}`) forNode++;
      }
    }
    expect(forNode, 'every node in its group').to.equal(GROUPS * PER_GROUP);
    for (const id of groups) {
      const nodes = (await call('NodeGroupNodes', { id })).instances as unknown[];
      expect(nodes, id).to.have.length(PER_GROUP);
      expect((await call('NodeGroupTargetSize', { id })).targetSize, id).to.equal(PER_GROUP);
      await call('NodeGroupTemplateNodeInfo', { id });
      // No per-group options here: the autoscaler's defaults apply (UNIMPLEMENTED).
      await call('NodeGroupGetOptions', { id, defaults: {} }).catch((err: unknown) => {
        if (grpcCode(err) !== grpc.status.UNIMPLEMENTED) throw err;
      });
      const m = `${id.slice(NS.length + 1)}-m0`;
      const now = Math.floor(Date.now() / 1000);
      await call('PricingNodePrice', {
        node: { name: m, providerID: `virtual://reads/${m}` },
        startTimestamp: { seconds: now },
        endTimestamp: { seconds: now + 3600 },
      });
    }
    await call('GPULabel');
    await call('GetAvailableGPUTypes');
    await call('Cleanup');

    const after = await clientRequestCounts(registry);
    // A watch that ends and is opened again meanwhile is the informers', not the calls'.
    const made = [...after]
      .filter(([k]) => !k.startsWith('watch '))
      .map(([k, n]) => [k, n - (before.get(k) ?? 0)] as const)
      .filter(([, d]) => d > 0)
      .map(([k, d]) => `${k}: ${d}`);
    expect(made, 'API requests made by the calls').to.deep.equal([]);
  });
});
