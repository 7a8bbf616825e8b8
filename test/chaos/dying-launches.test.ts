// Scenario 10: Launches that keep dying. Every instance the manager launches for a node group
// terminates while it is still pending (EC2 takes it back before it boots: a bad image, an
// unusable key, a cloud that reclaims it at once), and EC2 says so on the interruption queue
// (EventBridge state-change events, shutting-down then terminated). The stock cluster-autoscaler
// wants the group to grow for the pods of a Deployment. The launches must back off per machine
// class (--launch-failure-backoff, doubling up to --launch-failure-max-backoff), so that the
// RunInstances calls stay within the bound that back-off gives; the machines waiting for the hold
// report a creation error, and the autoscaler backs the group off for it (errorClass Other, not a
// timeout) and deletes them. Then launches work again: once the manager's hold and the
// autoscaler's back-off have ended, the pods run on the group's nodes.
//
// Real parts: kube-apiserver, kube-scheduler, kube-controller-manager (Deployment), kwok, the EC2
// and SQS emulator (behind the fault proxy, which sees every RunInstances answer), our manager (in
// process, with --aws-interruption-queue), and the cluster-autoscaler binary. The instances die
// on the emulator itself (the manager never asks for their termination) and never register a
// node. Figures from the etcd recorder and the proxy.

