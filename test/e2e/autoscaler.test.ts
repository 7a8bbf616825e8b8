// The stock cluster-autoscaler (every pinned version) against our externalgrpc server, with a real
// kube-apiserver, kube-scheduler, kube-controller-manager and kwok running the pods: scale-up for
// pending pods, scale from zero, scale-down of exactly the idle machines, backing off a group that
// is out of capacity, and scale-up during a rollout.

import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { expect } from 'chai';

import {
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import type { KubeClient } from '../../lib/kube/client.js';
import { isNotFound } from '../../lib/kube/errors.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { backOffOf, startAutoscaler, requireAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { autoscalerVersions } from '../harness/tools.js';
import { LifecycleEnv, NS, nodeTemplate } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { watchEvents } from '../integration/env/watch.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** How long the spare groups' nodes take from NotReady to Ready: short, but a real boot. */
const BOOT_DELAY = '2s';
const ROLLOUT_BOOT_DELAY = '15s';

function seconds(since: number): string {
  return `${((Date.now() - since) / 1000).toFixed(1)}s`;
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

  /** What the cluster looks like, printed when a scenario times out. */
  async function dump(prefix: string, ca: Autoscaler | undefined): Promise<string> {
    const lines: string[] = [];
    for (const m of await env.machines()) {
      if (!(m.metadata.name ?? '').startsWith(prefix)) continue;
      lines.push(
        `machine ${m.metadata.name ?? ''} class=${m.spec?.class?.name ?? ''} phase=${m.status?.currentStatus?.phase ?? ''} deleting=${String(m.metadata.deletionTimestamp !== undefined)} op=${m.status?.lastOperation?.description ?? ''}`,
      );
    }
    for (const d of (await client.list<MachineDeployment>(MachineDeploymentResource, { namespace: NS }))
      .items) {
      if (!(d.metadata.name ?? '').startsWith(prefix)) continue;
      lines.push(
        `mcd ${d.metadata.name ?? ''} replicas=${String(d.spec?.replicas)} annotations=${JSON.stringify(d.metadata.annotations)} conditions=${JSON.stringify(d.status?.conditions?.map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`))}`,
      );
    }
    for (const p of await pods(`${prefix}-pods`)) {
      lines.push(
        `pod ${p.metadata.name ?? ''} node=${p.spec?.nodeName ?? ''} phase=${p.status?.phase ?? ''}`,
      );
    }
    for (const n of await env.nodes()) {
      if (!(n.metadata.name ?? '').startsWith(prefix)) continue;
      lines.push(
        `node ${n.metadata.name ?? ''} ready=${String(isReady(n))} unschedulable=${String(n.spec?.unschedulable ?? false)} taints=${JSON.stringify(n.spec?.taints ?? [])} annotations=${JSON.stringify(n.metadata.annotations ?? {})}`,
      );
    }
    if (ca !== undefined) lines.push('--- cluster-autoscaler log (tail)', ...ca.log().split('\n').slice(-60));
    return lines.join('\n');
  }

  /** until(), with the cluster state in the error when it times out. */
  async function waitFor<T>(
    what: string,
    prefix: string,
    ca: Autoscaler | undefined,
    fn: () => Promise<T | undefined | false>,
    timeoutMs: number,
  ): Promise<T> {
    try {
      return await until(what, fn, timeoutMs);
    } catch (err) {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await dump(prefix, ca)}`, {
        cause: err,
      });
    }
  }

  before(async () => {
    env = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
    client = env.client;
    const dir = path.join(env.cp.workDir, 'tls');
    mkdirSync(dir);
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
        requireAutoscaler(version);
        const tls = (
          env as unknown as { tls: { clientCertFile: string; clientKeyFile: string; caFile: string } }
        ).tls;
        // Two groups for the same pool, both at zero: "full" fits the pods best (least waste) but
        // its zone has no capacity; "spare" has bigger nodes and room. Nodes boot as real ones do:
        // NotReady and tainted first, Ready after the boot delay.
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
          { bootDelay: BOOT_DELAY },
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
          await client.delete(AppsDeployments, name, { namespace: NS }).catch(() => undefined);
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
        await client.create(
          AppsDeployments,
          nodeFillingDeployment({ name: `${p}-pods`, namespace: NS, pool: p, replicas: 3, memory: '256Mi' }),
        );
        const scheduled = await waitFor(
          '3 pods running on new nodes',
          p,
          ca,
          async () => {
            const ps = await pods(`${p}-pods`);
            return ps.length === 3 && ps.every(running) ? ps : undefined;
          },
          300_000,
        );
        console.log(`      [${version}] scale-up from zero with backoff: ${seconds(t0)}`);
        // From the autoscaler's own log, not from sampling the deployment: the full group can grow
        // and be backed off again between two polls.
        expect(ca?.log() ?? '', 'the best-fitting group was tried first').to.contain(
          `Scale-up: setting group ${NS}/${p}-full size to`,
        );
        // Backed off for its machine's ResourceExhausted, not after max-node-provision-time.
        const backOff = backOffOf(ca?.log() ?? '', `${NS}/${p}-full`);
        expect(backOff.outOfResource, 'the autoscaler backed the full group off as OutOfResource').to.equal(
          true,
        );
        expect(backOff.timedOut, "the full group's scale-up did not time out").to.equal(false);
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
          AppsDeployments,
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
        await waitFor(
          'spare group down to the busy machine',
          p,
          ca,
          async () => {
            const ms = await machinesOf(`${p}-spare`);
            return ms.length === 1 ? ms : undefined;
          },
          180_000,
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
        // The deployment's replicas and its machines, in etcd's order (one resourceVersion counter
        // for every object): when the autoscaler raised replicas, and when the last machine of the
        // old class went away.
        let scaledUpAt: number | undefined;
        let lastOldGoneAt = 0;
        const rv = (o: { metadata: { resourceVersion?: string } }): number =>
          Number(o.metadata.resourceVersion ?? 0);
        const stopDeploymentWatch = await watchEvents<MachineDeployment>(
          client,
          NS,
          MachineDeploymentResource,
          { fieldSelector: `metadata.name=${p}-spare` },
          (ev) => {
            if ((ev.object.spec?.replicas ?? 0) > 1) scaledUpAt ??= rv(ev.object);
          },
        );
        // The old class's machines when the watch starts, and those whose deletion it delivered: the
        // wait below ends only once the watch itself has seen them go (a list can be ahead of it).
        const oldMachines = new Set<string>();
        const oldGone = new Set<string>();
        const stopMachineWatch = await watchEvents<Machine>(
          client,
          NS,
          MachineResource,
          {},
          (ev) => {
            if (ev.type === 'DELETED' && ev.object.spec?.class?.name === `${p}-spare`) {
              lastOldGoneAt = Math.max(lastOldGoneAt, rv(ev.object));
              oldGone.add(ev.object.metadata.name ?? '');
            }
          },
          (items) => {
            for (const m of items)
              if (m.spec?.class?.name === `${p}-spare`) oldMachines.add(m.metadata.name ?? '');
          },
        );
        expect(oldMachines.size, 'machines of the old class before the rollout').to.be.greaterThan(0);
        // The new class's nodes boot for longer than the autoscaler takes to notice the pending
        // pods, so the rollout is still under way when it raises replicas (with the short boot the
        // rollout could end first, and the test would prove nothing about the overlap).
        await env.createClass(
          `${p}-spare-v2`,
          { bootDelay: ROLLOUT_BOOT_DELAY },
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
          AppsDeployments,
          `${p}-pods`,
          { spec: { replicas: 3 } },
          { type: 'merge', namespace: NS },
        );
        await waitFor(
          '3 pods running, every machine from the new class, and the watch has seen the old ones deleted',
          p,
          ca,
          async () => {
            const ps = await pods(`${p}-pods`);
            const ms = await machinesOf(`${p}-spare`);
            return (
              ps.filter(running).length === 3 &&
              [...oldMachines].every((n) => oldGone.has(n)) &&
              ms.length >= 2 &&
              ms.every(
                (m) =>
                  m.spec?.class?.name === `${p}-spare-v2` && m.status?.currentStatus?.phase === 'Running',
              )
            );
          },
          180_000,
        );
        console.log(`      [${version}] scale-up during a rollout: ${seconds(t0)}`);
        await stopDeploymentWatch();
        await stopMachineWatch();
        const mcd = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-spare`, NS);
        expect(mcd.spec?.replicas, 'grown from 1 during the rollout').to.be.greaterThanOrEqual(2);
        expect(scaledUpAt, 'the watch saw replicas raised').to.not.equal(undefined);
        expect(
          lastOldGoneAt,
          'a machine of the old class still existed when the autoscaler raised replicas',
        ).to.be.greaterThan(scaledUpAt ?? Number.POSITIVE_INFINITY);
      });
    });
  }
});
