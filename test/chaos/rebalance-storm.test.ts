// Scenario 9: a rebalance storm. AWS sends a rebalance recommendation to every instance of a spot
// pool at once. With --aws-rebalance-as-interruption the manager replaces the recommended machines,
// but as voluntary disruption: surge first, never more than the deployment's maxSurge above its
// replicas (its disruption budget bounding how many are replaced at once), every one replaced in
// the end. Meanwhile EC2 runs out of Spot capacity for a moment (one InsufficientInstanceCapacity),
// which marks the offering unavailable: no launch reaches EC2 for that offering while the mark
// stands, and the replacements resume when it ends.
//
// Real parts: kube-apiserver, kube-scheduler, kube-controller-manager, kwok, the EC2 and SQS
// emulator behind the fault proxy, our manager (in process). The figures come from the etcd
// recorder and the proxy's record of RunInstances calls.

import { expect } from 'chai';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent } from '../../lib/kube/types.js';
import {
  ZONE,
  instanceIdOf,
  isLive,
  sampleMachineClass,
  tagOf,
  taggedInstances,
} from '../harness/ec2cloud.js';
import { rebalanceRecommendation } from '../harness/eventbridge.js';
import { startAwsE2eEnv, type AwsE2eEnv } from '../e2e/awsenv.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { analyze } from './analysis.js';
import { Recorder } from './recorder.js';
import { recordRow } from './results.js';
import { seconds, size } from './env.js';

const POOL = 'storm9';
const MACHINES = size(20, 8);
const MAX_SURGE = size(3, 2);
const BUDGET = size(4, 2);
const TYPE = { type: 'm5.large', capacity: { cpu: '2', memory: '8Gi', pods: '20' } };
/** How long an offering stays unavailable here (the default is 3 minutes; shorter to see it end). */
const OFFERING_TTL_MS = 15_000;
const ICE = {
  status: 500,
  code: 'InsufficientInstanceCapacity',
  message: `There is no Spot capacity available that matches your request (${ZONE}).`,
};

