// Scenario 7: Spot capacity goes away. Every instance of a spot node group gets EC2's two-minute
// interruption warning (EventBridge events on the SQS queue the manager reads) while EC2 refuses
// new Spot capacity (InsufficientInstanceCapacity from the fault proxy). The stock
// cluster-autoscaler, with the priority expander ranking the spot group above an on-demand group,
// must move the 6 pods of a Deployment (PodDisruptionBudget maxUnavailable 3) to on-demand nodes:
// the replacements' launches get EC2's InsufficientInstanceCapacity, which marks the offering, so
// the autoscaler's new spot machines are refused without calling EC2; the spot group's machines
// report OutOfResources, the autoscaler backs the group off and scales the on-demand group, and the
// interrupted nodes are drained within the budget before EC2's two minutes are up. Then capacity
// returns: once the offering's mark and the back-off have ended, new pods go to spot nodes again.
//
// Real parts: kube-apiserver, kube-scheduler, kube-controller-manager (Deployment, PDB), kwok,
// the EC2 and SQS emulator, our manager (in process), and the cluster-autoscaler binary. The
// figures come from the etcd recorder, as for the other scenarios, plus the pods' own times.

import { expect } from 'chai';
import yaml from 'js-yaml';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { ConfigMap, CoreEvent, Pod, PodDisruptionBudget } from '../../lib/kube/types.js';
import { requireAutoscaler, backOffOf, klogTime, type Autoscaler } from '../harness/autoscaler.js';
import {
  REGION,
  ZONE,
  instanceIdOf,
  isLive,
  sampleMachineClass,
  tagOf,
  taggedInstances,
} from '../harness/ec2cloud.js';
import { spotWarning } from '../harness/eventbridge.js';
import { autoscalerUnavailableReason, newestAutoscalerVersion } from '../harness/tools.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { startAwsE2eEnv, type AwsE2eEnv } from '../e2e/awsenv.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { watchEvents } from '../integration/env/watch.js';
import { analyze } from './analysis.js';
import { Recorder } from './recorder.js';
import { recordNotRun, recordRow } from './results.js';
import { seconds } from './env.js';

const version = newestAutoscalerVersion();
const POOL = 'spot7';
const SPOT = `${POOL}-spot`;
const ON_DEMAND = `${POOL}-ondemand`;
const APP = `${POOL}-pods`;
const PODS = 6;
const MAX_UNAVAILABLE = 3;
/** 1.5 of 4 CPUs per pod: two pods to a node. */
const TYPE = { type: 'm5.xlarge', capacity: { cpu: '4', memory: '16Gi', pods: '20' } };
/** How long an offering stays unavailable here (the default is 3 minutes; shorter to see it end). */
const OFFERING_TTL_MS = 40_000;
/** The autoscaler's status ConfigMap (the harness runs it with --namespace=kube-system). */
const STATUS_CONFIGMAP = 'cluster-autoscaler-status';
const ICE = {
  status: 500,
  code: 'InsufficientInstanceCapacity',
  message: `There is no Spot capacity available that matches your request (${ZONE}).`,
};

interface PodCondition {
  type?: string;
  status?: string;
  lastTransitionTime?: string;
}

const conditionsOf = (p: Pod): PodCondition[] =>
  Array.isArray(p.status?.conditions) ? (p.status.conditions as PodCondition[]) : [];

