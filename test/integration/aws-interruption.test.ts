// The AWS interruption queue end to end: the queue, its policy and the four EventBridge rules created
// by the CloudFormation template users deploy (deploy/aws/interruption-queue.yaml, on the emulator's
// CloudFormation), EventBridge-shaped events sent to the queue or put on the default event bus
// (moto serves EC2, SQS, EventBridge and CloudFormation on one port), read by the whole manager against a real
// kube-apiserver, with kube-scheduler, kube-controller-manager (Deployments, PodDisruptionBudgets)
// and kwok playing the kubelets of the emulated instances. The manager is configured by its flags
// (parsed as the command line does) and builds its providers itself (defaultProviders), so the
// queue is read by the wiring users get.

import { isDeepStrictEqual } from 'node:util';

import { expect } from 'chai';

import { StopInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { readFileSync } from 'node:fs';
import path from 'node:path';

import {
  CloudFormationClient,
  CreateStackCommand,
  DescribeStacksCommand,
} from '@aws-sdk/client-cloudformation';
import { EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import { GetQueueAttributesCommand, SQSClient, SendMessageCommand } from '@aws-sdk/client-sqs';

import { MachineResource, type Machine } from '../../lib/api/types.js';
import { defaultConfig, parseArgs, type ManagerConfig } from '../../lib/config.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Node, Pod, PodDisruptionBudget } from '../../lib/kube/types.js';
import {
  UNKNOWN_DELIVERIES,
  UNKNOWN_RETRY_SECONDS,
  type PollerHooks,
} from '../../lib/providers/aws/interruption/poller.js';
import { VISIBILITY_SECONDS, type QueueMessage } from '../../lib/providers/aws/interruption/queue.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { ACCOUNT, spotWarning, stateChange } from '../harness/eventbridge.js';
import {
  CLUSTER_TAG,
  REGION,
  applySampleClass,
  instanceIdOf,
  isLive,
  provisionCloud,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { repoRoot } from '../harness/tools.js';
import { AppsDeployments } from '../harness/workload.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { unlessNotFound, until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const REPLACING = 'machine.mcm-ts.io/replacing';
const DEADLINE = 'machine.mcm-ts.io/interruption-deadline';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
function podReady(p: Pod): boolean {
  if (p.metadata.deletionTimestamp !== undefined || p.status?.phase !== 'Running') return false;
  const conditions = p.status.conditions;
  return (
    Array.isArray(conditions) &&
    conditions.some((c: { type?: unknown; status?: unknown }) => c.type === 'Ready' && c.status === 'True')
  );
}

/** Follows the machines of a deployment: every machine created, deleted, and each one's phases. */
/**
 * The stale-node check's lastOperation (see machine/create.ts): the emulator hands a terminated
 * instance's private IP to the very next launch, often before that instance's Node is deleted, so a
 * replacement's first VM may come up under an existing node's name and be given up, as gardener's
 * MCM does. Such a machine is a launch that failed for the emulator's address reuse, not a second
 * reaction to the notice.
 */
const STALE_NODE = 'VM using old node obj';

class MachineLog {
  readonly created = new Set<string>();
  /** Machines whose launch the stale-node check ended (see STALE_NODE). */
  readonly staleNode = new Set<string>();
  readonly deleted = new Set<string>();
  readonly phases = new Map<string, Set<string>>();
  /** When each machine was first seen, and first seen being deleted (ms, in watch order). */
  readonly addedAt = new Map<string, number>();
  readonly deletingAt = new Map<string, number>();
  /** When each machine was first seen Running. */
  readonly runningAt = new Map<string, number>();
  private stop: (() => Promise<void>) | undefined;

  async start(env: LifecycleEnv, app: string): Promise<void> {
    const seen = (m: Machine): void => {
      const name = m.metadata.name ?? '';
      if (m.status?.lastOperation?.description?.includes(STALE_NODE) === true) this.staleNode.add(name);
      const set = this.phases.get(name) ?? new Set<string>();
      set.add(phaseOf(m));
      this.phases.set(name, set);
      if (phaseOf(m) === 'Running' && !this.runningAt.has(name)) this.runningAt.set(name, Date.now());
    };
    this.stop = await watchEvents<Machine>(
      env.client,
      NS,
      MachineResource,
      { labelSelector: `app=${app}` },
      (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'ADDED') {
          this.created.add(name);
          this.addedAt.set(name, Date.now());
        }
        if (ev.object.metadata.deletionTimestamp !== undefined && !this.deletingAt.has(name))
          this.deletingAt.set(name, Date.now());
        if (ev.type === 'DELETED') this.deleted.add(name);
        else seen(ev.object);
      },
      (items) => {
        items.forEach(seen);
      },
    );
  }

  async close(): Promise<void> {
    await this.stop?.();
  }

  /**
   * The machines created since start() other than `except`, leaving out those whose launch the
   * stale-node check ended (each printed, so that a run shows them).
   */
  replacements(except?: string): string[] {
    for (const n of this.staleNode)
      console.log(
        `      (${n}: its first VM got the IP of an instance whose Node was still there; given up)`,
      );
    return [...this.created].filter((n) => n !== except && !this.staleNode.has(n));
  }
}

/**
 * deploy/aws/interruption-queue.yaml as a stack on the emulator's CloudFormation, as an operator
 * deploys it; its QueueUrl output.
 */
async function deployStack(endpoint: string): Promise<string> {
  const cfn = new CloudFormationClient({
    region: REGION,
    endpoint,
    credentials: { accessKeyId: 'operator', secretAccessKey: 'operator' },
  });
  try {
    const template = readFileSync(path.join(repoRoot, 'deploy', 'aws', 'interruption-queue.yaml'), 'utf8');
    await cfn.send(
      new CreateStackCommand({
        StackName: 'mcm-interruptions',
        TemplateBody: template,
        Parameters: [{ ParameterKey: 'ClusterName', ParameterValue: 'shoot--test' }],
        Capabilities: ['CAPABILITY_IAM'],
      }),
    );
    const stack = await until(
      'the stack created',
      async () => {
        const s = (await cfn.send(new DescribeStacksCommand({ StackName: 'mcm-interruptions' }))).Stacks?.[0];
        const status = s?.StackStatus ?? '';
        if (status.endsWith('_FAILED') || status.startsWith('ROLLBACK'))
          throw new Error(`stack ${status}: ${s?.StackStatusReason ?? ''}`);
        return status === 'CREATE_COMPLETE' ? s : undefined;
      },
      30_000,
    );
    const url = stack.Outputs?.find((o) => o.OutputKey === 'QueueUrl')?.OutputValue;
    if (url === undefined) throw new Error('the stack has no QueueUrl output');
    return url;
  } finally {
    cfn.destroy();
  }
}

describe('AWS interruption queue (real kube-apiserver, kube-scheduler, kube-controller-manager, kwok; moto EC2 and SQS)', function () {
  this.timeout(420_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  let sqs: SQSClient;
  let queueUrl = '';
  /** What the running manager's queue reader calls at its two seams (set by a test, cleared after). */
  let testHooks: PollerHooks = {};
  const saved = Object.fromEntries(
    [
      'AWS_ENDPOINT_URL_EC2',
      'AWS_ENDPOINT_URL_SQS',
      'AWS_REGION',
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
    ].map((k) => [k, process.env[k]]),
  );

  /** The manager's command line: the queue, everything else at its default. */
  const managerFlags = (): string[] => [`--aws-interruption-queue=${queueUrl}`];

  /** What a command line sets, as the manager's parser reads it: the settings that differ from the defaults. */
  function settingsOf(argv: string[]): Partial<ManagerConfig> {
    const parsed = parseArgs(argv);
    if (parsed === 'help') throw new Error(`${argv.join(' ')}: help asked for`);
    const defaults: Record<string, unknown> = { ...defaultConfig };
    return Object.fromEntries(Object.entries(parsed).filter(([k, v]) => !isDeepStrictEqual(v, defaults[k])));
  }

  /**
   * The manager as users run it: its flags over the environment's settings (namespace, no leader
   * election, ports), and the providers it builds itself (defaultProviders: the AWS provider with
   * the queue of --aws-interruption-queue), the queue reader's two seams forwarded to testHooks.
   */
  async function startManager(): Promise<void> {
    const settings = settingsOf(managerFlags());
    expect(settings, 'the flags set the queue').to.deep.equal({ awsInterruptionQueue: queueUrl });
    const hooks: PollerHooks = {
      received: (m, signal) => testHooks.received?.(m, signal) ?? Promise.resolve(),
      beforeDelete: (m, signal) => testHooks.beforeDelete?.(m, signal) ?? Promise.resolve(),
    };
    await env.startManager(settings, { providerSeams: { awsInterruptionHooks: hooks } });
  }

  before(async () => {
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint);
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    // The queue's client: the SDK's own variables, as in a pod (endpoint, region, credentials).
    process.env.AWS_ENDPOINT_URL_SQS = moto.endpoint;
    process.env.AWS_REGION = REGION;
    process.env.AWS_ACCESS_KEY_ID = 'manager';
    process.env.AWS_SECRET_ACCESS_KEY = 'manager';
    cloud = await provisionCloud(moto.endpoint);
    sqs = new SQSClient({
      region: REGION,
      endpoint: moto.endpoint,
      credentials: { accessKeyId: 'eventbridge', secretAccessKey: 'eventbridge' },
    });
    queueUrl = await deployStack(moto.endpoint);
    env = await LifecycleEnv.start({ kwok: true, scheduler: true, controllerManager: true });
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
    });
    kubelet.watch(proxy);
    kubelet.start();
    await startManager();
    await applySampleClass(env.client, cloud, NS, 'spot', (c) => {
      c.providerSpec.instanceMarketOptions = { marketType: 'spot' };
    });
  });

  after(async () => {
    await env.stop();
    await kubelet.stop();
    sqs.destroy();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    await proxy.stop();
    await moto.stop();
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) Reflect.deleteProperty(process.env, k);
      else process.env[k] = v;
    }
  });

  afterEach(() => {
    testHooks = {};
  });

  async function send(body: string): Promise<void> {
    await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body }));
  }

  /** Messages in the queue, visible or handed out and not deleted. */
  async function queued(): Promise<{ visible: number; inFlight: number }> {
    const a = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    return {
      visible: Number(a.Attributes?.ApproximateNumberOfMessages ?? 'NaN'),
      inFlight: Number(a.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 'NaN'),
    };
  }
  const queueEmpty = async (): Promise<boolean> => {
    const q = await queued();
    return q.visible === 0 && q.inFlight === 0;
  };

  /** The running manager's count of queue messages of a kind and outcome. */
  async function counted(kind: string, outcome: string): Promise<number> {
    const m = await env.manager?.registry.getSingleMetric('mcm_aws_interruption_messages_total')?.get();
    return m?.values.find((v) => v.labels.kind === kind && v.labels.outcome === outcome)?.value ?? 0;
  }

  /** The deliveries of the messages about an instance, as the reader receives them (from now on). */
  function deliveriesOf(instanceId: string): { receiveCount: number; at: number }[] {
    const deliveries: { receiveCount: number; at: number }[] = [];
    testHooks.received = (m) => {
      if (m.body.includes(instanceId)) deliveries.push({ receiveCount: m.receiveCount, at: Date.now() });
      return Promise.resolve();
    };
    return deliveries;
  }

  /** Each redelivery came after the retry's 10 s, sooner than the visibility timeout (20 s) would bring it. */
  function expectSoonerThanVisibility(deliveries: { at: number }[]): void {
    for (let i = 1; i < deliveries.length; i++) {
      const gap = (deliveries[i]?.at ?? 0) - (deliveries[i - 1]?.at ?? 0);
      expect(gap, `delivery ${i + 1}, after the retry's delay`).to.be.at.least(
        UNKNOWN_RETRY_SECONDS * 1000 - 1000,
      );
      expect(gap, `delivery ${i + 1}, sooner than the visibility timeout`).to.be.below(
        VISIBILITY_SECONDS * 1000,
      );
    }
  }

  /** A deployment of spot machines of the sample class whose nodes carry pool=<name>. */
  async function spotDeployment(name: string, replicas: number): Promise<void> {
    await env.createDeployment(
      name,
      replicas,
      'spot',
      {},
      { nodeTemplate: { metadata: { labels: { pool: name } } } },
    );
  }

  /** The machines of a deployment, all Running, each with a Ready Node of its instance carrying pool=<app>. */
  async function runningFleet(app: string, n: number): Promise<Machine[] | undefined> {
    const machines = (await env.machines(app)).filter((m) => m.metadata.deletionTimestamp === undefined);
    if (machines.length !== n || !machines.every((m) => phaseOf(m) === 'Running')) return undefined;
    const nodes = new Map((await env.nodes()).map((node) => [node.metadata.name ?? '', node]));
    for (const m of machines) {
      const node = nodes.get(m.metadata.labels?.node ?? '');
      if (node === undefined || !isReady(node) || node.metadata.labels?.pool !== app) return undefined;
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

  async function instance(id: string): Promise<Instance | undefined> {
    return (await taggedInstances(cloud.ec2)).find((i) => i.InstanceId === id);
  }

  /** Waits for the victim to be gone and `n` Running machines (its replacement among them) with Ready nodes. */
  async function replaced(app: string, victim: string, n: number, timeoutMs: number): Promise<Machine[]> {
    return until(
      `${victim} deleted and ${n} Running machines of ${app} with Ready nodes`,
      async () => ((await gone(victim)) ? runningFleet(app, n) : undefined),
      timeoutMs,
    );
  }

  /** A Deployment of `replicas` pods of 800m CPU (two per node) on the pool's nodes, and its budget. */
  async function workload(
    name: string,
    pool: string,
    replicas: number,
    budget: { maxUnavailable: number } | { minAvailable: number },
  ): Promise<void> {
    await env.client.create(AppsDeployments, {
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
              { name, image: `registry.invalid/${name}:1`, resources: { requests: { cpu: '800m' } } },
            ],
          },
        },
      },
    });
    await env.client.create<PodDisruptionBudget>(CoreResources.podDisruptionBudgets, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name, namespace: NS },
      spec: { ...budget, selector: { matchLabels: { app: name } } },
    });
  }

  async function podsOf(name: string): Promise<Pod[]> {
    return (await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${name}` }))
      .items;
  }

  async function removeWorkload(name: string): Promise<void> {
    await env.client.delete(AppsDeployments, name, { namespace: NS });
    await env.client.delete(CoreResources.podDisruptionBudgets, name, { namespace: NS });
  }

  it('a Spot interruption warning for one of 5 spot machines: within 120 s its replacement runs with a Ready node, its node is drained within the PodDisruptionBudget (the pods rescheduled), the machine is deleted, and the message is deleted only once the replacement is recorded', async () => {
    const app = 'spot5';
    await spotDeployment(app, 5);
    const machines = await until(
      '5 Running spot machines with Ready nodes',
      () => runningFleet(app, 5),
      180_000,
    );
    const ids = new Set(machines.map((m) => instanceIdOf(m.spec?.providerID ?? '')));
    const spotInstances = (await taggedInstances(cloud.ec2)).filter(
      (i) => ids.has(i.InstanceId ?? '') && isLive(i),
    );
    expect(
      spotInstances.map((i) => i.InstanceLifecycle),
      'the class launches spot instances',
    ).to.deep.equal(['spot', 'spot', 'spot', 'spot', 'spot']);

    // A workload: 10 pods, two per node (800m of 2 CPUs each), at most one unavailable.
    await workload('web', app, 10, { maxUnavailable: 1 });
    const webPods = (): Promise<Pod[]> => podsOf('web');
    await until(
      '10 Ready pods of web, and the budget allowing one disruption',
      async () => {
        const ready = (await webPods()).filter(podReady);
        const pdb = await env.client.get<PodDisruptionBudget>(CoreResources.podDisruptionBudgets, 'web', NS);
        return (
          ready.length === 10 && pdb.status?.currentHealthy === 10 && pdb.status.disruptionsAllowed === 1
        );
      },
      90_000,
    );
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const victimNode = victim.metadata.labels?.node ?? '';
    const victimId = instanceIdOf(victim.spec?.providerID ?? '');
    const podsOnVictim = (await webPods()).filter((p) => p.spec?.nodeName === victimNode);
    expect(podsOnVictim, 'two pods on the interrupted node').to.have.length(2);

    // The fewest Ready pods of web from the warning on, from a watch (every state the API reports),
    // and how long each pod created since then waited for a node (first seen to first seen bound).
    const ready = new Map<string, boolean>();
    let fewestReady = Number.POSITIVE_INFINITY;
    const count = (): void => {
      fewestReady = Math.min(fewestReady, [...ready.values()].filter(Boolean).length);
    };
    const firstSeen = new Map<string, number>();
    const pendingMs = new Map<string, number>();
    const before = new Set<string>();
    let watching = false;
    const note = (p: Pod, deleted = false): void => {
      const name = p.metadata.name ?? '';
      ready.set(name, !deleted && podReady(p));
      if (!watching) {
        before.add(name);
        return;
      }
      if (before.has(name)) return;
      if (!firstSeen.has(name)) firstSeen.set(name, Date.now());
      if ((p.spec?.nodeName ?? '') !== '' && !pendingMs.has(name))
        pendingMs.set(name, Date.now() - (firstSeen.get(name) ?? Date.now()));
    };
    const stopPodWatch = await watchEvents<Pod>(
      env.client,
      NS,
      CoreResources.pods,
      { labelSelector: 'app=web' },
      (ev) => {
        note(ev.object, ev.type === 'DELETED');
        count();
      },
      (items) => {
        for (const p of items) note(p);
        count();
        watching = true;
      },
    );
    const log = new MachineLog();
    await log.start(env, app);
    // When the reader deletes the message: what the machine had recorded by then.
    const atDelete: { replacing?: string; deadline?: string }[] = [];
    testHooks.beforeDelete = async () => {
      const m = await unlessNotFound(env.client.get<Machine>(MachineResource, victimName, NS));
      atDelete.push({
        ...(m?.metadata.annotations?.[REPLACING] === undefined
          ? {}
          : { replacing: m.metadata.annotations[REPLACING] }),
        ...(m?.metadata.annotations?.[DEADLINE] === undefined
          ? {}
          : { deadline: m.metadata.annotations[DEADLINE] }),
      });
    };

    const sentAt = Date.now();
    await send(spotWarning(victimId, new Date(sentAt)));
    const fleet = await replaced(app, victimName, 5, 120_000);
    await until(
      '10 Ready pods of web, none on the interrupted node',
      async () => {
        const pods = await webPods();
        const readyPods = pods.filter(podReady);
        return readyPods.length === 10 && !pods.some((p) => p.spec?.nodeName === victimNode);
      },
      Math.max(1, sentAt + 120_000 - Date.now()),
    );
    await until('the message deleted', queueEmpty, Math.max(1, sentAt + 120_000 - Date.now()));
    const seconds = (Date.now() - sentAt) / 1000;
    await stopPodWatch();
    await log.close();
    console.log(
      `      replaced and drained ${seconds.toFixed(1)} s after the warning; fewest Ready pods ${fewestReady} of 10`,
    );

    expect(seconds, 'everything within 120 s of the message').to.be.below(120);
    const replacements = log.replacements();
    expect(replacements, 'one replacement').to.have.length(1);
    const replacement = replacements[0] ?? '';
    expect(fleet.map((m) => m.metadata.name)).to.include(replacement);
    expect(log.deleted.has(victimName)).to.equal(true);
    expect(
      log.addedAt.get(replacement),
      'surge: the replacement created before the interrupted machine’s deletion began',
    ).to.be.at.most(log.deletingAt.get(victimName) ?? 0);
    expect(fewestReady, 'the budget (maxUnavailable 1) held throughout').to.be.at.least(9);
    // Pods move once, onto a node that is ready for them: the interrupted machine goes (its node
    // drained) only once its replacement runs, so the evicted pods' successors find room at once.
    expect(
      log.runningAt.get(replacement) ?? Infinity,
      'the replacement Running before the interrupted machine’s deletion began',
    ).to.be.at.most(log.deletingAt.get(victimName) ?? 0);
    expect(pendingMs.size, 'the two evicted pods’ successors').to.equal(2);
    for (const [pod, ms] of pendingMs)
      expect(ms, `${pod} waited for a node (scheduling only, not a boot)`).to.be.below(5_000);
    expect(
      atDelete,
      'the message deleted once, after replacing and the deadline were on the machine',
    ).to.have.length(1);
    expect(atDelete[0]?.replacing).to.equal('interrupted');
    expect(Date.parse(atDelete[0]?.deadline ?? '')).to.equal(Math.floor(sentAt / 1000) * 1000 + 90_000);
    // The manager's own report of how long the displaced pods waited.
    const rescheduled = await until(
      'the manager’s report of the displaced pods',
      async () => (await eventsOf(victimName)).find((e) => e.reason === 'InterruptedPodsRescheduled'),
      30_000,
    );
    expect(rescheduled.message).to.match(
      /^2 of the 2 pods its node's drain displaced got a node again: Pending/,
    );
    const events = await eventsOf(victimName);
    expect(events.map((e) => e.reason)).to.include('SpotInterruption');
    expect(
      events.map((e) => e.reason),
      'drained within the deadline, nothing forced',
    ).to.not.include('DrainForced');
    expect((await instance(victimId))?.State?.Name, 'the interrupted instance terminated').to.equal(
      'terminated',
    );
    expect(await counted('spot-interruption', 'acted')).to.equal(1);

    await removeWorkload('web');
    await env.scale(app, 0);
  });

  it('through the template’s rule: a Spot warning EC2 puts on the default event bus reaches the queue and the manager, which replaces the machine', async () => {
    const app = 'bus';
    await spotDeployment(app, 1);
    const machines = await until('1 Running spot machine', () => runningFleet(app, 1), 120_000);
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const victimId = instanceIdOf(victim.spec?.providerID ?? '');
    const actedBefore = await counted('spot-interruption', 'acted');

    // What EC2 puts on the account's default bus; the stack's rule forwards it to the queue.
    const events = new EventBridgeClient({
      region: REGION,
      endpoint: moto.endpoint,
      credentials: { accessKeyId: 'ec2', secretAccessKey: 'ec2' },
    });
    try {
      const put = await events.send(
        new PutEventsCommand({
          Entries: [
            {
              Source: 'aws.ec2',
              DetailType: 'EC2 Spot Instance Interruption Warning',
              Resources: [`arn:aws:ec2:${REGION}:${ACCOUNT}:instance/${victimId}`],
              Detail: JSON.stringify({ 'instance-id': victimId, 'instance-action': 'terminate' }),
            },
          ],
        }),
      );
      expect(put.FailedEntryCount ?? 0, 'the bus took the event').to.equal(0);
    } finally {
      events.destroy();
    }
    await replaced(app, victimName, 1, 120_000);
    await until('the message deleted', queueEmpty, 30_000);
    expect(await counted('spot-interruption', 'acted'), 'acted on once').to.equal(actedBefore + 1);
    expect((await instance(victimId))?.State?.Name, 'the warned instance terminated').to.equal('terminated');
    await env.scale(app, 0);
  });

  it('a warning whose deadline comes while a PodDisruptionBudget still refuses: the drain waits for the budget until the deadline, then deletes the pod without eviction, and the machine goes before EC2 would take the instance', async () => {
    const app = 'forced';
    await spotDeployment(app, 2);
    await until('2 Running spot machines', () => runningFleet(app, 2), 120_000);
    await workload('db', app, 2, { minAvailable: 2 });
    await until(
      '2 Ready pods of db, the budget allowing no disruption',
      async () => {
        const pdb = await env.client.get<PodDisruptionBudget>(CoreResources.podDisruptionBudgets, 'db', NS);
        return (
          (await podsOf('db')).filter(podReady).length === 2 &&
          pdb.status?.currentHealthy === 2 &&
          pdb.status.disruptionsAllowed === 0
        );
      },
      60_000,
    );
    const pod = (await podsOf('db'))[0];
    const victimNode = pod?.spec?.nodeName ?? '';
    const victim = (await env.machines(app)).find((m) => m.metadata.labels?.node === victimNode);
    if (victim === undefined) throw new Error(`no machine has node ${victimNode}`);
    const victimName = victim.metadata.name ?? '';

    // A warning EC2 sent 80 s ago (the queue was slow): its drain deadline is 10 s away.
    const warnedAt = Math.floor((Date.now() - 80_000) / 1000) * 1000;
    const deadline = warnedAt + 90_000;
    await send(spotWarning(instanceIdOf(victim.spec?.providerID ?? ''), new Date(warnedAt)));
    await until(`${victimName} deleted`, () => gone(victimName), 60_000);
    const goneAt = Date.now();
    await until('the message deleted', queueEmpty, 30_000);

    const events = await eventsOf(victimName);
    const blocked = events.find((e) => e.reason === 'DrainBlocked');
    expect(blocked?.message, 'the budget held the drain first').to.contain('PodDisruptionBudget default/db');
    const forced = events.find((e) => e.reason === 'DrainForced');
    expect(forced?.message).to.contain('interruption deadline');
    // Events carry whole seconds.
    expect(Date.parse(forced?.firstTimestamp ?? ''), 'forced at the deadline, not before').to.be.at.least(
      deadline - 1_000,
    );
    expect(goneAt, 'the machine gone before EC2 takes the instance (2 min after the warning)').to.be.below(
      warnedAt + 120_000,
    );
    await until(
      '2 Ready pods of db again, none on the interrupted node',
      async () => {
        const pods = await podsOf('db');
        return pods.filter(podReady).length === 2 && !pods.some((p) => p.spec?.nodeName === victimNode);
      },
      30_000,
    );
    await removeWorkload('db');
    await env.scale(app, 0);
  });

  it('malformed, unknown-instance and duplicate messages: each deleted and counted, the unknown instance’s after its last delivery (retried in between, sooner than the visibility timeout), one replacement for the two copies of a warning, and the reader goes on', async () => {
    const app = 'dups';
    await spotDeployment(app, 2);
    const machines = await until('2 Running spot machines', () => runningFleet(app, 2), 120_000);
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const log = new MachineLog();
    await log.start(env, app);
    const before = {
      malformed: await counted('malformed', 'malformed'),
      unknown: await counted('spot-interruption', 'unknown-instance'),
      retried: await counted('spot-interruption', 'retried'),
      acted: await counted('spot-interruption', 'acted'),
      duplicate: await counted('spot-interruption', 'duplicate'),
    };
    const unknownId = 'i-00000000deadbeef0';
    const deliveries = deliveriesOf(unknownId);

    await send('this is not an event');
    await send(
      JSON.stringify({
        version: '0',
        source: 'aws.ec2',
        'detail-type': 'EC2 Spot Instance Interruption Warning',
        time: '2026-11-28T02:00:00Z',
        detail: {},
      }),
    );
    await send(spotWarning(unknownId));
    const warning = spotWarning(instanceIdOf(victim.spec?.providerID ?? ''));
    await send(warning);
    await send(warning);
    await replaced(app, victimName, 2, 120_000);
    // The unknown instance's message is deleted at its last delivery, two retries after the first,
    // and counted once its DeleteMessage has been answered (the queue may read empty just before).
    await until('every message deleted', queueEmpty, 60_000);
    await until(
      'the unknown instance’s message counted',
      async () => (await counted('spot-interruption', 'unknown-instance')) > before.unknown,
      10_000,
    );
    await log.close();

    expect((await counted('malformed', 'malformed')) - before.malformed, 'malformed').to.equal(2);
    expect(
      (await counted('spot-interruption', 'unknown-instance')) - before.unknown,
      'unknown instance, counted once',
    ).to.equal(1);
    expect(
      (await counted('spot-interruption', 'retried')) - before.retried,
      'the deliveries of the unknown instance’s message before its last',
    ).to.equal(UNKNOWN_DELIVERIES - 1);
    expect(
      deliveries.map((d) => d.receiveCount),
      'delivered 3 times, then deleted',
    ).to.deep.equal([1, 2, 3]);
    expectSoonerThanVisibility(deliveries);
    expect((await counted('spot-interruption', 'acted')) - before.acted, 'acted').to.equal(1);
    expect((await counted('spot-interruption', 'duplicate')) - before.duplicate, 'duplicate').to.equal(1);
    expect(log.replacements(), 'one replacement for both copies').to.have.length(1);
    expect((await eventsOf(victimName)).filter((e) => e.reason === 'SpotInterruption')).to.have.length(1);
    await env.scale(app, 0);
  });

  it('a Spot warning that arrives before its new instance’s machine has recorded it: the first delivery finds no machine and comes back 10 s later instead of being deleted, the next acts on it (one replacement)', async () => {
    const app = 'early';
    const log = new MachineLog();
    await log.start(env, app);
    const before = {
      retried: await counted('spot-interruption', 'retried'),
      acted: await counted('spot-interruption', 'acted'),
      unknown: await counted('spot-interruption', 'unknown-instance'),
    };
    // EC2 starts the machine's instance at once, but the manager learns it only once the warning
    // has been received: RunInstances is executed, its answer held until then.
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    let launched: string | undefined;
    proxy.rule({
      action: 'RunInstances',
      times: 1,
      match: (params) => [...params.values()].some((v) => v.startsWith(`${app}-`)),
      hold: (xml) => {
        launched = /<instanceId>([^<]+)<\/instanceId>/.exec(xml)?.[1];
        return released;
      },
    });
    let victimName: string;
    let deliveries: { receiveCount: number; at: number }[];
    const sentAt = Date.now();
    try {
      await spotDeployment(app, 1);
      const id = await until('the instance started, its RunInstances answer held', () => launched, 60_000);
      deliveries = deliveriesOf(id);
      await send(spotWarning(id, new Date()));
      await until(
        'the warning retried',
        async () => (await counted('spot-interruption', 'retried')) > before.retried,
        30_000,
      );
      const machines = await env.machines(app);
      expect(machines, 'one machine').to.have.length(1);
      victimName = machines[0]?.metadata.name ?? '';
      expect(machines[0]?.spec?.providerID ?? '', 'its instance not recorded yet').to.equal('');
      expect(await queued(), 'the message not deleted').to.deep.equal({ visible: 0, inFlight: 1 });
    } finally {
      release();
      proxy.clearRules();
    }
    await replaced(app, victimName, 1, 120_000);
    await until('the message deleted', queueEmpty, 30_000);
    await until(
      'the message counted acted',
      async () => (await counted('spot-interruption', 'acted')) > before.acted,
      10_000,
    );
    await log.close();
    console.log(
      `      acted on at delivery ${deliveries.length}, replaced ${((Date.now() - sentAt) / 1000).toFixed(1)} s after the warning`,
    );

    expect(
      deliveries.map((d) => d.receiveCount),
      'unknown at the first delivery, acted on at the second',
    ).to.deep.equal([1, 2]);
    expectSoonerThanVisibility(deliveries);
    expect((await counted('spot-interruption', 'retried')) - before.retried, 'retried once').to.equal(1);
    expect((await counted('spot-interruption', 'acted')) - before.acted, 'acted on').to.equal(1);
    expect(
      (await counted('spot-interruption', 'unknown-instance')) - before.unknown,
      'never counted unknown',
    ).to.equal(0);
    expect((await eventsOf(victimName)).map((e) => e.reason)).to.include('SpotInterruption');
    expect(log.replacements(victimName), 'one replacement').to.have.length(1);
    await env.scale(app, 0);
  });

  it('a stopped instance the manager did not stop: its machine is marked Failed at once and replaced, without waiting for the health timeout', async () => {
    const app = 'stopped';
    await spotDeployment(app, 2);
    const machines = await until('2 Running spot machines', () => runningFleet(app, 2), 120_000);
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const victimId = instanceIdOf(victim.spec?.providerID ?? '');
    const log = new MachineLog();
    await log.start(env, app);

    // Someone stops the instance through EC2 itself (not the manager's proxy), and EventBridge says so.
    await cloud.ec2.send(new StopInstancesCommand({ InstanceIds: [victimId] }));
    const sentAt = Date.now();
    await send(stateChange(victimId, 'stopped'));
    await replaced(app, victimName, 2, 90_000);
    const seconds = (Date.now() - sentAt) / 1000;
    await until('the message deleted', queueEmpty, 30_000);
    await log.close();
    console.log(`      replaced ${seconds.toFixed(1)} s after the state change (health timeout: 10 min)`);

    expect([...(log.phases.get(victimName) ?? [])], 'the machine was marked Failed').to.include('Failed');
    expect(seconds, 'well within the health timeout of 10 minutes').to.be.below(60);
    const events = await eventsOf(victimName);
    const stopped = events.find((e) => e.reason === 'InstanceStopped');
    expect(stopped?.message).to.contain('did not ask for');
    expect(log.replacements(), 'one replacement').to.have.length(1);
    expect((await instance(victimId))?.State?.Name, 'the stopped instance terminated').to.equal('terminated');
    expect(await counted('instance-stopped', 'acted')).to.equal(1);
    await env.scale(app, 0);
  });

  /** Holds a message at a seam until the reader stops; says when it got there. */
  function holdAt(): {
    hook: (m: QueueMessage, signal: AbortSignal) => Promise<void>;
    reached: () => boolean;
  } {
    let reached = false;
    return {
      reached: () => reached,
      hook: (_m, signal) => {
        reached = true;
        return new Promise<void>((_resolve, reject) => {
          const stop = (): void => {
            reject(new Error('the reader stopped'));
          };
          if (signal.aborted) stop();
          else signal.addEventListener('abort', stop, { once: true });
        });
      },
    };
  }

  it('a manager restarted between receiving a warning and acting on it acts once after the restart: the message comes back, one replacement', async () => {
    const app = 'restart1';
    await spotDeployment(app, 2);
    const machines = await until('2 Running spot machines', () => runningFleet(app, 2), 120_000);
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const log = new MachineLog();
    await log.start(env, app);

    const held = holdAt();
    testHooks.received = held.hook;
    await send(spotWarning(instanceIdOf(victim.spec?.providerID ?? '')));
    await until('the warning received', held.reached, 30_000);
    await env.stopManager();
    testHooks = {};
    const m = await env.client.get<Machine>(MachineResource, victimName, NS);
    expect(m.metadata.annotations?.[REPLACING], 'nothing recorded before the restart').to.equal(undefined);
    expect(await queued(), 'the message not deleted').to.deep.equal({ visible: 0, inFlight: 1 });

    await startManager();
    // It comes back after the visibility timeout (20 s).
    await replaced(app, victimName, 2, 90_000);
    await until('the message deleted', queueEmpty, 30_000);
    await log.close();
    expect(log.replacements(), 'one replacement').to.have.length(1);
    expect(await counted('spot-interruption', 'acted'), 'acted on by the restarted manager').to.equal(1);
    await env.scale(app, 0);
  });

  it('a manager restarted after recording a warning but before deleting its message: the message comes back and changes nothing, still one replacement', async () => {
    const app = 'restart2';
    await spotDeployment(app, 2);
    const machines = await until('2 Running spot machines', () => runningFleet(app, 2), 120_000);
    const victim = machines[0];
    if (victim === undefined) throw new Error('no machine');
    const victimName = victim.metadata.name ?? '';
    const log = new MachineLog();
    await log.start(env, app);

    const held = holdAt();
    testHooks.beforeDelete = held.hook;
    await send(spotWarning(instanceIdOf(victim.spec?.providerID ?? '')));
    await until('the warning recorded, its message not yet deleted', held.reached, 30_000);
    await env.stopManager();
    testHooks = {};
    expect(await queued(), 'the message not deleted').to.deep.equal({ visible: 0, inFlight: 1 });

    await startManager();
    await replaced(app, victimName, 2, 90_000);
    await until('the message deleted', queueEmpty, 60_000);
    await log.close();
    expect(log.replacements(), 'one replacement').to.have.length(1);
    // Back after the visibility timeout, it finds the machine being deleted (a duplicate) or gone
    // (unknown-instance, at its last delivery).
    const dropped =
      (await counted('spot-interruption', 'duplicate')) +
      (await counted('spot-interruption', 'unknown-instance'));
    expect(dropped, 'the returning message dropped').to.equal(1);
    expect(await counted('spot-interruption', 'acted'), 'not acted on again').to.equal(0);
    expect((await eventsOf(victimName)).filter((e) => e.reason === 'SpotInterruption')).to.have.length(1);
    await env.scale(app, 0);
  });
});
