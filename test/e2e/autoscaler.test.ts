// The stock cluster-autoscaler (every pinned version) against our externalgrpc server, with a real
// kube-apiserver, kube-scheduler, kube-controller-manager and kwok running the pods: scale-up for
// pending pods, scale from zero, scale-down of exactly the idle machines, backing off a group that
// is out of capacity, and scale-up during a rollout.

import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { MachineDeploymentResource, type Machine, type MachineDeployment } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import type { KubeClient } from '../../lib/kube/client.js';
import { isNotFound } from '../../lib/kube/errors.js';
import type { KubeObject, Node, Pod } from '../../lib/kube/types.js';
import { startAutoscaler, skipUnlessAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { autoscalerVersions } from '../harness/tools.js';
import { LifecycleEnv, NS, nodeTemplate } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';

const DeploymentsResource = {
  group: 'apps',
  version: 'v1',
  plural: 'deployments',
  kind: 'Deployment',
  namespaced: true,
} as const;

interface AppsDeployment extends KubeObject {
  spec: Record<string, unknown>;
}

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

function seconds(since: number): string {
  return `${((Date.now() - since) / 1000).toFixed(1)}s`;
}

/** Pods that each need a node of their own (1.5 of 2 CPUs) on nodes labelled pool=<pool>. */
function podDeployment(name: string, pool: string, replicas: number): AppsDeployment {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: NS },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          terminationGracePeriodSeconds: 0,
          nodeSelector: { pool },
          containers: [
            {
              name: 'app',
              image: 'registry.invalid/app:1',
              resources: { requests: { cpu: '1500m', memory: '256Mi' } },
            },
          ],
        },
      },
    },
  };
}

