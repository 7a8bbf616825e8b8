// Scenario 8: a zone's hosts degrade together. A fleet spread over three zones (one
// MachineDeployment per zone, as gardener deploys workers) runs a Deployment spread over them, under
// a PodDisruptionBudget. Then EC2's status checks report every instance of one zone impaired at
// once, for longer than --aws-impaired-timeout, while their kubelets still run (their Nodes stay
// Ready). The manager must replace them all, but never more than the deployment's replacement
// budget at a time, draining each node with evictions (the PDB respected, no pod deleted without
// one) because its kubelet can still act on them.
//
// Real parts: kube-apiserver, kube-scheduler, kube-controller-manager (Deployment, PDB), kwok, the
// EC2 emulator behind the fault proxy (which rewrites DescribeInstanceStatus to report the zone's
// instances impaired, and gives instances EC2's resource names), our manager (in process). The
// figures come from the etcd recorder.

import { expect } from 'chai';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type Machine,
  type MachineClass,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Pod, PodDisruptionBudget } from '../../lib/kube/types.js';
import {
  REGION,
  addSubnet,
  instanceIdOf,
  isLive,
  sampleMachineClass,
  taggedInstances,
  tagOf,
} from '../harness/ec2cloud.js';
import { impairedStatus } from '../harness/ec2proxy.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { startAwsE2eEnv, type AwsE2eEnv } from '../e2e/awsenv.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { watchEvents } from '../integration/env/watch.js';
import { analyze } from './analysis.js';
import { Recorder } from './recorder.js';
import { recordRow } from './results.js';
import { size } from './env.js';

const ZONES = [`${REGION}a`, `${REGION}b`, `${REGION}c`];
const PER_ZONE = size(10, 4);
const BUDGET = size(3, 2);
/** One node a pod (1.5 of 2 CPUs), one spare node a zone. */
const TYPE = { type: 'm5.large', capacity: { cpu: '2', memory: '8Gi', pods: '20' } };
const PODS = ZONES.length * (PER_ZONE - 1);
const MAX_UNAVAILABLE = size(3, 2);
const APP = 'zone8-pods';
const POOL = 'zone8';
const poolOf = (zone: string): string => `zone8-${zone.slice(-1)}`;

interface PodCondition {
  type?: string;
  status?: string;
}

