// The MachineClass credentials policy of deploy/aws/machineclass-policy.yaml, and the manager's
// own policy of deploy/aws/interruption-queue.yaml (its queue), against the AWS emulator with IAM
// enforcement on (moto checks each request's action against the caller's
// policies; it ignores resources and conditions, so the test grants the template's actions on every
// resource). The whole manager runs a machine's life with credentials holding exactly those
// actions: launch, initialisation (source/destination check off), the status-check poll, the Spot
// price refresh, the orphan listing, deletion. Every EC2 call it made must have been allowed, every
// action the template grants must have been called or be on the short list of actions the
// scenario cannot exercise here (each with its reason), and each called action, taken away, is
// refused by the emulator: the policy is complete and nothing in it is unused.

import { readFileSync } from 'node:fs';
import path from 'node:path';

import {
  DescribeImagesCommand,
  DescribeInstanceStatusCommand,
  DescribeInstancesCommand,
  DescribeSpotPriceHistoryCommand,
  EC2Client,
  ModifyNetworkInterfaceAttributeCommand,
  RunInstancesCommand,
  TerminateInstancesCommand,
} from '@aws-sdk/client-ec2';
import {
  CreateAccessKeyCommand,
  CreateUserCommand,
  IAMClient,
  PutUserPolicyCommand,
} from '@aws-sdk/client-iam';
import { CreateQueueCommand, SQSClient, SendMessageCommand } from '@aws-sdk/client-sqs';
import { expect } from 'chai';