function podReady(p: Pod): boolean {
  if (p.metadata.deletionTimestamp !== undefined || p.status?.phase !== 'Running') return false;
  return conditionsOf(p).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** When the pod was bound to a node (its PodScheduled condition), if it was. */
function scheduledAt(p: Pod): number | undefined {
  const c = conditionsOf(p).find((x) => x.type === 'PodScheduled' && x.status === 'True');
  return c?.lastTransitionTime === undefined ? undefined : Date.parse(c.lastTransitionTime);
}

describe(`chaos 7: every spot instance interrupted with no Spot capacity left; cluster-autoscaler ${version} (priority expander) falls back to on-demand`, function () {
  this.timeout(900_000);
  let aws: AwsE2eEnv | undefined;
  let ca: Autoscaler | undefined;
  let recorder: Recorder | undefined;

  before(async function () {
    const reason = autoscalerUnavailableReason(version);
    if (reason !== undefined) recordNotRun('7', 'Spot interruptions with the autoscaler', reason);
    requireAutoscaler(version);
    aws = await startAwsE2eEnv({
      capacityByType: { [TYPE.type]: TYPE.capacity },
      withProxy: () => undefined,
      interruptionQueue: true,
      manager: { awsUnavailableOfferingTtlMs: OFFERING_TTL_MS },
    });
    const { env, cloud } = aws;
    recorder = new Recorder(env.cp.etcdEndpoint);
    await recorder.start();
    for (const [name, spot] of [
      [SPOT, true],
      [ON_DEMAND, false],
    ] as const) {
      const cls = sampleMachineClass(cloud, name);
      cls.providerSpec.machineType = TYPE.type;
      Reflect.deleteProperty(cls.providerSpec, 'spotPrice');
      if (spot) cls.providerSpec.instanceMarketOptions = { marketType: 'spot' };
      cls.nodeTemplate = { capacity: TYPE.capacity, instanceType: TYPE.type, region: REGION, zone: ZONE };
      await env.client.create<MachineClass>(MachineClassResource, cls);
      await env.createDeployment(
        name,
        0,
        name,
        {},
        { nodeTemplate: { metadata: { labels: { pool: POOL } } } },
      );
      await env.client.patch(
        MachineDeploymentResource,
        name,
        { metadata: { annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '6' } } },
        { type: 'merge', namespace: NS },
      );
    }
    // The priority expander's ConfigMap (in the autoscaler's namespace): spot first.
    await env.client.create<ConfigMap>(CoreResources.configMaps, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'cluster-autoscaler-priority-expander', namespace: 'kube-system' },
      data: { priorities: `50:\n  - .*/${SPOT}$\n10:\n  - .*/${ON_DEMAND}$\n` },
    });
    ca = await aws.startAutoscaler(version, {
      expander: 'priority',
      'scale-down-enabled': false,
      'initial-node-group-backoff-duration': '30s',
      'max-node-group-backoff-duration': '60s',
    });
  });

  after(async () => {
    recorder?.stop();
    await aws?.stop();
  });

  it('the 6 pods move to on-demand nodes within 3 minutes, none Pending over 150 s, none deleted by force; the spot group is backed off, then scales again once capacity returns', async () => {
    if (aws === undefined || recorder === undefined) throw new Error('no environment');
    const { env, cloud, proxy, queue } = aws;
    if (proxy === undefined || queue === undefined) throw new Error('no proxy or queue');
    const log = (): string => ca?.log() ?? '';
    const withLog = (err: unknown): never => {
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n--- cluster-autoscaler log (tail)\n${log().split('\n').slice(-40).join('\n')}`,
      );
    };
    const pods = async (): Promise<Pod[]> =>
      (await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${APP}` })).items;
    const nodesOf = async (group: string): Promise<Set<string>> =>
      new Set((await env.machines(group)).map((m) => m.metadata.labels?.node ?? '').filter((n) => n !== ''));
    /** The value of one of the manager's metrics (the sum of its series). */
    const managerMetric = async (name: string): Promise<number> => {
      const m = await env.manager?.registry.getSingleMetric(name)?.get();
      if (m === undefined) throw new Error(`the manager has no metric ${name}`);
      return m.values.reduce((sum, x) => sum + x.value, 0);
    };
    /** A node group's scale-up status in the autoscaler's status ConfigMap (Backoff, NoActivity, …). */
    const scaleUpStatusOf = async (group: string): Promise<string | undefined> => {
      const cm = await env.client.get<ConfigMap>(CoreResources.configMaps, STATUS_CONFIGMAP, 'kube-system');
      const status = yaml.load(cm.data?.status ?? '') as
        { nodeGroups?: { name?: string; scaleUp?: { status?: string } }[] } | undefined;
      return status?.nodeGroups?.find((g) => g.name === group)?.scaleUp?.status;
    };
    const runningOn = async (group: string, n: number): Promise<Pod[] | undefined> => {
      const nodes = await nodesOf(group);
      const ps = (await pods()).filter((p) => p.metadata.deletionTimestamp === undefined);
      return ps.length === n && ps.every((p) => podReady(p) && nodes.has(p.spec?.nodeName ?? ''))
        ? ps
        : undefined;
    };

    // The workload lands on spot nodes: the expander ranks that group first.
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: APP, namespace: NS, pool: POOL, replicas: PODS, memory: '256Mi' }),
    );
    await env.client.create<PodDisruptionBudget>(CoreResources.podDisruptionBudgets, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: APP, namespace: NS },
      spec: { maxUnavailable: MAX_UNAVAILABLE, selector: { matchLabels: { app: APP } } },
    });
    await until(`${PODS} pods Ready on spot nodes`, () => runningOn(SPOT, PODS), 180_000).catch(withLog);
    const victims: Machine[] = await env.machines(SPOT);
    expect(victims, 'three spot machines').to.have.length(3);
    expect((await env.machines(ON_DEMAND)).length, 'no on-demand machine yet').to.equal(0);
    const fromRev = recorder.lastEventRev();

    // EC2 has no Spot capacity left and warns every spot instance.
    proxy.rule({
      action: 'RunInstances',
      match: (params) => params.get('InstanceMarketOptions.MarketType') === 'spot',
      error: ICE,
    });
    proxy.resetCounts();

    // Ready pods counted after every change, from the warnings until the pods moved: the budget
    // allows 3 of 6 down at once.
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

    const t0 = Date.now();
    counting = true;
    countReady();
    /** EC2's two minutes count from each warning's time (whole seconds in the event). */
    const warnedAt = new Map<string, number>();
    for (const m of victims) {
      const warning = spotWarning(instanceIdOf(m.spec?.providerID ?? ''), new Date(t0));
      await queue.send(warning);
      warnedAt.set(m.metadata.name ?? '', Date.parse((JSON.parse(warning) as { time: string }).time));
    }

    let moved: Pod[];
    try {
      moved = await until(
        `${PODS} pods Ready on on-demand nodes`,
        () => runningOn(ON_DEMAND, PODS),
        180_000,
      ).catch(withLog);
    } finally {
      counting = false;
      await stopPodWatch();
    }
    const convergeMs = Date.now() - t0;
    // When each victim was gone (its object removed, after its instance was terminated), as the
    // etcd recorder saw it: no earlier than it happened.
    const rec = recorder;
    const goneAt = (name: string): number | undefined =>
      rec
        .timeline()
        .find(
          (e) => e.resource === 'machines' && e.namespace === NS && e.name === name && e.type === 'delete',
        )?.at;
    await until(
      'the interrupted machines gone',
      () => victims.every((v) => goneAt(v.metadata.name ?? '') !== undefined),
      120_000,
    );
    const victimGoneMs = victims.map((v) => {
      const name = v.metadata.name ?? '';
      return { name, ms: (goneAt(name) ?? Infinity) - (warnedAt.get(name) ?? 0) };
    });
    const toRev = recorder.lastEventRev();
    // Only the instances EC2 warned may be replaced as interrupted: a machine marked so otherwise
    // counts against the bound, and its deletion as not chosen.
    const interruptedInstances = victims.map((m) => m.spec?.providerID ?? '');
    const spotFigures = analyze(recorder.timeline(), {
      namespace: NS,
      deployment: SPOT,
      fromRev,
      toRev,
      interruptedInstances,
    });
    const onDemandFigures = analyze(recorder.timeline(), {
      namespace: NS,
      deployment: ON_DEMAND,
      fromRev,
      toRev,
      interruptedInstances,
    });

    // Pending time of every pod created since the warnings: creation to binding.
    const pendingMs = moved
      .filter((p) => Date.parse(p.metadata.creationTimestamp ?? '') >= t0 - 1000)
      .map((p) => (scheduledAt(p) ?? Date.now()) - Date.parse(p.metadata.creationTimestamp ?? ''));
    const maxPendingMs = Math.max(0, ...pendingMs);
    const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
    const forced = events.filter((e) => e.reason === 'DrainForced').length;
    const spotLaunchesRefusedByEc2 = proxy.faulted.get('RunInstances') ?? 0;
    const backOff = backOffOf(log(), `${NS}/${SPOT}`);
    // The first back-off line's klog time (month, day and time of day, in UTC: see klogTime).
    const backOffLine = log()
      .split('\n')
      .find((l) => l.includes(`Disabling scale-up for node group ${NS}/${SPOT} until`));
    const backedOffAt = backOffLine === undefined ? undefined : klogTime(backOffLine, t0);
    const backedOffMs = backedOffAt === undefined ? undefined : backedOffAt - t0;
    const live = (await taggedInstances(cloud.ec2)).filter(isLive);
    const liveMachines = new Set(
      [...(await env.machines(SPOT)), ...(await env.machines(ON_DEMAND))].map((m) => m.metadata.name ?? ''),
    );
    const orphans = live
      .filter((i) => !liveMachines.has(tagOf(i, 'Name') ?? ''))
      .map((i) => i.InstanceId ?? '');
    const notes = [
      `interrupted machines gone ${victimGoneMs.map((v) => seconds(v.ms)).join(', ')} after their warnings`,
      `${PODS} pods moved, ${forced} drains forced (pods deleted without eviction), min ${minReady} of ${PODS} pods Ready (budget ${PODS - MAX_UNAVAILABLE})`,
      `max Pending ${seconds(maxPendingMs)} over ${pendingMs.length} new pods`,
      backOff.outOfResource
        ? `spot group backed off as OutOfResource ${backedOffMs === undefined ? '' : `${seconds(backedOffMs)} after the warnings`}`
        : 'spot group NOT backed off as OutOfResource',
      `${spotLaunchesRefusedByEc2} spot launches answered InsufficientInstanceCapacity by EC2 (the rest refused by the mark)`,
      `machines: spot ${spotFigures.machinesCreated} created / ${spotFigures.deletions.length} deleted, on-demand ${onDemandFigures.machinesCreated} created`,
    ];
    recordRow({
      id: '7',
      title: `every spot instance of 3 interrupted, no Spot capacity: cluster-autoscaler ${version} moves ${PODS} pods to on-demand`,
      convergeMs,
      timeoutMs: 180_000,
      beyondLimit: Math.max(spotFigures.beyondLimit, onDemandFigures.beyondLimit),
      orphans: orphans.length,
      wronglyDeleted: spotFigures.wronglyDeleted.length + onDemandFigures.wronglyDeleted.length,
      notes: notes.join('; '),
    });

    expect(
      victimGoneMs
        .filter((v) => v.ms >= 120_000)
        .map((v) => `${v.name} gone ${seconds(v.ms)} after its warning`),
      "interrupted machines not gone before EC2's two minutes from their warnings were up",
    ).to.deep.equal([]);
    expect(convergeMs, 'all pods on on-demand nodes within 3 minutes').to.be.below(180_000);
    expect(maxPendingMs, `no pod Pending over 150 s (${pendingMs.join(', ')} ms)`).to.be.at.most(150_000);
    expect(forced, 'no drain forced: every pod left by an eviction the budget allowed').to.equal(0);
    expect(minReady, 'the budget held').to.be.at.least(PODS - MAX_UNAVAILABLE);
    expect(backOff.outOfResource, 'the autoscaler backed the spot group off as OutOfResource').to.equal(true);
    expect(backOff.timedOut, "the spot group's scale-up did not time out").to.equal(false);
    // The three replacements are launched at once, before the first answer marks the offering;
    // every later spot launch (the autoscaler's) is refused by the mark without calling EC2.
    expect(spotLaunchesRefusedByEc2, 'spot launches that reached EC2').to.be.within(1, 3);
    expect(spotFigures.beyondLimit, spotFigures.firstBeyond).to.equal(0);
    expect(onDemandFigures.beyondLimit, onDemandFigures.firstBeyond).to.equal(0);
    expect(
      [...spotFigures.wronglyDeleted, ...onDemandFigures.wronglyDeleted].map((d) => `${d.machine}: ${d.why}`),
      'machines deleted that were not chosen',
    ).to.deep.equal([]);
    expect(orphans, 'instances without a machine').to.deep.equal([]);
    await until(
      'the spot group at 0 replicas with no machine (the autoscaler removed its failed ones)',
      async () =>
        (await env.client.get<MachineDeployment>(MachineDeploymentResource, SPOT, NS)).spec?.replicas === 0 &&
        (await env.machines(SPOT)).length === 0,
      60_000,
    );

    // Capacity returns. Once the offering's mark and the back-off have ended, two more pods make
    // the autoscaler try the spot group first again, and it launches.
    proxy.clearRules();
    await until(
      "the offering's mark ended (no offering marked unavailable)",
      async () => (await managerMetric('mcm_aws_unavailable_offerings')) === 0,
      OFFERING_TTL_MS + 10_000,
    );
    await until(
      "the spot group's back-off ended (the autoscaler's status says NoActivity)",
      async () => (await scaleUpStatusOf(`${NS}/${SPOT}`)) === 'NoActivity',
      70_000,
    ).catch(withLog);
    await env.client.patch(
      AppsDeployments,
      APP,
      { spec: { replicas: PODS + 2 } },
      { type: 'merge', namespace: NS },
    );
    await until(
      'two more pods Ready on a spot node',
      async () => {
        const nodes = await nodesOf(SPOT);
        return (await pods()).filter((p) => podReady(p) && nodes.has(p.spec?.nodeName ?? '')).length === 2;
      },
      120_000,
    ).catch(withLog);
    const spotLive = (await taggedInstances(cloud.ec2)).filter(
      (i) => isLive(i) && i.InstanceLifecycle === 'spot',
    );
    expect(spotLive, 'one live spot instance again').to.have.length(1);
  });
});