function podReady(p: Pod): boolean {
  if (p.metadata.deletionTimestamp !== undefined || p.status?.phase !== 'Running') return false;
  const conditions = Array.isArray(p.status.conditions) ? (p.status.conditions as PodCondition[]) : [];
  return conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

describe(`chaos 8: a zone's ${PER_ZONE} instances impaired at once, their nodes still Ready`, function () {
  this.timeout(900_000);
  let aws: AwsE2eEnv | undefined;
  let recorder: Recorder | undefined;

  before(async () => {
    aws = await startAwsE2eEnv({
      capacityByType: { [TYPE.type]: TYPE.capacity },
      withProxy: () => undefined,
      resourceNames: true,
      manager: {
        awsInstanceStatusIntervalMs: 1_000,
        awsImpairedTimeoutMs: 2_000,
        // Long enough that only a blocked eviction, not this test's pace, could force a drain.
        machineDrainTimeoutMs: 600_000,
      },
    });
    const { env, cloud } = aws;
    recorder = new Recorder(env.cp.etcdEndpoint);
    await recorder.start();
    for (const [i, zone] of ZONES.entries()) {
      const subnet = i === 0 ? cloud.subnetId : await addSubnet(cloud, zone, i + 1);
      const cls = sampleMachineClass(cloud, poolOf(zone));
      cls.providerSpec.machineType = TYPE.type;
      cls.providerSpec.networkInterfaces = [{ subnetID: subnet, securityGroupIDs: [cloud.securityGroupId] }];
      await env.client.create<MachineClass>(MachineClassResource, cls);
      await env.createDeployment(
        poolOf(zone),
        PER_ZONE,
        poolOf(zone),
        {},
        { nodeTemplate: { metadata: { labels: { pool: POOL } } } },
      );
      await env.client.patch(
        MachineDeploymentResource,
        poolOf(zone),
        { metadata: { annotations: { 'mcm-ts.io/max-unhealthy-replacements': String(BUDGET) } } },
        { type: 'merge', namespace: NS },
      );
    }
  });

  after(async () => {
    recorder?.stop();
    await aws?.stop();
  });

  it(`replaces them all, never more than the budget of ${BUDGET} at a time, draining with evictions: no pod deleted without one, the PDB held`, async () => {
    if (aws === undefined || recorder === undefined) throw new Error('no environment');
    const { env, cloud, proxy } = aws;
    if (proxy === undefined) throw new Error('no proxy');
    const impairedZone = ZONES[0] ?? '';
    const group = poolOf(impairedZone);

    const pods = async (): Promise<Pod[]> =>
      (await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${APP}` })).items;
    const running = async (zone: string): Promise<Machine[] | undefined> => {
      const ms = (await env.machines(poolOf(zone))).filter((m) => m.metadata.deletionTimestamp === undefined);
      return ms.length === PER_ZONE && ms.every((m) => m.status?.currentStatus?.phase === 'Running')
        ? ms
        : undefined;
    };
    for (const zone of ZONES)
      await until(`${PER_ZONE} Running machines in ${zone}`, () => running(zone), 240_000);

    // The workload: a pod a node, spread over the zones, at most MAX_UNAVAILABLE down at once.
    const deployment = nodeFillingDeployment({
      name: APP,
      namespace: NS,
      pool: POOL,
      replicas: PODS,
      spreadOverZones: true,
    });
    await env.client.create(AppsDeployments, deployment);
    await env.client.create<PodDisruptionBudget>(CoreResources.podDisruptionBudgets, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: APP, namespace: NS },
      spec: { maxUnavailable: MAX_UNAVAILABLE, selector: { matchLabels: { app: APP } } },
    });
    await until(`${PODS} pods Ready`, async () => (await pods()).filter(podReady).length === PODS, 180_000);

    const victims = (await running(impairedZone)) ?? [];
    const victimIds = new Set(victims.map((m) => instanceIdOf(m.spec?.providerID ?? '')));
    const fromRev = recorder.lastEventRev();

    // Ready pods counted after every change while the zone is replaced: the PDB must hold.
    const podsNow = new Map<string, Pod>();
    let minReady = PODS;
    let counting = false;
    const countReady = (): void => {
      if (counting) minReady = Math.min(minReady, [...podsNow.values()].filter(podReady).length);
    };
    const stopPodWatch = await watchEvents<Pod>(
      env.client,
      NS,
      CoreResources.pods,
      { labelSelector: `app=${APP}` },
      (ev) => {
        if (ev.type === 'DELETED') podsNow.delete(ev.object.metadata.name ?? '');
        else podsNow.set(ev.object.metadata.name ?? '', ev.object);
        countReady();
      },
      (items) => {
        for (const p of items) podsNow.set(p.metadata.name ?? '', p);
      },
    );

    // EC2 reports every instance of the zone impaired since ten minutes ago: all are due at once.
    const t0 = Date.now();
    counting = true;
    countReady();
    proxy.rule({
      action: 'DescribeInstanceStatus',
      rewrite: (xml) =>
        impairedStatus(xml, victimIds, { checks: ['systemStatus'], since: new Date(t0 - 600_000) }),
    });

    // Replaced: the zone's machines Running on new instances, every impaired one's machine gone
    // (its instance terminated with it), the pods Ready.
    const victimNames = new Set(victims.map((m) => m.metadata.name ?? ''));
    const replaced = async (): Promise<boolean> => {
      const ms = await running(impairedZone);
      return (
        ms !== undefined &&
        ms.every((m) => !victimIds.has(instanceIdOf(m.spec?.providerID ?? ''))) &&
        (await env.machines(group)).every((m) => !victimNames.has(m.metadata.name ?? '')) &&
        (await pods()).filter(podReady).length === PODS
      );
    };
    try {
      await until(
        `every impaired machine of ${impairedZone} replaced, ${PODS} pods Ready`,
        replaced,
        600_000,
      );
    } finally {
      counting = false;
      await stopPodWatch();
    }
    const convergeMs = Date.now() - t0;
    const toRev = recorder.lastEventRev();

    const figures = analyze(recorder.timeline(), { namespace: NS, deployment: group, fromRev, toRev });
    const others = ZONES.slice(1).map((zone) =>
      analyze(recorder?.timeline() ?? [], { namespace: NS, deployment: poolOf(zone), fromRev, toRev }),
    );
    const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
    const forced = events.filter((e) => e.reason === 'DrainForced').length;
    const waited = events.filter((e) => e.reason === 'ReplacementBudgetExhausted').length;
    const live = (await taggedInstances(cloud.ec2)).filter(isLive);
    const liveMachines = new Set(
      (await Promise.all(ZONES.map((z) => env.machines(poolOf(z))))).flat().map((m) => m.metadata.name ?? ''),
    );
    const orphans = live
      .filter((i) => !liveMachines.has(tagOf(i, 'Name') ?? ''))
      .map((i) => i.InstanceId ?? '');
    const stillImpaired = live
      .filter((i) => victimIds.has(i.InstanceId ?? ''))
      .map((i) => i.InstanceId ?? '');

    recordRow({
      id: '8',
      title: `${PER_ZONE} instances of one zone impaired at once (3 zones × ${PER_ZONE}, ${PODS} pods, PDB maxUnavailable ${MAX_UNAVAILABLE}, budget ${BUDGET})`,
      convergeMs,
      timeoutMs: 600_000,
      beyondLimit: Math.max(figures.beyondLimit, ...others.map((o) => o.beyondLimit)),
      orphans: orphans.length,
      wronglyDeleted: figures.wronglyDeleted.length + others.reduce((n, o) => n + o.wronglyDeleted.length, 0),
      notes: [
        `at most ${figures.peakFailedOrGoing} machines Failed or going at once (budget ${BUDGET})`,
        `${waited} waits for the budget reported`,
        `${forced} drains forced, min ${minReady} of ${PODS} pods Ready (PDB floor ${PODS - MAX_UNAVAILABLE})`,
        `${figures.machinesCreated} created / ${figures.deletions.length} deleted in ${impairedZone}, ${others.reduce((n, o) => n + o.deletions.length, 0)} deleted elsewhere`,
      ].join('; '),
    });

    expect(figures.peakFailedOrGoing, 'never more than the budget Failed or going at once').to.be.at.most(
      BUDGET,
    );
    expect(figures.peakFailedOrGoing, 'the budget was used (the replacements ran side by side)').to.equal(
      BUDGET,
    );
    expect(waited, 'the machines over the budget waited, and said so').to.be.above(0);
    expect(forced, 'Ready nodes: every pod left by an eviction, none deleted without one').to.equal(0);
    expect(minReady, 'the PDB held').to.be.at.least(PODS - MAX_UNAVAILABLE);
    expect(figures.deletions.length, `all ${PER_ZONE} replaced, each once`).to.equal(PER_ZONE);
    expect(stillImpaired, 'no impaired instance left').to.deep.equal([]);
    expect(
      others.map((o) => o.deletions.length),
      'the other zones untouched',
    ).to.deep.equal(others.map(() => 0));
    expect(figures.beyondLimit, figures.firstBeyond).to.equal(0);
    expect(
      [...figures.wronglyDeleted, ...others.flatMap((o) => o.wronglyDeleted)].map(
        (d) => `${d.machine}: ${d.why}`,
      ),
      'machines deleted that were not chosen',
    ).to.deep.equal([]);
    expect(orphans, 'instances without a machine').to.deep.equal([]);
  });
});