import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import {
  CLUSTER_TAG,
  REGION,
  applySampleClass,
  provisionCloud,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { repoRoot } from '../harness/tools.js';
import { sqsInterruptionQueue } from '../../lib/providers/aws/interruption/queue.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const APP = 'leastpriv';
const TEMPLATE = path.join(repoRoot, 'deploy', 'aws', 'machineclass-policy.yaml');
const QUEUE_TEMPLATE = path.join(repoRoot, 'deploy', 'aws', 'interruption-queue.yaml');

/**
 * Actions of the template a machine's life on the emulator does not call, and why. The test fails
 * when the set of uncalled actions differs from this list.
 */
const NOT_EXERCISED: Record<string, string> = {
  'ec2:CreateTags': 'authorised as part of RunInstances (its tag specifications); not a call of its own',
  'iam:PassRole': 'authorised as part of RunInstances (the instance profile); not a call of its own',
  'ec2:ModifyInstanceAttribute':
    'only for an instance EC2 describes without network interfaces; the emulator always lists them',
  'ec2:AssignIpv6Addresses':
    'only for ipv6PrefixCount, which needs an IPv6 subnet the emulator does not assign prefixes in',
};

/**
 * Every action the template's policies grant: each `service:Action` it names that is not a
 * condition key (those are followed by a colon, or a slash and a tag key).
 */
function templateActions(): string[] {
  const text = readFileSync(TEMPLATE, 'utf8');
  const names = [...text.matchAll(/\b(ec2|iam):[A-Z][A-Za-z0-9]+\b(?!"?\s*:)(?!\/)/g)].map((m) => m[0]);
  return [...new Set(names)].sort();
}

/** The actions of the queue template's ManagerPolicy (not the queue's own resource policy). */
function managerActions(): string[] {
  const text = readFileSync(QUEUE_TEMPLATE, 'utf8');
  const start = text.indexOf('  ManagerPolicy:');
  const end = text.indexOf('\nOutputs:', start);
  if (start < 0 || end < 0) throw new Error(`no ManagerPolicy resource in ${QUEUE_TEMPLATE}`);
  return [
    ...new Set([...text.slice(start, end).matchAll(/\bsqs:[A-Z][A-Za-z]+\b/g)].map((m) => m[0])),
  ].sort();
}

/** A policy document granting `actions` on every resource (what the emulator can check). */
const policyOf = (actions: string[]): string =>
  JSON.stringify({
    Version: '2012-10-17',
    Statement: [{ Effect: 'Allow', Action: actions, Resource: '*' }],
  });

describe('the MachineClass credentials policy (deploy/aws/machineclass-policy.yaml) on the EC2 emulator with IAM enforcement: complete and minimal', function () {
  this.timeout(180_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  let admin: EC2Client;
  let adminKeys: { accessKeyId: string; secretAccessKey: string };
  /** IAM as an administrator; the harness's keys until enforcement, an admin user's after. */
  let iam: IAMClient;
  const saved = process.env.AWS_ENDPOINT_URL_EC2;
  /** The manager's EC2 calls as the emulator answered them: action → HTTP statuses. */
  const calls = new Map<string, number[]>();

  /** An IAM user with `actions` on every resource; its keys. */
  async function user(
    name: string,
    actions: string[],
  ): Promise<{ accessKeyId: string; secretAccessKey: string }> {
    await iam.send(new CreateUserCommand({ UserName: name }));
    await iam.send(
      new PutUserPolicyCommand({ UserName: name, PolicyName: 'p', PolicyDocument: policyOf(actions) }),
    );
    const key = await iam.send(new CreateAccessKeyCommand({ UserName: name }));
    return {
      accessKeyId: key.AccessKey?.AccessKeyId ?? '',
      secretAccessKey: key.AccessKey?.SecretAccessKey ?? '',
    };
  }

  /** From now on the emulator checks every request against the caller's policies. */
  async function enforce(): Promise<void> {
    const r = await fetch(`${moto.endpoint}/moto-api/reset-auth`, { method: 'POST', body: '0' });
    expect(r.ok, 'moto reset-auth').to.equal(true);
  }

  before(async () => {
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint, { keepHost: true });
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    cloud = await provisionCloud(moto.endpoint);
    iam = cloud.iam;
    env = await LifecycleEnv.start({ kwok: true });
    adminKeys = await user('admin', ['*']);
    admin = new EC2Client({ region: REGION, endpoint: moto.endpoint, credentials: adminKeys });
    iam = new IAMClient({ region: REGION, endpoint: moto.endpoint, credentials: adminKeys });
    await enforce();
  });

  after(async () => {
    await env.stop();
    await (kubelet as Ec2KubeletSimulator | undefined)?.stop();
    admin.destroy();
    if (iam !== cloud.iam) iam.destroy();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    await proxy.stop();
    await moto.stop();
    if (saved === undefined) Reflect.deleteProperty(process.env, 'AWS_ENDPOINT_URL_EC2');
    else process.env.AWS_ENDPOINT_URL_EC2 = saved;
  });

  it('a machine’s whole life runs with exactly the template’s actions, every call allowed; each called action, taken away, is refused', async () => {
    const granted = templateActions();
    expect(granted, 'the template grants EC2 actions').to.include('ec2:RunInstances');
    const managerKeys = await user('mcm', granted);

    // The kubelets read EC2 as an administrator, straight from the emulator; the manager's calls go
    // through the proxy, which records them.
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
      credentials: adminKeys,
    });
    proxy.onAnswer = (action, _params, status) => {
      calls.set(action, [...(calls.get(action) ?? []), status]);
    };
    kubelet.start();
    await env.startManager({ awsInstanceStatusIntervalMs: 1_000, awsImpairedTimeoutMs: 60_000 });
    await applySampleClass(
      env.client,
      cloud,
      NS,
      APP,
      (c) => {
        c.providerSpec.srcAndDstChecksEnabled = false;
      },
      (secret) => {
        secret.data = {
          ...(secret.data ?? {}),
          providerAccessKeyId: Buffer.from(managerKeys.accessKeyId).toString('base64'),
          providerSecretAccessKey: Buffer.from(managerKeys.secretAccessKey).toString('base64'),
        };
      },
    );
    await env.createDeployment(APP, 1, APP);
    await until(
      'a Running machine',
      async () => (await env.machines(APP)).some((m) => phaseOf(m) === 'Running'),
      120_000,
    ).catch(async (err: unknown) => {
      const state = (await env.machines(APP)).map(
        (m) => `${m.metadata.name ?? ''} ${phaseOf(m)}: ${m.status?.lastOperation?.description ?? ''}`,
      );
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}; EC2 calls: ${JSON.stringify([...calls])}; machines: ${state.join('; ')}`,
        { cause: err },
      );
    });
    await until(
      'the status checks polled and the Spot prices read',
      () => Promise.resolve(calls.has('DescribeInstanceStatus') && calls.has('DescribeSpotPriceHistory')),
      60_000,
    );
    await env.scale(APP, 0);
    await until('the machine deleted', async () => (await env.machines(APP)).length === 0, 120_000);
    const live = (await taggedInstances(admin)).filter((i) => i.State?.Name !== 'terminated');
    expect(live, 'no instance left').to.deep.equal([]);

    // Complete: every call answered 200 with only the template's actions.
    const refused = [...calls].filter(([, statuses]) => statuses.some((s) => s !== 200));
    expect(refused, 'calls the emulator refused or failed').to.deep.equal([]);
    const called = [...calls.keys()].map((a) => `ec2:${a}`).sort();
    expect(
      called.filter((a) => !granted.includes(a)),
      'called but not granted',
    ).to.deep.equal([]);
    // Minimal: every granted action called, or listed with the reason it cannot be here.
    const uncalled = granted.filter((a) => !called.includes(a));
    expect(uncalled, 'granted, never called, and not listed in NOT_EXERCISED').to.deep.equal(
      Object.keys(NOT_EXERCISED).sort(),
    );
    console.log(`      called: ${called.join(', ')}`);

    // Each called action, taken away, is refused to the manager's user for the same kind of call.
    const instance = (await taggedInstances(admin))[0];
    const eni = instance?.NetworkInterfaces?.[0]?.NetworkInterfaceId ?? 'eni-00000000';
    const probe: Record<string, (ec2: EC2Client) => Promise<unknown>> = {
      'ec2:DescribeInstances': (ec2) => ec2.send(new DescribeInstancesCommand({})),
      'ec2:DescribeInstanceStatus': (ec2) => ec2.send(new DescribeInstanceStatusCommand({})),
      'ec2:DescribeImages': (ec2) => ec2.send(new DescribeImagesCommand({ ImageIds: [cloud.ami] })),
      'ec2:DescribeSpotPriceHistory': (ec2) => ec2.send(new DescribeSpotPriceHistoryCommand({})),
      'ec2:RunInstances': (ec2) =>
        ec2.send(
          new RunInstancesCommand({ ImageId: cloud.ami, MinCount: 1, MaxCount: 1, SubnetId: cloud.subnetId }),
        ),
      'ec2:ModifyNetworkInterfaceAttribute': (ec2) =>
        ec2.send(
          new ModifyNetworkInterfaceAttributeCommand({
            NetworkInterfaceId: eni,
            SourceDestCheck: { Value: false },
          }),
        ),
      'ec2:TerminateInstances': (ec2) =>
        ec2.send(new TerminateInstancesCommand({ InstanceIds: [instance?.InstanceId ?? 'i-00000000'] })),
    };
    expect(Object.keys(probe).sort(), 'a probe for every called action').to.deep.equal(called);
    for (const action of called) {
      const keys = await user(
        `without-${action.replace(':', '-')}`,
        granted.filter((a) => a !== action),
      );
      const ec2 = new EC2Client({
        region: REGION,
        endpoint: moto.endpoint,
        credentials: keys,
        maxAttempts: 1,
      });
      try {
        const err = await probe[action]?.(ec2).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(
          (err as { name?: string } | undefined)?.name,
          `${action} refused once the policy lacks it`,
        ).to.match(/AccessDenied|UnauthorizedOperation/);
      } finally {
        ec2.destroy();
      }
    }
  });

  it('the manager reads its interruption queue with exactly the ManagerPolicy’s actions; each, taken away, is refused at the step that needs it', async () => {
    const granted = managerActions();
    const sqs = new SQSClient({ region: REGION, endpoint: moto.endpoint, credentials: adminKeys });
    const saved = Object.fromEntries(
      ['AWS_ENDPOINT_URL_SQS', 'AWS_REGION', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'].map((k) => [
        k,
        process.env[k],
      ]),
    );
    /** What the manager's reader does with a message: receive, hand back at once, receive, delete. */
    const read = async (
      keys: { accessKeyId: string; secretAccessKey: string },
      url: string,
    ): Promise<string[]> => {
      process.env.AWS_ACCESS_KEY_ID = keys.accessKeyId;
      process.env.AWS_SECRET_ACCESS_KEY = keys.secretAccessKey;
      const queue = sqsInterruptionQueue(url);
      const done: string[] = [];
      const signal = new AbortController().signal;
      try {
        const first = await queue.receive(signal);
        expect(first, 'the message received').to.have.length(1);
        done.push('sqs:ReceiveMessage');
        await queue.changeVisibility(first[0]?.receiptHandle ?? '', 0, signal);
        done.push('sqs:ChangeMessageVisibility');
        const again = await queue.receive(signal);
        expect(again, 'the message back at once').to.have.length(1);
        await queue.delete(again[0]?.receiptHandle ?? '', signal);
        done.push('sqs:DeleteMessage');
      } catch (err) {
        // The emulator answers a refused call of SQS's JSON protocol with its XML AccessDenied and
        // HTTP 403, which the SDK reports as a deserialization error carrying that response.
        const e = err as {
          name?: string;
          $response?: { statusCode?: number };
          $metadata?: { httpStatusCode?: number };
        };
        const status = e.$metadata?.httpStatusCode ?? e.$response?.statusCode;
        if (status !== 403 && !(e.name ?? '').includes('AccessDenied')) throw err;
        done.push(`refused: HTTP ${String(status)}`);
      } finally {
        queue.close();
      }
      return done;
    };
    try {
      // The emulator's queue URLs name no region: the reader's region comes from AWS_REGION.
      process.env.AWS_ENDPOINT_URL_SQS = moto.endpoint;
      process.env.AWS_REGION = REGION;
      let n = 0;
      const queueWithMessage = async (): Promise<string> => {
        const q = await sqs.send(new CreateQueueCommand({ QueueName: `interruptions-${String(n++)}` }));
        const url = q.QueueUrl ?? '';
        await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: '{}' }));
        return url;
      };
      const steps = await read(await user('mcm-queue', granted), await queueWithMessage());
      expect(steps, 'every step allowed with the policy').to.deep.equal([
        'sqs:ReceiveMessage',
        'sqs:ChangeMessageVisibility',
        'sqs:DeleteMessage',
      ]);
      expect(granted, 'the policy grants what the reader calls, nothing else').to.deep.equal(
        [...steps].sort(),
      );
      for (const action of granted) {
        const without = await user(
          `mcm-queue-without-${action.replace(':', '-')}`,
          granted.filter((a) => a !== action),
        );
        const partial = await read(without, await queueWithMessage());
        expect(partial.at(-1), `refused at the step that needs ${action}`).to.match(/^refused: /);
        expect(partial, `every step before ${action} done`).to.deep.equal([
          ...steps.slice(0, steps.indexOf(action)),
          partial.at(-1),
        ]);
      }
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) Reflect.deleteProperty(process.env, k);
        else process.env[k] = v;
      }
      sqs.destroy();
    }
  });
});
