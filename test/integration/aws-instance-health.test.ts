// Instance health without a queue, end to end: the whole manager against a real kube-apiserver, kwok
// playing the kubelets of the emulated instances, and moto's EC2 behind the fault proxy. moto
// reports every running instance's status checks `ok` and cannot be told otherwise, so the proxy
// rewrites its DescribeInstanceStatus answers to report chosen instances `impaired`, as EC2 does
// when a reachability check fails. Short interval and timeout through the manager's own flags.
// The proxy also gives instances EC2's resource names (i-….compute.internal) instead of moto's IP
// names: moto hands a terminated instance's IP to the next one at once, and a replacement with an
// old node's name would be failed as a VM using an old node, hiding what this test counts.

import { expect } from 'chai';

import { MachineResource, type Machine } from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Node } from '../../lib/kube/types.js';
import { CapturingLogger } from '../../lib/observability/logger.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy, impairedStatus } from '../harness/ec2proxy.js';
import {
  CLUSTER_TAG,
  REGION,
  applySampleClass,
  instanceIdOf,
  provisionCloud,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { unlessNotFound, until } from './env/until.js';
import { watchEvents } from './env/watch.js';

/** --aws-instance-status-interval and --aws-impaired-timeout of the manager under test. */
const INTERVAL_MS = 1_000;
const TIMEOUT_MS = 6_000;
const APP = 'health';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** Every machine of the app: created, deleted, each one's phases and when each was first Failed. */
class MachineLog {
  readonly created = new Set<string>();
  readonly deleted = new Set<string>();
  readonly phases = new Map<string, Set<string>>();
  readonly failedAt = new Map<string, number>();
  readonly failedOperation = new Map<string, string>();
  /** When the notice's record (vm-failure) was first seen on each machine. */
  readonly recordedAt = new Map<string, number>();
  /** Machines Failed and not yet gone, now, and the most there ever were at once. */
  private readonly failedNow = new Set<string>();
  maxFailedAtOnce = 0;
  private stop: (() => Promise<void>) | undefined;

  async start(env: LifecycleEnv): Promise<void> {
    const seen = (m: Machine): void => {
      const name = m.metadata.name ?? '';
      const set = this.phases.get(name) ?? new Set<string>();
      set.add(phaseOf(m));
      this.phases.set(name, set);
      if (phaseOf(m) === 'Failed' && !this.failedAt.has(name)) {
        this.failedAt.set(name, Date.now());
        this.failedOperation.set(name, m.status?.lastOperation?.description ?? '');
      }
      if (phaseOf(m) === 'Failed' || m.metadata.deletionTimestamp !== undefined) {
        this.failedNow.add(name);
        this.maxFailedAtOnce = Math.max(this.maxFailedAtOnce, this.failedNow.size);
      }
      if (
        m.metadata.annotations?.['machine.mcm-ts.io/vm-failure'] !== undefined &&
        !this.recordedAt.has(name)
      )
        this.recordedAt.set(name, Date.now());
    };
    this.stop = await watchEvents<Machine>(
      env.client,
      NS,
      MachineResource,
      { labelSelector: `app=${APP}` },
      (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'ADDED') this.created.add(name);
        if (ev.type === 'DELETED') {
          this.deleted.add(name);
          this.failedNow.delete(name);
        } else seen(ev.object);
      },
      (items) => {
        items.forEach(seen);
      },
    );
  }

  async close(): Promise<void> {
    await this.stop?.();
  }
}