describe('cluster-autoscaler e2e (real autoscaler, kube-scheduler, kwok)', function () {
  this.timeout(900_000);
  let env: LifecycleEnv;
  let client: KubeClient;

  const pods = async (app: string): Promise<Pod[]> =>
    (
      await client.list<Pod>(
        { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true },
        { namespace: NS, labelSelector: `app=${app}` },
      )
    ).items;
  const machinesOf = async (mcd: string): Promise<Machine[]> => env.machines(mcd);
  const running = (p: Pod): boolean => p.spec?.nodeName !== undefined && p.status?.phase === 'Running';

  before(async () => {
    env = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
    client = env.client;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'mcm-e2e-tls-'));
    const files = writeMtlsBundle(dir, createMtlsBundle());
    await env.startManager({
      grpcAddress: '127.0.0.1:0',
      grpcTlsCertFile: files.serverCertFile,
      grpcTlsKeyFile: files.serverKeyFile,
      grpcClientCaFile: files.caFile,
      machineDrainTimeoutMs: 30_000,
    });
    (env as unknown as { tls: typeof files }).tls = files;
  });

  after(async () => {
    await env.stop();
  });

  for (const version of autoscalerVersions()) {
    describe(`cluster-autoscaler ${version}`, () => {
      const p = `ca${version.replace(/\./g, '')}`;
      let ca: Autoscaler | undefined;

      before(async function () {
        skipUnlessAutoscaler(this, version);
        const tls = (
          env as unknown as { tls: { clientCertFile: string; clientKeyFile: string; caFile: string } }
        ).tls;
        // Two groups for the same pool, both at zero: "full" fits the pods best (least waste) but
        // its zone has no capacity; "spare" has bigger nodes and room.
        await env.createClass(
          `${p}-full`,
          { zoneCapacity: { [`${p}-zone-full`]: 0 } },
          {
            nodeTemplate: nodeTemplate({
              capacity: { cpu: '2', memory: '4Gi', pods: '20' },
              zone: `${p}-zone-full`,
            }),
          },
        );
        await env.createClass(
          `${p}-spare`,
          {},
          {
            nodeTemplate: nodeTemplate({
              capacity: { cpu: '4', memory: '8Gi', pods: '20' },
              zone: `${p}-zone-spare`,
            }),
          },
        );
        for (const name of ['full', 'spare']) {
          await env.createDeployment(
            `${p}-${name}`,
            0,
            `${p}-${name}`,
            {},
            {
              nodeTemplate: { metadata: { labels: { pool: p } } },
            },
          );
          await client.patch(
            MachineDeploymentResource,
            `${p}-${name}`,
            { metadata: { annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '6' } } },
            { type: 'merge', namespace: NS },
          );
        }
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
        for (const name of [`${p}-pods`])
          await client.delete(DeploymentsResource, name, { namespace: NS }).catch(() => undefined);
        for (const name of ['full', 'spare']) {
          await client
            .delete(MachineDeploymentResource, `${p}-${name}`, { namespace: NS })
            .catch((err: unknown) => {
              if (!isNotFound(err)) throw err;
            });
        }
      });

      it('scales up from zero for pending pods, backs off the group out of capacity and scales the other one', async () => {
        const t0 = Date.now();
        await client.create(DeploymentsResource, podDeployment(`${p}-pods`, p, 3));
        let fullGrew = false;
        const scheduled = await until(
          '3 pods running on new nodes',
          async () => {
            const full = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-full`, NS);
            if ((full.spec?.replicas ?? 0) > 0) fullGrew = true;
            const ps = await pods(`${p}-pods`);
            return ps.length === 3 && ps.every(running) ? ps : undefined;
          },
          300_000,
        );
        console.log(`      [${version}] scale-up from zero with backoff: ${seconds(t0)}`);
        expect(fullGrew, 'the best-fitting group was tried first').to.equal(true);
        const spare = await machinesOf(`${p}-spare`);
        const nodes = await env.nodes();
        const spareNodes = new Set(spare.map((m) => m.metadata.labels?.node ?? m.metadata.name));
        for (const pod of scheduled)
          expect(spareNodes.has(pod.spec?.nodeName ?? ''), `pod on a spare node`).to.equal(true);
        for (const n of nodes.filter((x) => spareNodes.has(x.metadata.name ?? '')))
          expect(isReady(n)).to.equal(true);
        await until(
          'the full group back at 0 with no machine',
          async () => {
            const full = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-full`, NS);
            return full.spec?.replicas === 0 && (await machinesOf(`${p}-full`)).length === 0;
          },
          120_000,
        );
      });

      it('scales down exactly the idle machines and leaves the busy one', async () => {
        const t0 = Date.now();
        await client.patch(
          DeploymentsResource,
          `${p}-pods`,
          { spec: { replicas: 1 } },
          { type: 'merge', namespace: NS },
        );
        const busy = await until('one pod left', async () => {
          const ps = (await pods(`${p}-pods`)).filter((x) => x.metadata.deletionTimestamp === undefined);
          return ps.length === 1 && ps[0]?.spec?.nodeName !== undefined ? ps[0].spec.nodeName : undefined;
        });
        const before = (await machinesOf(`${p}-spare`)).map((m) => m.metadata.name ?? '');
        expect(before.length).to.be.greaterThanOrEqual(2);
        await until(
          'spare group down to the busy machine',
          async () => {
            const ms = await machinesOf(`${p}-spare`);
            return ms.length === 1 ? ms : undefined;
          },
          300_000,
        );
        console.log(`      [${version}] scale-down of idle nodes: ${seconds(t0)}`);
        const left = await machinesOf(`${p}-spare`);
        expect(left.map((m) => m.metadata.labels?.node ?? m.metadata.name)).to.deep.equal([busy]);
        const mcd = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-spare`, NS);
        expect(mcd.spec?.replicas).to.equal(1);
        const pod = (await pods(`${p}-pods`)).filter((x) => x.metadata.deletionTimestamp === undefined);
        expect(pod.map((x) => x.spec?.nodeName)).to.deep.equal([busy]);
      });

      it('scales up during a rollout and the rollout completes', async () => {
        const t0 = Date.now();
        await env.createClass(
          `${p}-spare-v2`,
          { bootDelay: '2s' },
          {
            nodeTemplate: nodeTemplate({
              capacity: { cpu: '4', memory: '8Gi', pods: '20' },
              zone: `${p}-zone-spare`,
            }),
          },
        );
        await client.patch(
          MachineDeploymentResource,
          `${p}-spare`,
          { spec: { template: { spec: { class: { kind: 'MachineClass', name: `${p}-spare-v2` } } } } },
          { type: 'merge', namespace: NS },
        );
        await client.patch(
          DeploymentsResource,
          `${p}-pods`,
          { spec: { replicas: 3 } },
          { type: 'merge', namespace: NS },
        );
        await until(
          '3 pods running and every machine from the new class',
          async () => {
            const ps = await pods(`${p}-pods`);
            const ms = await machinesOf(`${p}-spare`);
            return (
              ps.filter(running).length === 3 &&
              ms.length >= 3 &&
              ms.every(
                (m) =>
                  m.spec?.class?.name === `${p}-spare-v2` && m.status?.currentStatus?.phase === 'Running',
              )
            );
          },
          300_000,
        );
        console.log(`      [${version}] scale-up during a rollout: ${seconds(t0)}`);
        const mcd = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-spare`, NS);
        expect(mcd.spec?.replicas).to.be.greaterThanOrEqual(3);
      });
    });
  }
});