import { expect } from 'chai';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Pod } from '../../lib/kube/types.js';
import { backOffOf, backOffsOf, requireAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import {
  REGION,
  ZONE,
  instanceIdOf,
  isLive,
  sampleMachineClass,
  tagOf,
  taggedInstances,
  terminateInstance,
} from '../harness/ec2cloud.js';
import { launchedInstances } from '../harness/ec2kubelet.js';
import { stateChange } from '../harness/eventbridge.js';
import { autoscalerUnavailableReason, newestAutoscalerVersion } from '../harness/tools.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { startAwsE2eEnv, type AwsE2eEnv } from '../e2e/awsenv.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { analyze, launchRoundsWithin } from './analysis.js';
import { size, seconds } from './env.js';
import { Recorder } from './recorder.js';
import { recordNotRun, recordRow } from './results.js';

const version = newestAutoscalerVersion();
const POOL = 'dying10';
const GROUP = `${POOL}-group`;
const APP = `${POOL}-pods`;
/** Nodes the pods need, and the group's maximum: one machine slot per node. */
const SLOTS = size(2, 1);
/** The manager's launch back-off: base and maximum. */
const BACKOFF_MS = size(10_000, 4_000);
const MAX_BACKOFF_MS = size(60_000, 16_000);
/** How long every launch dies. */
const WINDOW_MS = size(120_000, 30_000);
/** The autoscaler's node group back-off (seconds): shorter than the manager's, which must bound. */
const CA_BACKOFF_S = { initial: size(10, 5), max: size(30, 10) };
/**
 * From the moment both back-offs allow a launch until the pods run: the autoscaler's next loop,
 * the machine's creation, the instance's start, its node's registration, the pods' binding.
 */
const JOIN_MS = 30_000;
/** 1.5 of 2 CPUs per pod: one pod to a node. */
const TYPE = { type: 'm5.large', capacity: { cpu: '2', memory: '8Gi', pods: '20' } };

interface Launch {
  at: number;
  instanceId: string;
  /** The machine the instance is for (its Name tag in the request). */
  machine: string;
  /** Launched while launches die. */
  dying: boolean;
  /** The answer named an instance answered before (EC2's ClientToken): not a new instance. */
  repeat: boolean;
}

/** The Name tag a RunInstances request gives its instance (the machine's name). */
function nameTagOf(params: URLSearchParams): string {
  for (const [k, v] of params) {
    const m = /^TagSpecification\.(\d+)\.Tag\.(\d+)\.Key$/.exec(k);
    if (m !== null && v === 'Name') return params.get(`TagSpecification.${m[1]}.Tag.${m[2]}.Value`) ?? '';
  }
  return '';
}

function podReady(p: Pod): boolean {
  if (p.metadata.deletionTimestamp !== undefined || p.status?.phase !== 'Running') return false;
  const conditions = Array.isArray(p.status.conditions)
    ? (p.status.conditions as { type?: string; status?: string }[])
    : [];
  return conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

/** The latest end of a launch hold that the LaunchFailed events announce ("the next at …"). */
function lastHoldEnd(events: readonly CoreEvent[]): number | undefined {
  let last: number | undefined;
  for (const e of events) {
    if (e.reason !== 'LaunchFailed') continue;
    const at = /the next at (\S+)$/.exec(e.message ?? '')?.[1];
    // rfc3339 to the second, rounded down: the hold ends within the second after.
    const t = at === undefined ? NaN : Date.parse(at) + 1000;
    if (!Number.isNaN(t)) last = Math.max(last ?? t, t);
  }
  return last;
}

describe(`chaos 10: every launch of a node group dies while pending; launches back off, cluster-autoscaler ${version} backs the group off, then it recovers`, function () {
  this.timeout(900_000);
  let aws: AwsE2eEnv | undefined;
  let ca: Autoscaler | undefined;
  let recorder: Recorder | undefined;

  before(async function () {
    const reason = autoscalerUnavailableReason(version);
    if (reason !== undefined) recordNotRun('10', 'Dying launches with the autoscaler', reason);
    requireAutoscaler(version);
    aws = await startAwsE2eEnv({
      capacityByType: { [TYPE.type]: TYPE.capacity },
      withProxy: () => undefined,
      interruptionQueue: true,
      manager: { launchFailureBackoffMs: BACKOFF_MS, launchFailureMaxBackoffMs: MAX_BACKOFF_MS },
    });
    const { env, cloud } = aws;
    recorder = new Recorder(env.cp.etcdEndpoint);
    await recorder.start();
    const cls = sampleMachineClass(cloud, GROUP);
    cls.providerSpec.machineType = TYPE.type;
    Reflect.deleteProperty(cls.providerSpec, 'spotPrice');
    cls.nodeTemplate = { capacity: TYPE.capacity, instanceType: TYPE.type, region: REGION, zone: ZONE };
    await env.client.create<MachineClass>(MachineClassResource, cls);
    await env.createDeployment(
      GROUP,
      0,
      GROUP,
      {},
      { nodeTemplate: { metadata: { labels: { pool: POOL } } } },
    );
    await env.client.patch(
      MachineDeploymentResource,
      GROUP,
      {
        metadata: {
          annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: String(SLOTS) },
        },
      },
      { type: 'merge', namespace: NS },
    );
    ca = await aws.startAutoscaler(version, {
      'scale-down-enabled': false,
      'initial-node-group-backoff-duration': `${CA_BACKOFF_S.initial}s`,
      'max-node-group-backoff-duration': `${CA_BACKOFF_S.max}s`,
    });
  });

  after(async () => {
    recorder?.stop();
    await aws?.stop();
  });

  it(`RunInstances stays within the launch back-off's bound while launches die, the autoscaler backs the group off as a creation error, and the ${SLOTS} pod(s) run once both back-offs allow`, async () => {
    if (aws === undefined || recorder === undefined) throw new Error('no environment');
    const { env, cloud, proxy, queue, kubelet } = aws;
    if (proxy === undefined || queue === undefined) throw new Error('no proxy or queue');
    const rec = recorder;
    const log = (): string => ca?.log() ?? '';
    const withLog = (err: unknown): never => {
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n--- cluster-autoscaler log (tail)\n${log().split('\n').slice(-40).join('\n')}`,
      );
    };
    const group = `${NS}/${GROUP}`;
    const pods = async (): Promise<Pod[]> =>
      (await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${APP}` })).items;
    const events = async (): Promise<CoreEvent[]> =>
      (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
    /** The machine (as the recorder sees it now) that records an instance. */
    const machineOf = (instanceId: string): string | undefined => {
      for (const e of rec.live.machines.values()) {
        const spec = e.object?.spec as { providerID?: string } | undefined;
        if (spec?.providerID !== undefined && instanceIdOf(spec.providerID) === instanceId) return e.name;
      }
      return undefined;
    };

    // Every instance launched while `dying` holds dies: terminated on the emulator itself (not
    // through the proxy: the manager must not see a termination it asked for), never registered
    // as a node, and EC2's state-change events go on the queue. They are sent once the machine
    // records the instance, as EventBridge delivers them seconds after the launch (an event about
    // an instance no machine records yet comes back 10 s later: a delay this scenario leaves out).
    let dying = true;
    const launches: Launch[] = [];
    const kills = new Set<Promise<void>>();
    const killErrors: string[] = [];
    const kill = async (id: string): Promise<void> => {
      await until(`a machine recording instance ${id}`, () => machineOf(id) !== undefined, 15_000).catch(
        () => undefined,
      );
      // The manager may have terminated it already: a VM that comes up under the name of an old
      // node (the emulator reuses private addresses at once) is deleted at once (VM using old node
      // obj). The emulator refuses a second termination; EC2 takes it.
      await terminateInstance(cloud.ec2, id);
      await queue.send(stateChange(id, 'shutting-down'));
      await queue.send(stateChange(id, 'terminated'));
    };
    const seen = new Set<string>();
    proxy.onAnswer = (action, params, status, body) => {
      if (action !== 'RunInstances' || status !== 200) return;
      for (const i of launchedInstances(body.toString('utf8'))) {
        const id = i.InstanceId ?? '';
        const repeat = seen.has(id);
        seen.add(id);
        launches.push({ at: Date.now(), instanceId: id, machine: nameTagOf(params), dying, repeat });
        if (!dying || repeat) continue;
        kubelet.terminated([id]);
        const p = kill(id).catch((err: unknown) => {
          killErrors.push(`${id}: ${err instanceof Error ? err.message : String(err)}`);
        });
        kills.add(p);
        void p.finally(() => kills.delete(p));
      }
    };

    const fromRev = rec.lastEventRev();
    const t0 = Date.now();
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: APP, namespace: NS, pool: POOL, replicas: SLOTS }),
    );
    await new Promise((r) => setTimeout(r, WINDOW_MS - (Date.now() - t0)));
    dying = false;
    const tStop = Date.now();
    const windowMs = tStop - t0;
    // The instances launched before the end still die.
    await Promise.all([...kills]);
    const dyingLaunches = launches.filter((l) => l.dying);
    const caBackOffsInWindow = backOffsOf(log(), group, tStop);

    // Launches work again: the pods run on the group's nodes once both back-offs allow.
    const recoveryTimeoutMs = MAX_BACKOFF_MS + CA_BACKOFF_S.max * 1000 + JOIN_MS + 60_000;
    await until(
      `${SLOTS} pod(s) Ready on the group's nodes`,
      async () => {
        const nodes = new Set(
          (await env.machines(GROUP)).map((m) => m.metadata.labels?.node ?? '').filter((n) => n !== ''),
        );
        const ps = (await pods()).filter((p) => p.metadata.deletionTimestamp === undefined);
        return ps.length === SLOTS && ps.every((p) => podReady(p) && nodes.has(p.spec?.nodeName ?? ''));
      },
      recoveryTimeoutMs,
    ).catch(withLog);
    const recoveredAt = Date.now();
    const toRev = rec.lastEventRev();

    const all = await events();
    const holdEnd = lastHoldEnd(all) ?? tStop;
    const caEndAtStop = Math.max(tStop, ...caBackOffsInWindow.map((b) => b.until ?? 0).filter((u) => u > 0));
    const allowedAt = Math.max(tStop, holdEnd, caEndAtStop);
    const recoveryMs = recoveredAt - tStop;
    const afterAllowedMs = recoveredAt - allowedAt;
    const figures = analyze(rec.timeline(), { namespace: NS, deployment: GROUP, fromRev, toRev });
    const live = (await taggedInstances(cloud.ec2)).filter(isLive);
    const liveMachines = new Set((await env.machines(GROUP)).map((m) => m.metadata.name ?? ''));
    const orphans = live
      .filter((i) => !liveMachines.has(tagOf(i, 'Name') ?? ''))
      .map((i) => i.InstanceId ?? '');
    const backOff = backOffOf(log(), group);
    const caBackOffs = backOffsOf(log(), group, recoveredAt);
    const firstCaBackOff = caBackOffs.find((b) => b.errorClass === 'Other' && b.errorCode !== 'timeout');
    /** When a machine of the group first read a phase in the window (ms after t0). */
    const firstPhase = (phase: string): number | undefined => {
      const e = rec
        .timeline()
        .find(
          (x) =>
            x.rev > fromRev &&
            x.resource === 'machines' &&
            x.namespace === NS &&
            (x.object?.metadata as { labels?: Record<string, string> } | undefined)?.labels?.app === GROUP &&
            (x.object?.status as { currentStatus?: { phase?: string } } | undefined)?.currentStatus?.phase ===
              phase,
        );
      return e === undefined ? undefined : e.at - t0;
    };
    const firstFailedMs = firstPhase('Failed');
    const firstHeldMs = firstPhase('CrashLoopBackOff');
    const launchFailed = all.filter((e) => e.reason === 'LaunchFailed');
    const byProbe = launchFailed.filter((e) => (e.message ?? '').includes('no longer exists')).length;
    const held = all.filter((e) => e.reason === 'LaunchBackoff').length;
    const perMachine = new Map<string, number>();
    for (const l of dyingLaunches) perMachine.set(l.machine, (perMachine.get(l.machine) ?? 0) + 1);
    const rounds = launchRoundsWithin(BACKOFF_MS, MAX_BACKOFF_MS, windowMs);
    const bound = SLOTS * rounds;
    const issueRounds = launchRoundsWithin(30_000, 300_000, 300_000);
    const relaunches = launches.filter((l) => l.repeat).length;

    const notes = [
      `${dyingLaunches.length} RunInstances in ${seconds(windowMs)} of dying launches (${(dyingLaunches.length / SLOTS).toFixed(1)} per machine slot, ${SLOTS} slot(s); bound ${bound}: ${rounds} rounds of the back-off ${BACKOFF_MS / 1000} s doubling to ${MAX_BACKOFF_MS / 1000} s per slot; with the defaults ${issueRounds} in 5 min, the issue allows 6)`,
      `${perMachine.size} machines launched, at most ${Math.max(0, ...perMachine.values())} RunInstances each`,
      `first launch failed ${firstFailedMs === undefined ? 'never' : seconds(firstFailedMs)}, first launch held ${firstHeldMs === undefined ? 'never' : seconds(firstHeldMs)} after the pods were created; ${launchFailed.length} LaunchFailed (${byProbe} found by the VM probe), ${held} LaunchBackoff events`,
      firstCaBackOff?.at === undefined
        ? 'group NOT backed off as a creation error'
        : `group backed off as a creation error ${seconds(firstCaBackOff.at - t0)} after the pods were created (${caBackOffs.length} back-offs: ${[...new Set(caBackOffs.map((b) => `${b.errorClass}.${b.errorCode}`))].join(', ')})`,
      `recovered ${seconds(recoveryMs)} after the launches worked again, ${seconds(afterAllowedMs)} after both back-offs allowed (hold ended ${seconds(holdEnd - tStop)}, autoscaler back-off ${seconds(caEndAtStop - tStop)} after)`,
      `machines ${figures.machinesCreated} created / ${figures.deletions.length} deleted`,
    ];
    recordRow({
      id: '10',
      title: `every launch of a node group dies while pending for ${seconds(windowMs)}: cluster-autoscaler ${version}, ${SLOTS} pod(s)`,
      convergeMs: recoveryMs,
      timeoutMs: recoveryTimeoutMs,
      beyondLimit: figures.beyondLimit,
      orphans: orphans.length,
      wronglyDeleted: figures.wronglyDeleted.length,
      notes: notes.join('; '),
    });
    console.log(
      `    launches: ${launches.map((l) => `+${seconds(l.at - t0)} ${l.machine}${l.dying ? ' (dying)' : ''}${l.repeat ? ' (repeat)' : ''}`).join(', ')}`,
    );

    expect(killErrors, 'every dying instance terminated and its events sent').to.deep.equal([]);
    expect(dyingLaunches.length, 'launches were tried while they died').to.be.at.least(SLOTS);
    expect(
      dyingLaunches.length,
      `RunInstances while launches die: at most ${rounds} rounds per machine slot in ${seconds(windowMs)} (back-off ${BACKOFF_MS} ms doubling to ${MAX_BACKOFF_MS} ms), ${SLOTS} slot(s)`,
    ).to.be.at.most(bound);
    expect(relaunches, 'no RunInstances answered with an instance started before').to.equal(0);
    expect(launchFailed.length, 'the dying launches failed as launches (LaunchFailed)').to.be.at.least(1);
    expect(held, 'launches of the class were held (LaunchBackoff)').to.be.at.least(1);
    expect(backOff.creationError, 'the autoscaler backed the group off as a creation error').to.equal(true);
    expect(backOff.timedOut, "the group's scale-up did not time out").to.equal(false);
    expect(figures.beyondLimit, figures.firstBeyond).to.equal(0);
    expect(
      figures.wronglyDeleted.map((d) => `${d.machine}: ${d.why}`),
      'machines deleted that were not chosen',
    ).to.deep.equal([]);
    expect(orphans, 'instances without a machine').to.deep.equal([]);
    expect(live, 'one live instance per pod').to.have.length(SLOTS);
    expect(
      afterAllowedMs,
      `pods running within ${CA_BACKOFF_S.max} s (the autoscaler's longest back-off, should it have tried during the hold) + ${JOIN_MS / 1000} s after both back-offs allowed`,
    ).to.be.at.most(CA_BACKOFF_S.max * 1000 + JOIN_MS);
    const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, GROUP, NS);
    expect(mcd.spec?.replicas, 'the group at the pods’ size').to.equal(SLOTS);
  });
});
