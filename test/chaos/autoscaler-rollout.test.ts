// Scenario 6: the real cluster-autoscaler scales a MachineDeployment while it rolls out. Pending
// pods (one per node) make the autoscaler grow the group through our externalgrpc server (mTLS)
// in the middle of a class change; afterwards fewer pods make it delete the idle nodes. Machines
// must never exceed replicas + maxSurge (with replicas changed by the autoscaler under the
// rollout), the autoscaler's DeleteNodes must remove exactly the machines it named, and the
// rollout may only delete old-set machines. kube-scheduler and kwok run the pods.

import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { MachineDeploymentResource } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import type { Pod } from '../../lib/kube/types.js';
import { requireAutoscaler, startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { freePort, removeOnExit } from '../harness/process.js';
import { autoscalerUnavailableReason, newestAutoscalerVersion } from '../harness/tools.js';
import { NS, nodeTemplate } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { ChaosEnv, expectClean, fullRunOnly, size } from './env.js';
import { recordNotRun } from './results.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { CoreResources } from '../../lib/kube/resources.js';

const version = newestAutoscalerVersion();

fullRunOnly(`chaos 6: cluster-autoscaler ${version} scaling during a rollout`, function () {
  this.timeout(900_000);
  let env: ChaosEnv | undefined;
  let ca: Autoscaler | undefined;
  const initial = 3;
  const peakPods = size(7, 5);
  const finalPods = 2;

  before(async function () {
    const reason = autoscalerUnavailableReason(version);
    if (reason !== undefined) {
      recordNotRun('6a', 'cluster-autoscaler scale-up during a rollout', reason);
      recordNotRun('6b', 'cluster-autoscaler scale-down after the rollout', reason);
    }
    requireAutoscaler(version);
    const tlsDir = mkdtempSync(path.join(os.tmpdir(), 'mcm-chaos-tls-'));
    removeOnExit(tlsDir);
    const tls = writeMtlsBundle(tlsDir, createMtlsBundle());
    const grpcPorts = [await freePort(), await freePort()];
    env = await ChaosEnv.start({
      controlPlane: { scheduler: true, controllerManager: true, kwok: true },
      managerFlags: [
        `--grpc-tls-cert-file=${tls.serverCertFile}`,
        `--grpc-tls-key-file=${tls.serverKeyFile}`,
        `--grpc-client-ca-file=${tls.caFile}`,
        '--machine-drain-timeout=30s',
      ],
      replicaFlags: (i) => Promise.resolve([`--grpc-address=127.0.0.1:${grpcPorts[i] ?? 0}`]),
    });
    const e = env;
    for (const [name, spec] of [
      ['v1', {}],
      // New machines take a few seconds to boot, so that the rollout lasts while the autoscaler acts.
      ['v2', { bootDelay: '4s' }],
    ] as const) {
      await e.lc.createClass(name, spec, {
        nodeTemplate: nodeTemplate({ capacity: { cpu: '2', memory: '4Gi', pods: '20' }, zone: 'chaos-a' }),
      });
    }
    await e.lc.createDeployment(
      's6',
      initial,
      'v1',
      { strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } } },
      { nodeTemplate: { metadata: { labels: { pool: 's6' } } } },
    );
    await e.client.patch(
      MachineDeploymentResource,
      's6',
      { metadata: { annotations: { [GroupAnnotation.MinSize]: '1', [GroupAnnotation.MaxSize]: '12' } } },
      { type: 'merge', namespace: NS },
    );
    await e.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: 's6-pods', namespace: NS, pool: 's6', replicas: initial }),
    );
    await e.waitConverged('s6', 120_000);
    await until('pods running', async () => (await running()) === initial, 120_000);
    // Only the leader serves the autoscaler (a standby does not listen); no leader is killed in
    // this scenario, so the autoscaler talks to the leader's port.
    const leader = await e.leader();
    ca = await startAutoscaler({
      version,
      controlPlane: e.lc.cp,
      address: `127.0.0.1:${grpcPorts[e.replicas.indexOf(leader)] ?? 0}`,
      tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
      grpcTimeout: '10s',
    });
  });

  after(async () => {
    await ca?.stop();
    await env?.stop();
  });

  async function pods(): Promise<Pod[]> {
    if (env === undefined) return [];
    return (
      await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: 'app=s6-pods' })
    ).items.filter((p) => p.metadata.deletionTimestamp === undefined);
  }

  async function running(): Promise<number> {
    return (await pods()).filter((p) => p.spec?.nodeName !== undefined && p.status?.phase === 'Running')
      .length;
  }

  async function scalePods(n: number): Promise<void> {
    await env?.client.patch(
      AppsDeployments,
      's6-pods',
      { spec: { replicas: n } },
      { type: 'merge', namespace: NS },
    );
  }

  /** Pods, nodes and the autoscaler's log tail, for a failure message. */
  async function dump(): Promise<string> {
    if (env === undefined) return '';
    const lines: string[] = [];
    for (const p of await pods()) {
      const conditions = (p.status?.conditions ?? []) as { type: string; status: string; message?: string }[];
      const cond = conditions.map(
        (c) => `${c.type}=${c.status}${c.message === undefined ? '' : ` (${c.message})`}`,
      );
      lines.push(
        `pod ${p.metadata.name ?? ''} node=${p.spec?.nodeName ?? '-'} phase=${p.status?.phase ?? ''} ${cond.join(' ')}`,
      );
    }
    for (const n of await env.lc.nodes()) {
      const ready = n.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? '?';
      lines.push(
        `node ${n.metadata.name ?? ''} ready=${ready} unschedulable=${String(n.spec?.unschedulable ?? false)} deleting=${String(n.metadata.deletionTimestamp !== undefined)} taints=${JSON.stringify(n.spec?.taints ?? [])} annotations=${JSON.stringify(n.metadata.annotations ?? {})}`,
      );
    }
    lines.push('--- cluster-autoscaler log (tail)', ...(ca?.log().split('\n').slice(-40) ?? []));
    return lines.join('\n');
  }

  /** until(), with pods, nodes and the autoscaler's log in the error. */
  async function waitFor(
    what: string,
    fn: () => Promise<boolean> | boolean,
    timeoutMs: number,
  ): Promise<void> {
    try {
      await until(what, fn, timeoutMs);
    } catch (err) {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await dump()}`, { cause: err });
    }
  }

  const replicasOf = (e: ChaosEnv): number =>
    (e.recorder.live.machinedeployments.get(`${NS}/s6`)?.object?.spec as { replicas?: number } | undefined)
      ?.replicas ?? 0;

  it('scales up in the middle of a rollout, and the rollout completes', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const m = await e.measure({
      id: '6a',
      title: `cluster-autoscaler scale-up (pods ${initial}→${peakPods}) during a rollout of ${initial} (maxSurge 1)`,
      deployment: 's6',
      start: async () => {
        await e.changeClass('s6', 'v2');
        await scalePods(peakPods);
      },
      during: async () => {
        // The point of the scenario: the autoscaler grows the group while old machines remain.
        await waitFor(
          'the autoscaler grows the deployment while old-class machines remain',
          () => replicasOf(e) > initial && e.counts('s6', 'v1').active > 0,
          120_000,
        );
        return `autoscaler raised replicas to ${replicasOf(e)} with ${e.counts('s6', 'v1').active} old machines left`;
      },
      alsoWaitFor: async () => {
        await waitFor(`${peakPods} pods running`, async () => (await running()) === peakPods, 240_000);
        return `${peakPods} pods running on ${replicasOf(e)} machines`;
      },
      timeoutMs: 420_000,
    });
    expectClean(m);
  });

  it('scales down the idle nodes after the rollout, deleting exactly the machines it chose', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const m = await e.measure({
      id: '6b',
      title: `cluster-autoscaler scale-down (pods ${peakPods}→${finalPods}) after the rollout`,
      deployment: 's6',
      start: () => scalePods(finalPods),
      during: async () => {
        await until(
          'the autoscaler shrinks the deployment to the busy nodes',
          () => replicasOf(e) === finalPods,
          300_000,
        );
        return undefined;
      },
      alsoWaitFor: async () => {
        await waitFor(`${finalPods} pods running`, async () => (await running()) === finalPods, 120_000);
        return undefined;
      },
      timeoutMs: 420_000,
    });
    expectClean(m);
    // Only the autoscaler decides here: every machine deleted must be one it named, and nothing
    // may be created while it only removes nodes.
    expect(
      m.analysis.deletions.filter((d) => !d.why.startsWith('marked')).map((d) => `${d.machine} (${d.why})`),
      'machines deleted that the autoscaler did not name',
    ).to.deep.equal([]);
    expect(m.analysis.machinesCreated, 'machines created during the autoscaler scale-down').to.equal(0);
  });
});