describe('AWS instance health without a queue (real kube-apiserver and kwok; moto EC2 behind the fault proxy)', function () {
  this.timeout(180_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  const logger = new CapturingLogger();
  const saved = process.env.AWS_ENDPOINT_URL_EC2;

  before(async () => {
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint, { resourceNamesIn: REGION });
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    cloud = await provisionCloud(moto.endpoint);
    env = await LifecycleEnv.start({ kwok: true });
    kubelet = new Ec2KubeletSimulator({
      // Through the proxy: the Nodes carry the instances' resource names, as the driver sees them.
      endpoint: proxy.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
    });
    kubelet.watch(proxy);
    kubelet.start();
    // The production providers, configured by the flags (no interruption queue).
    await env.startManager(
      { awsInstanceStatusIntervalMs: INTERVAL_MS, awsImpairedTimeoutMs: TIMEOUT_MS },
      { logger },
    );
    await applySampleClass(env.client, cloud, NS, APP);
    await env.createDeployment(APP, 4, APP);
  });

  after(async () => {
    await env.stop();
    await kubelet.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    await proxy.stop();
    await moto.stop();
    if (saved === undefined) Reflect.deleteProperty(process.env, 'AWS_ENDPOINT_URL_EC2');
    else process.env.AWS_ENDPOINT_URL_EC2 = saved;
  });

  afterEach(() => {
    proxy.clearRules();
  });

  /** The running manager's value of a metric: the sum of its series with these labels. */
  async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    const m = await env.manager?.registry.getSingleMetric(name)?.get();
    return (m?.values ?? [])
      .filter((x) => Object.entries(labels).every(([k, want]) => x.labels[k] === want))
      .reduce((sum, x) => sum + x.value, 0);
  }

  /** The machines of the app, all Running, each with a Ready Node of its instance. */
  async function runningFleet(n: number): Promise<Machine[] | undefined> {
    const machines = (await env.machines(APP)).filter((m) => m.metadata.deletionTimestamp === undefined);
    if (machines.length !== n || !machines.every((m) => phaseOf(m) === 'Running')) return undefined;
    const nodes = new Map((await env.nodes()).map((node) => [node.metadata.name ?? '', node]));
    for (const m of machines) {
      const node = nodes.get(m.metadata.labels?.node ?? '');
      if (node === undefined || !isReady(node)) return undefined;
      if (instanceIdOf(node.spec?.providerID ?? '') !== instanceIdOf(m.spec?.providerID ?? ''))
        return undefined;
    }
    return machines;
  }

  const gone = async (name: string): Promise<boolean> =>
    (await unlessNotFound(env.client.get(MachineResource, name, NS))) === undefined;

  async function eventsOf(name: string): Promise<CoreEvent[]> {
    const events = await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS });
    return events.items.filter((e) => e.involvedObject.name === name);
  }

  const idOf = (m: Machine): string => instanceIdOf(m.spec?.providerID ?? '');

  it('a poll answered UnauthorizedOperation is logged and counted, and the next poll works', async () => {
    await until('4 Running machines with Ready nodes', () => runningFleet(4), 120_000);
    await until(
      'a first successful poll',
      async () => (await metric('mcm_aws_instance_status_polls_total', { outcome: 'ok' })) > 0,
      30_000,
    );
    const unauthorizedBefore = await metric('mcm_aws_instance_status_polls_total', {
      outcome: 'unauthorized',
    });
    proxy.rule({
      action: 'DescribeInstanceStatus',
      times: 1,
      error: {
        status: 403,
        code: 'UnauthorizedOperation',
        message: 'You are not authorized to perform this operation.',
      },
    });
    await until(
      'an unauthorized poll counted',
      async () =>
        (await metric('mcm_aws_instance_status_polls_total', { outcome: 'unauthorized' })) >
        unauthorizedBefore,
      15_000,
    );
    const okAfter = await metric('mcm_aws_instance_status_polls_total', { outcome: 'ok' });
    await until(
      'a successful poll after it',
      async () => (await metric('mcm_aws_instance_status_polls_total', { outcome: 'ok' })) > okAfter,
      15_000,
    );
    const warned = logger.lines.filter((l) => l.level === 'warn' && l.fields.component === 'instance-status');
    expect(warned, 'one warning').to.have.length(1);
    expect(warned[0]?.msg).to.contain('not allowed');
    expect(warned[0]?.fields).to.deep.include({ needs: 'ec2:DescribeInstanceStatus' });
    expect(String(warned[0]?.fields.error)).to.contain('UnauthorizedOperation');
    expect(
      logger.lines.some((l) => l.level === 'info' && l.msg.includes('works again')),
      'the recovery logged',
    ).to.equal(true);
  });

  it('instances whose status checks EC2 reports impaired for longer than the timeout: their machines are marked Failed one at a time (the replacement budget of 1), their nodes drained with evictions while Ready, and each replaced once; the others untouched', async () => {
    const fleet = await until('4 Running machines with Ready nodes', () => runningFleet(4), 120_000);
    const [fresh, old, old2, ...others] = fleet;
    if (fresh === undefined || old === undefined || old2 === undefined) throw new Error('no machines');
    const log = new MachineLog();
    await log.start(env);
    const actedBefore = await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'acted' });

    // `fresh`: its system check fails now, EC2 gives no ImpairedSince (the clock starts at the
    // poll that first sees it). `old` and `old2`: their instance checks have failed for 10 minutes
    // by EC2's word, so both are due at the first poll, together: the budget takes one at a time.
    const impairedAt = Date.now();
    const oldSince = new Date(impairedAt - 600_000);
    proxy.rule({
      action: 'DescribeInstanceStatus',
      rewrite: (xml) =>
        impairedStatus(
          impairedStatus(xml, new Set([idOf(fresh)]), { checks: ['systemStatus'] }),
          new Set([idOf(old), idOf(old2)]),
          { checks: ['instanceStatus'], since: oldSince },
        ),
    });
    const freshName = fresh.metadata.name ?? '';
    const oldName = old.metadata.name ?? '';
    const old2Name = old2.metadata.name ?? '';
    await until(
      `${freshName}, ${oldName} and ${old2Name} deleted and 4 Running machines again`,
      async () =>
        (await gone(freshName)) && (await gone(oldName)) && (await gone(old2Name)) && runningFleet(4),
      120_000,
    );
    await log.close();

    const freshRecorded = log.recordedAt.get(freshName) ?? Infinity;
    for (const name of [oldName, old2Name]) {
      expect(
        (log.recordedAt.get(name) ?? Infinity) - impairedAt,
        `${name}: EC2’s ImpairedSince counts, recorded at the first polls`,
      ).to.be.below(TIMEOUT_MS);
    }
    expect(freshRecorded - impairedAt, 'the timeout from the first sight waited for').to.be.at.least(
      TIMEOUT_MS,
    );
    expect(freshRecorded - impairedAt, 'not much later than the timeout').to.be.below(TIMEOUT_MS + 10_000);
    expect(log.maxFailedAtOnce, 'the replacement budget of 1: one machine in replacement at a time').to.equal(
      1,
    );
    for (const name of [freshName, oldName, old2Name]) {
      expect(log.failedOperation.get(name), name).to.match(/reported its VM .* failed \(InstanceImpaired\)/);
    }
    const freshEvents = await eventsOf(freshName);
    expect(freshEvents.find((e) => e.reason === 'InstanceImpaired')?.message).to.match(
      /system status check impaired \(reachability\), seen impaired since .*longer than 6s.*replacement budget/,
    );
    const oldEvents = await eventsOf(oldName);
    expect(oldEvents.find((e) => e.reason === 'InstanceImpaired')?.message).to.contain(
      `instance status check impaired (reachability) since ${oldSince.toISOString().replace(/\.\d{3}Z$/, 'Z')}`,
    );
    const old2Events = await eventsOf(old2Name);
    const waited = [oldEvents, old2Events].filter((es) =>
      es.some((e) => e.reason === 'ReplacementBudgetExhausted'),
    );
    expect(waited, 'of the two due together, one waited for the budget, and said so').to.have.length(1);
    expect(
      [...freshEvents, ...oldEvents, ...old2Events].map((e) => e.reason),
      'Ready nodes: drained with evictions, never forced',
    ).to.not.include('DrainForced');
    // One replacement each, none lost: the instances' resource names never repeat.
    const replacements = [...log.created].filter((n) => !fleet.some((m) => m.metadata.name === n));
    expect(replacements, 'one replacement each').to.have.length(3);
    for (const n of replacements) expect(log.deleted.has(n), `${n} stays`).to.equal(false);
    for (const m of others) {
      const name = m.metadata.name ?? '';
      expect(log.deleted.has(name), `${name} not deleted`).to.equal(false);
      expect([...(log.phases.get(name) ?? [])], `${name} only Running`).to.deep.equal(['Running']);
    }
    expect(
      (await metric('mcm_aws_impaired_instance_notices_total', { outcome: 'acted' })) - actedBefore,
    ).to.equal(3);
    const instances = await taggedInstances(cloud.ec2);
    for (const id of [idOf(fresh), idOf(old), idOf(old2)]) {
      expect(instances.find((i) => i.InstanceId === id)?.State?.Name, `${id} terminated`).to.equal(
        'terminated',
      );
    }
    // The replaced instances are gone from the answers: nothing is impaired any more.
    await until(
      'no impaired instance',
      async () => (await metric('mcm_aws_impaired_instances')) === 0,
      10_000,
    );
  });

  it('an instance impaired for less than the timeout, twice, with an ok poll between: nothing happens, the clock starts again', async () => {
    const fleet = await until('4 Running machines with Ready nodes', () => runningFleet(4), 120_000);
    const victim = fleet[0];
    if (victim === undefined) throw new Error('no machine');
    const name = victim.metadata.name ?? '';
    const log = new MachineLog();
    await log.start(env);
    const noticesBefore = await metric('mcm_aws_impaired_instance_notices_total');

    const polls = (): Promise<number> => metric('mcm_aws_instance_status_polls_total');
    /** Waits until `n` more polls have been counted (one region and credentials: one a poll). */
    async function morePolls(n: number, what: string): Promise<void> {
      const from = await polls();
      await until(what, async () => (await polls()) >= from + n, n * 5_000);
    }
    /**
     * Waits until a poll is counted at `t` (ms since the epoch) or later: its clock reads `t` or
     * later when it judges the instances it saw.
     */
    async function pollFrom(t: number, what: string): Promise<void> {
      let before: number | undefined;
      await until(
        what,
        async () => {
          if (Date.now() < t) return false;
          const n = await polls();
          before ??= n;
          return n > before;
        },
        Math.max(0, t - Date.now()) + 5_000,
      );
    }
    /**
     * Reports the victim impaired until `hold` resolves, then ok until a poll has seen that; resolves
     * with when the poll was seen to report it impaired (no earlier than the manager's clock for it
     * started).
     */
    async function impaired(hold: () => Promise<void>): Promise<number> {
      proxy.rule({
        action: 'DescribeInstanceStatus',
        rewrite: (xml) => impairedStatus(xml, new Set([idOf(victim as Machine)])),
      });
      await until(
        'the poll sees it impaired',
        async () => (await metric('mcm_aws_impaired_instances')) === 1,
        5_000,
      );
      const seenAt = Date.now();
      await hold();
      proxy.clearRules();
      await until(
        'the poll sees it ok',
        async () => (await metric('mcm_aws_impaired_instances')) === 0,
        5_000,
      );
      return seenAt;
    }
    // Impaired for two more polls (about 2 s of the 6 s timeout), then an ok poll.
    const firstSeen = await impaired(() => morePolls(2, 'two more polls see it impaired'));
    // Impaired again until a poll sees it once the timeout from the first impairment has passed: a
    // manager that kept the first clock would act on that poll. This stretch began four polls or
    // more after the first was seen, so it stays under the timeout itself (about 3 s).
    await impaired(() =>
      pollFrom(firstSeen + TIMEOUT_MS, 'a poll past the timeout counted from the first impairment'),
    );
    // The poll that would have acted handled its notices before the next began; three more polls.
    await morePolls(3, 'three more polls');
    await log.close();

    expect(phaseOf(await env.client.get<Machine>(MachineResource, name, NS))).to.equal('Running');
    expect(log.created.size, 'no replacement').to.equal(0);
    expect([...(log.phases.get(name) ?? [])]).to.deep.equal(['Running']);
    expect((await eventsOf(name)).map((e) => e.reason)).to.not.include('InstanceImpaired');
    expect(await metric('mcm_aws_impaired_instance_notices_total'), 'no notice').to.equal(noticesBefore);
  });

  it('of two instances impaired at once, the one waiting for the replacement budget keeps its machine when EC2 reports it ok again: the record withdrawn, no replacement', async () => {
    const fleet = await until('4 Running machines with Ready nodes', () => runningFleet(4), 120_000);
    const [a, b] = fleet;
    if (a === undefined || b === undefined) throw new Error('no machines');
    const names = [a.metadata.name ?? '', b.metadata.name ?? ''];
    // A pod on each of the two nodes under a PodDisruptionBudget that no disruption controller
    // (there is no kube-controller-manager here) has processed: every eviction is refused, so the
    // drain of the one failed first holds it in replacement, and the budget of 1 stays in use for
    // as long as the test needs.
    await env.client.create(CoreResources.podDisruptionBudgets, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'hold', namespace: NS },
      spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'hold' } } },
    });
    for (const m of [a, b])
      await env.client.create(CoreResources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: `hold-${m.metadata.name ?? ''}`, namespace: NS, labels: { app: 'hold' } },
        spec: {
          nodeName: m.metadata.labels?.node ?? '',
          terminationGracePeriodSeconds: 0,
          containers: [{ name: 'hold', image: 'registry.invalid/hold:1' }],
        },
      });
    const log = new MachineLog();
    await log.start(env);
    const since = new Date(Date.now() - 600_000);
    proxy.rule({
      action: 'DescribeInstanceStatus',
      rewrite: (xml) => impairedStatus(xml, new Set([idOf(a), idOf(b)]), { since }),
    });
    const byName = async (n: string): Promise<Machine | undefined> =>
      unlessNotFound(env.client.get<Machine>(MachineResource, n, NS));
    // One Failed, the other recorded and waiting for the budget (it said so).
    const [failed, waiting] = await until(
      'one machine Failed, the other waiting for the budget',
      async () => {
        const ms = await Promise.all(names.map(byName));
        const f = ms.find(
          (m) => m !== undefined && (phaseOf(m) === 'Failed' || m.metadata.deletionTimestamp !== undefined),
        );
        const w = ms.find((m) => m !== undefined && m !== f);
        if (f === undefined || w === undefined) return undefined;
        if (w.metadata.annotations?.['machine.mcm-ts.io/vm-failure'] !== 'InstanceImpaired') return undefined;
        const said = (await eventsOf(w.metadata.name ?? '')).some(
          (e) => e.reason === 'ReplacementBudgetExhausted',
        );
        return said ? ([f, w] as const) : undefined;
      },
      60_000,
    );
    const waitingName = waiting.metadata.name ?? '';
    // EC2 reports the waiting one's checks passing again (the failed one stays impaired).
    proxy.clearRules();
    proxy.rule({
      action: 'DescribeInstanceStatus',
      rewrite: (xml) => impairedStatus(xml, new Set([idOf(failed)]), { since }),
    });
    await until(
      `${waitingName}'s record withdrawn`,
      async () =>
        (await byName(waitingName))?.metadata.annotations?.['machine.mcm-ts.io/vm-failure'] === undefined,
      20_000,
    );
    // Events are written in the background: the recovery's may trail the annotation's removal.
    await until(
      `an InstanceRecovered event on ${waitingName}`,
      async () => (await eventsOf(waitingName)).some((e) => e.reason === 'InstanceRecovered'),
      10_000,
    );
    // The failed one may go now: its drain is let through, and the fleet is whole again.
    await env.client.delete(CoreResources.podDisruptionBudgets, 'hold', { namespace: NS });
    const failedName = failed.metadata.name ?? '';
    await until(
      `${failedName} deleted and 4 Running machines again`,
      async () => (await gone(failedName)) && runningFleet(4),
      120_000,
    );
    await log.close();
    expect(log.deleted.has(waitingName), `${waitingName} not deleted`).to.equal(false);
    expect([...(log.phases.get(waitingName) ?? [])], `${waitingName} only Running`).to.deep.equal([
      'Running',
    ]);
    expect(log.created.size, 'one replacement: the failed machine’s').to.equal(1);
    await env.client.delete(CoreResources.pods, `hold-${waitingName}`, { namespace: NS });
  });
});