describe(`chaos 9: a rebalance recommendation for all ${MACHINES} spot machines at once (--aws-rebalance-as-interruption)`, function () {
  this.timeout(900_000);
  let aws: AwsE2eEnv | undefined;
  let recorder: Recorder | undefined;

  before(async () => {
    aws = await startAwsE2eEnv({
      capacityByType: { [TYPE.type]: TYPE.capacity },
      withProxy: () => undefined,
      resourceNames: true,
      interruptionQueue: true,
      manager: { awsRebalanceAsInterruption: true, awsUnavailableOfferingTtlMs: OFFERING_TTL_MS },
    });
    const { env, cloud } = aws;
    recorder = new Recorder(env.cp.etcdEndpoint);
    await recorder.start();
    const cls = sampleMachineClass(cloud, POOL);
    cls.providerSpec.machineType = TYPE.type;
    Reflect.deleteProperty(cls.providerSpec, 'spotPrice');
    cls.providerSpec.instanceMarketOptions = { marketType: 'spot' };
    await env.client.create<MachineClass>(MachineClassResource, cls);
    await env.createDeployment(POOL, MACHINES, POOL, {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: MAX_SURGE, maxUnavailable: 0 } },
    });
    await env.client.patch(
      MachineDeploymentResource,
      POOL,
      { metadata: { annotations: { 'machine.mcm-ts.io/disruption-budget': String(BUDGET) } } },
      { type: 'merge', namespace: NS },
    );
  });

  after(async () => {
    recorder?.stop();
    await aws?.stop();
  });

  it(`replaces every one surge first, never above replicas + maxSurge ${MAX_SURGE}, none launched into the offering while it is marked unavailable`, async () => {
    if (aws === undefined || recorder === undefined) throw new Error('no environment');
    const { env, cloud, proxy, queue } = aws;
    if (proxy === undefined || queue === undefined) throw new Error('no proxy or queue');
    const running = async (): Promise<Machine[] | undefined> => {
      const ms = (await env.machines(POOL)).filter((m) => m.metadata.deletionTimestamp === undefined);
      return ms.length === MACHINES && ms.every((m) => m.status?.currentStatus?.phase === 'Running')
        ? ms
        : undefined;
    };
    const victims = await until(`${MACHINES} Running spot machines`, running, 240_000);
    const victimIds = new Set(victims.map((m) => instanceIdOf(m.spec?.providerID ?? '')));
    const fromRev = recorder.lastEventRev();

    // Every RunInstances that reaches the proxy, when, and whether EC2 (the emulator) got it.
    const launches: { at: number; refused: boolean }[] = [];
    let iceAt: number | undefined;
    proxy.rule({
      action: 'RunInstances',
      match: () => {
        launches.push({ at: Date.now(), refused: false });
        return false;
      },
    });
    // The first launch of the storm finds no Spot capacity: the offering is marked.
    proxy.rule({
      action: 'RunInstances',
      times: 1,
      match: () => {
        iceAt = Date.now();
        const last = launches[launches.length - 1];
        if (last !== undefined) last.refused = true;
        return true;
      },
      error: ICE,
    });

    const t0 = Date.now();
    for (const m of victims)
      await queue.send(rebalanceRecommendation(instanceIdOf(m.spec?.providerID ?? '')));

    // Replaced: every machine Running on a new instance, and every recommended one gone.
    const victimNames = new Set(victims.map((m) => m.metadata.name ?? ''));
    const replaced = async (): Promise<boolean> =>
      (await running())?.every((m) => !victimIds.has(instanceIdOf(m.spec?.providerID ?? ''))) === true &&
      (await env.machines(POOL)).every((m) => !victimNames.has(m.metadata.name ?? ''));
    /** What the machines and the deployment say, for a failure message. */
    const state = async (): Promise<string> => {
      const ms = await env.machines(POOL);
      const lines = ms.map(
        (m) =>
          `${m.metadata.name ?? ''} ${m.status?.currentStatus?.phase ?? ''}${m.metadata.deletionTimestamp === undefined ? '' : ' deleting'} replacing=${m.metadata.annotations?.['machine.mcm-ts.io/replacing'] ?? '-'} recommended=${m.metadata.annotations?.['machine.mcm-ts.io/rebalance-recommended'] ?? '-'} ${m.status?.lastOperation?.description ?? ''}`,
      );
      const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, POOL, NS);
      const expiry = mcd.status?.conditions?.find((c) => c.type === 'Expiry');
      return `${lines.join('\n')}\nExpiry condition: ${expiry?.message ?? 'none'}`;
    };
    await until(`all ${MACHINES} recommended machines replaced`, replaced, 600_000).catch(
      async (err: unknown) => {
        throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await state()}`);
      },
    );
    const convergeMs = Date.now() - t0;
    const toRev = recorder.lastEventRev();

    const figures = analyze(recorder.timeline(), { namespace: NS, deployment: POOL, fromRev, toRev });
    const markedUntil = (iceAt ?? 0) + OFFERING_TTL_MS;
    // Launches that reached EC2 while the offering was marked (a small margin for the clocks).
    const intoMarked = launches.filter(
      (l) => !l.refused && iceAt !== undefined && l.at > iceAt + 50 && l.at < markedUntil - 500,
    );
    const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
    const rebalanced = events.filter((e) => e.reason === 'RebalanceReplacing').length;
    const live = (await taggedInstances(cloud.ec2)).filter(isLive);
    const liveMachines = new Set((await env.machines(POOL)).map((m) => m.metadata.name ?? ''));
    const orphans = live
      .filter((i) => !liveMachines.has(tagOf(i, 'Name') ?? ''))
      .map((i) => {
        // What the recorder saw of the instance's machine, for a failure message.
        const name = tagOf(i, 'Name') ?? '';
        const seen = recorder?.timeline().filter((e) => e.resource === 'machines' && e.name === name) ?? [];
        const last = seen[seen.length - 1];
        const history =
          seen.length === 0 ? 'never seen' : `${last?.type ?? ''} at ${seconds((last?.at ?? 0) - t0)}`;
        return `${i.InstanceId ?? ''} (${name} ${i.State?.Name ?? ''}, launched ${seconds((i.LaunchTime?.getTime() ?? 0) - t0)} after the recommendations; its machine: ${history})`;
      });
    const reachedEc2 = launches.filter((l) => !l.refused).length;

    recordRow({
      id: '9',
      title: `rebalance recommendation for all ${MACHINES} spot machines at once (maxSurge ${MAX_SURGE}, disruption budget ${BUDGET}), one InsufficientInstanceCapacity`,
      convergeMs,
      timeoutMs: 600_000,
      beyondLimit: figures.beyondLimit,
      orphans: orphans.length,
      wronglyDeleted: figures.wronglyDeleted.length,
      notes: [
        `peak ${figures.peakActive} machines for ${MACHINES} replicas + maxSurge ${MAX_SURGE}`,
        `${figures.machinesCreated} created / ${figures.deletions.length} deleted, ${rebalanced} replacements started`,
        `${reachedEc2} launches reached EC2, ${intoMarked.length} while the offering was marked (${seconds(OFFERING_TTL_MS)} from the ICE at ${iceAt === undefined ? 'none' : seconds(iceAt - t0)})`,
      ].join('; '),
    });

    expect(iceAt, 'the storm met the capacity error').to.not.equal(undefined);
    expect(figures.beyondLimit, figures.firstBeyond).to.equal(0);
    expect(figures.peakActive, 'the surge was used').to.equal(MACHINES + MAX_SURGE);
    expect(
      intoMarked.map((l) => seconds(l.at - (iceAt ?? 0))),
      'launches into the marked offering',
    ).to.deep.equal([]);
    expect(figures.deletions.length, 'every recommended machine replaced once').to.equal(MACHINES);
    expect(rebalanced, 'each replacement started by a recommendation').to.equal(MACHINES);
    expect(
      figures.wronglyDeleted.map((d) => `${d.machine}: ${d.why}`),
      'machines deleted that were not chosen',
    ).to.deep.equal([]);
    expect(orphans, 'instances without a machine').to.deep.equal([]);
  });
});
