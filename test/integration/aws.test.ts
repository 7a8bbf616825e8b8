import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';

import { expect } from 'chai';

import {
  DescribeInstanceAttributeCommand,
  DescribeVolumesCommand,
  RunInstancesCommand,
  type Instance,
} from '@aws-sdk/client-ec2';

import { MachinePhase } from '../../lib/api/constants.js';
import {
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineClass,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Node, Secret } from '../../lib/kube/types.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { startMoto, type Moto } from '../harness/moto.js';
import {
  CLUSTER_TAG,
  REGION,
  ROLE_TAG,
  isLive,
  provisionCloud,
  applySampleClass,
  instanceIdOf,
  tagOf,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { FleetWatch } from './env/fleetwatch.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

describe('AWS provider on the EC2 emulator (real kube-apiserver, kwok, moto)', function () {
  this.timeout(240_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  const savedEndpoint = process.env.AWS_ENDPOINT_URL_EC2;
  const savedStsEndpoint = process.env.AWS_ENDPOINT_URL_STS;
  /** Where the web identity test's token file lies. */
  const tokenDir = mkdtempSync(path.join(tmpdir(), 'aws-web-identity-'));

  before(async () => {
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint);
    // The SDK's standard variable: the manager's driver reaches the emulator (through the fault
    // proxy) with no flag of ours.
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    // The STS call of a web identity goes the same way (the SDK's per-service variable).
    process.env.AWS_ENDPOINT_URL_STS = proxy.endpoint;
    env = await LifecycleEnv.start({ kwok: true });
    await env.startManager({ machineSafetyOrphanVmsPeriodMs: 3_000 });
  });

  after(async () => {
    await env.stop();
    await proxy.stop();
    await moto.stop();
    if (savedEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
    else process.env.AWS_ENDPOINT_URL_EC2 = savedEndpoint;
    if (savedStsEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_STS;
    else process.env.AWS_ENDPOINT_URL_STS = savedStsEndpoint;
    rmSync(tokenDir, { recursive: true, force: true });
  });

  beforeEach(async () => {
    proxy.clearRules();
    proxy.resetCounts();
    await moto.reset();
    cloud = await provisionCloud(moto.endpoint);
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
    });
    kubelet.start();
  });

  afterEach(async () => {
    proxy.clearRules();
    await kubelet.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
  });

  const applySample = (
    name: string,
    edit?: (c: MachineClass) => void,
    editSecret?: (s: Secret) => void,
  ): Promise<void> => applySampleClass(env.client, cloud, NS, name, edit, editSecret);

  /** The machines of a deployment, all Running, each with a Ready Node of its instance. */
  async function runningFleet(app: string, n: number): Promise<Machine[] | undefined> {
    const machines = await env.machines(app);
    if (machines.length !== n || !machines.every((m) => phaseOf(m) === MachinePhase.Running))
      return undefined;
    const nodes = new Map((await env.nodes()).map((node) => [node.metadata.name ?? '', node]));
    for (const m of machines) {
      const node = nodes.get(m.metadata.labels?.node ?? '');
      if (node === undefined || !isReady(node)) return undefined;
      if (instanceIdOf(node.spec?.providerID ?? '') !== instanceIdOf(m.spec?.providerID ?? ''))
        return undefined;
    }
    return machines;
  }

  async function liveInstances(): Promise<Instance[]> {
    return (await taggedInstances(cloud.ec2)).filter(isLive);
  }

  async function removeDeployment(name: string): Promise<void> {
    await env.scale(name, 0);
    await until(`no machine of ${name}`, async () => (await env.machines(name)).length === 0, 120_000);
  }

  it("gardener's sample class and Secret: a MachineDeployment 0→5→0 runs 5 instances as gardener launches them, and leaves none", async () => {
    await applySample('test-mc');
    await env.createDeployment('aws-pool', 0, 'test-mc');
    await env.scale('aws-pool', 5);
    const machines = await until(
      '5 Running machines with Ready nodes',
      () => runningFleet('aws-pool', 5),
      180_000,
    );

    const instances = await liveInstances();
    expect(instances, 'one instance per machine, no more').to.have.length(5);
    const byId = new Map(instances.map((i) => [i.InstanceId ?? '', i]));
    for (const m of machines) {
      const providerID = m.spec?.providerID ?? '';
      expect(providerID).to.match(new RegExp(`^aws:///${REGION}/i-[0-9a-f]+$`));
      const i = byId.get(instanceIdOf(providerID));
      if (i === undefined)
        expect.fail(`machine ${m.metadata.name ?? ''} has no live instance (${providerID})`);
      expect(m.metadata.labels?.node, 'the node name is the private DNS name').to.equal(i.PrivateDnsName);
      expect(i.InstanceType).to.equal('t2.large');
      expect(i.KeyName).to.equal('key-value-pair-name');
      expect(i.IamInstanceProfile?.Arn).to.match(/:instance-profile\/iam-name$/);
      expect(i.SubnetId).to.equal(cloud.subnetId);
      const nics = i.NetworkInterfaces ?? [];
      expect(nics.map((n) => n.SubnetId)).to.deep.equal([cloud.subnetId]);
      expect(nics.flatMap((n) => n.Groups ?? []).map((g) => g.GroupId)).to.deep.equal([
        cloud.securityGroupId,
      ]);
      expect(tagOf(i, 'Name'), "Name is the machine's, not the class's").to.equal(m.metadata.name);
      expect(tagOf(i, CLUSTER_TAG)).to.equal('1');
      expect(tagOf(i, ROLE_TAG)).to.equal('1');
      expect(tagOf(i, 'tag1')).to.equal('tag1-value');
      expect(tagOf(i, 'tag2')).to.equal('tag2-value');
      const ud = await cloud.ec2.send(
        new DescribeInstanceAttributeCommand({ InstanceId: i.InstanceId, Attribute: 'userData' }),
      );
      expect(Buffer.from(ud.UserData?.Value ?? '', 'base64').toString('utf8')).to.equal(
        'encoded-cloud-config',
      );
      const devices = (i.BlockDeviceMappings ?? []).map((b) => b.DeviceName).sort();
      expect(devices).to.deep.equal([cloud.rootDeviceName, '/dev/sdb'].sort());
      const volumeIds = (i.BlockDeviceMappings ?? []).map((b) => b.Ebs?.VolumeId ?? '');
      const volumes = await cloud.ec2.send(new DescribeVolumesCommand({ VolumeIds: volumeIds }));
      for (const v of volumes.Volumes ?? []) {
        expect(v.Size).to.equal(50);
        expect(v.VolumeType).to.equal('gp2');
        expect(v.Tags?.find((t) => t.Key === 'Name')?.Value, 'volumes carry the machine name').to.equal(
          m.metadata.name,
        );
      }
      expect(
        volumes.Volumes?.find((v) => v.Encrypted === true),
        'the /dev/sdb volume is encrypted',
      ).to.not.be.undefined;
    }

    await removeDeployment('aws-pool');
    expect(await liveInstances(), 'no instance is left at 0').to.deep.equal([]);
    await until(
      'the nodes of the terminated instances are gone',
      async () =>
        (await env.nodes()).filter((n) => kubelet.registered.has(n.metadata.name ?? '')).length === 0,
    );
  });

  it('deleting a machine terminates its instance and a replacement machine gets a new one', async () => {
    await applySample('replace-mc');
    await env.createDeployment('replace', 2, 'replace-mc');
    const [victim] = await until('2 Running machines', () => runningFleet('replace', 2), 180_000);
    if (victim === undefined) expect.fail('no machine');
    const victimInstance = instanceIdOf(victim.spec?.providerID ?? '');
    await env.client.delete(MachineResource, victim.metadata.name ?? '', { namespace: NS });

    const replaced = await until(
      '2 Running machines again, the deleted one replaced',
      async () => {
        const ms = await runningFleet('replace', 2);
        return ms?.every((m) => m.metadata.name !== victim.metadata.name) === true ? ms : undefined;
      },
      180_000,
    );
    const all = await taggedInstances(cloud.ec2);
    const old = all.find((i) => i.InstanceId === victimInstance);
    expect(old?.State?.Name, "the deleted machine's instance").to.equal('terminated');
    const live = all.filter(isLive).map((i) => i.InstanceId ?? '');
    expect(live.sort()).to.deep.equal(replaced.map((m) => instanceIdOf(m.spec?.providerID ?? '')).sort());
    await removeDeployment('replace');
    expect(await liveInstances()).to.deep.equal([]);
  });

  it('a Secret with workloadIdentityTokenFile and roleARN: the role is assumed with the token and the machine runs, no token in its status', async () => {
    const token = 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWNtIn0.c2lnbmVk';
    const tokenFile = path.join(tokenDir, 'token');
    writeFileSync(tokenFile, token);
    const role = 'arn:aws:iam::123456789012:role/machine-controller-manager';
    const assumed: { token: string | null; role: string | null }[] = [];
    proxy.rule({
      action: 'AssumeRoleWithWebIdentity',
      match: (params) => {
        assumed.push({ token: params.get('WebIdentityToken'), role: params.get('RoleArn') });
        return false;
      },
    });
    await applySample('wi-mc');
    await env.client.patch<Secret>(
      CoreResources.secrets,
      'wi-mc-secret',
      {
        data: {
          providerAccessKeyId: null,
          providerSecretAccessKey: null,
          workloadIdentityTokenFile: Buffer.from(tokenFile).toString('base64'),
          roleARN: Buffer.from(role).toString('base64'),
        },
      },
      { type: 'merge', namespace: NS },
    );
    await env.createDeployment('wi', 1, 'wi-mc');
    const [m] = await until('1 Running machine', () => runningFleet('wi', 1), 180_000);
    expect(assumed.length, 'AssumeRoleWithWebIdentity sent').to.be.at.least(1);
    expect(assumed[0]).to.deep.equal({ token, role });
    expect(JSON.stringify(m?.status ?? {})).to.not.include(token);
    expect((await liveInstances()).map((i) => i.InstanceId)).to.deep.equal([
      instanceIdOf(m?.spec?.providerID ?? ''),
    ]);
    await removeDeployment('wi');
  });

  it('an instance with the cluster and role tags and no machine is terminated by orphan collection; one without a Name tag is left alone', async () => {
    await applySample('orphan-mc');
    await env.createDeployment('orphans', 1, 'orphan-mc');
    const [kept] = await until('1 Running machine', () => runningFleet('orphans', 1), 180_000);
    if (kept === undefined) expect.fail('no machine');
    const tags = [
      { Key: CLUSTER_TAG, Value: '1' },
      { Key: ROLE_TAG, Value: '1' },
      { Key: 'Name', Value: 'orphans-gone-machine' },
    ];
    const run = await cloud.ec2.send(
      new RunInstancesCommand({
        ImageId: cloud.ami,
        InstanceType: 't2.large',
        MinCount: 1,
        MaxCount: 1,
        SubnetId: cloud.subnetId,
        TagSpecifications: [{ ResourceType: 'instance', Tags: tags }],
      }),
    );
    const orphan = run.Instances?.[0]?.InstanceId ?? '';
    expect(orphan).to.match(/^i-/);
    // The same tags without a Name: nothing proves it is a machine's (gardener would delete it).
    const unnamed = await cloud.ec2.send(
      new RunInstancesCommand({
        ImageId: cloud.ami,
        InstanceType: 't2.large',
        MinCount: 1,
        MaxCount: 1,
        SubnetId: cloud.subnetId,
        TagSpecifications: [{ ResourceType: 'instance', Tags: tags.filter((t) => t.Key !== 'Name') }],
      }),
    );
    const foreign = unnamed.Instances?.[0]?.InstanceId ?? '';

    await until(
      'the orphan instance terminated',
      async () =>
        (await taggedInstances(cloud.ec2)).find((i) => i.InstanceId === orphan)?.State?.Name === 'terminated',
      60_000,
    );
    // Two more orphan passes after the one that terminated the orphan.
    const passes = async (): Promise<number> => {
      const metric = await env.manager?.registry.getSingleMetric('controller_runtime_reconcile_total')?.get();
      return (metric?.values ?? [])
        .filter((v) => v.labels.controller === 'safety-orphan-vms')
        .reduce((n, v) => n + v.value, 0);
    };
    const after = await passes();
    await until('two more orphan passes', async () => (await passes()) >= after + 2, 30_000);
    const live = (await liveInstances()).map((i) => i.InstanceId).sort();
    expect(live, "the machine's own instance and the unnamed one are kept").to.deep.equal(
      [instanceIdOf(kept.spec?.providerID ?? ''), foreign].sort(),
    );
    await removeDeployment('orphans');
  });

  it('a class without ami starts no instance; the machine and a Warning event say ami is required', async () => {
    await applySample('no-ami-mc', (c) => {
      delete c.providerSpec.ami;
    });
    await env.createDeployment('no-ami', 1, 'no-ami-mc');
    const machine = await until(
      'the machine reports its class problem',
      async () => {
        const [m] = await env.machines('no-ami');
        return m?.status?.lastOperation?.description?.includes('providerSpec.ami') === true ? m : undefined;
      },
      60_000,
    );
    expect(machine.status?.lastOperation?.errorCode).to.equal('InvalidArgument');
    expect(machine.status?.lastOperation?.description).to.match(/providerSpec\.ami: Required value/);
    expect(machine.spec?.providerID ?? '').to.equal('');
    const events = await until('a Warning event on the machine', async () => {
      const list = await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: `involvedObject.name=${machine.metadata.name ?? ''}`,
      });
      const warnings = list.items.filter(
        (e) => e.type === 'Warning' && e.message?.includes('providerSpec.ami'),
      );
      return warnings.length > 0 ? warnings : undefined;
    });
    expect(events[0]?.message).to.match(/ami is required|providerSpec\.ami: Required value/);
    expect(await taggedInstances(cloud.ec2), 'no instance was started').to.deep.equal([]);
    await removeDeployment('no-ami');
  });

  it("gardener's field semantics: the awsPlacement node-template annotation places the instance, a KMS key goes with encrypted volumes only, no IPv6 prefix count at launch", async () => {
    const sent: URLSearchParams[] = [];
    proxy.onAnswer = (action, params) => {
      if (action === 'RunInstances') sent.push(params);
    };
    try {
      await applySample('placed-mc', (c) => {
        c.providerSpec.blockDevices = [
          {
            deviceName: '/root',
            ebs: { volumeSize: 20, volumeType: 'gp3', encrypted: true, kmsKeyID: 'kms-root' },
          },
          {
            deviceName: '/dev/sdb',
            ebs: { volumeSize: 10, volumeType: 'gp3', encrypted: false, kmsKeyID: 'kms-x' },
          },
        ];
      });
      const placement = { hostId: 'h-0123456789abcdef0', tenancy: 'host' };
      await env.createDeployment(
        'placed',
        1,
        'placed-mc',
        {},
        {
          nodeTemplate: {
            metadata: { annotations: { 'machine.sapcloud.io/awsPlacement': JSON.stringify(placement) } },
          },
        },
      );
      const [m] = await until('1 Running machine', () => runningFleet('placed', 1), 180_000);
      const params = sent[0];
      if (params === undefined) expect.fail('no RunInstances seen');
      expect(params.get('Placement.HostId')).to.equal('h-0123456789abcdef0');
      expect(params.get('Placement.Tenancy')).to.equal('host');
      expect(params.get('BlockDeviceMapping.1.Ebs.KmsKeyId'), 'the encrypted root volume').to.equal(
        'kms-root',
      );
      expect(params.has('BlockDeviceMapping.2.Ebs.KmsKeyId'), 'the unencrypted data volume').to.equal(false);
      const [i] = (await liveInstances()).filter(
        (x) => x.InstanceId === instanceIdOf(m?.spec?.providerID ?? ''),
      );
      expect(i?.Placement?.HostId, 'the emulator placed it as asked').to.equal('h-0123456789abcdef0');
    } finally {
      proxy.onAnswer = undefined;
    }
    await removeDeployment('placed');
  });

  it('a class without block devices starts no instance (gardener refuses it too); the machine says why', async () => {
    await applySample('no-disks-mc', (c) => {
      delete c.providerSpec.blockDevices;
    });
    await env.createDeployment('no-disks', 1, 'no-disks-mc');
    const machine = await until(
      'the machine reports its class problem',
      async () => {
        const [m] = await env.machines('no-disks');
        return m?.status?.lastOperation?.description?.includes('blockDevices') === true ? m : undefined;
      },
      60_000,
    );
    expect(machine.status?.lastOperation?.errorCode).to.equal('InvalidArgument');
    expect(machine.status?.lastOperation?.description).to.match(/providerSpec\.blockDevices: Required value/);
    expect(await taggedInstances(cloud.ec2), 'no instance was started').to.deep.equal([]);
    await removeDeployment('no-disks');
  });

  it('a create whose RunInstances answer was lost finds the instance it started: exactly one instance', async () => {
    await applySample('lost-mc');
    proxy.rule({ action: 'RunInstances', times: 1, dropAnswer: true });
    await env.createDeployment('lost', 1, 'lost-mc');
    const [m] = await until('1 Running machine', () => runningFleet('lost', 1), 180_000);
    expect(proxy.faulted.get('RunInstances'), 'the first answer was dropped').to.equal(1);
    // The emulator ignores ClientToken: a second RunInstances would have started a second instance.
    expect(proxy.calls.get('RunInstances'), 'RunInstances was not sent again').to.equal(1);
    const live = await liveInstances();
    expect(live.map((i) => i.InstanceId)).to.deep.equal([instanceIdOf(m?.spec?.providerID ?? '')]);
    await removeDeployment('lost');
  });

  it('InsufficientInstanceCapacity on one class: its machine shows ResourceExhausted, the other class runs', async () => {
    await applySample('scarce-mc', (c) => {
      c.providerSpec.machineType = 'm5.large';
    });
    await applySample('plenty-mc');
    proxy.rule({
      action: 'RunInstances',
      match: (params) => params.get('InstanceType') === 'm5.large',
      error: {
        status: 500,
        code: 'InsufficientInstanceCapacity',
        message:
          'We currently do not have sufficient m5.large capacity in the Availability Zone you requested.',
      },
    });
    await env.createDeployment('scarce', 1, 'scarce-mc');
    await env.createDeployment('plenty', 1, 'plenty-mc');
    const scarce = await until('the scarce machine reports ResourceExhausted', async () => {
      const [m] = await env.machines('scarce');
      return m?.status?.lastOperation?.errorCode === 'ResourceExhausted' ? m : undefined;
    });
    expect(scarce.status?.lastOperation?.description).to.include('InsufficientInstanceCapacity');
    expect(phaseOf(scarce)).to.equal(MachinePhase.CrashLoopBackOff);
    expect(scarce.spec?.providerID ?? '').to.equal('');
    await until('the other class runs', () => runningFleet('plenty', 1), 180_000);
    const types = (await liveInstances()).map((i) => i.InstanceType);
    expect(types, 'no m5.large instance was started').to.deep.equal(['t2.large']);
    await removeDeployment('scarce');
    await removeDeployment('plenty');
  });

  it('throttling bursts and 2 s latency: a 0→30 scale converges with no failed machine', async () => {
    await applySample('busy-mc');
    // Bursts of RequestLimitExceeded: the first 6 calls, then 3 calls in every 20.
    let seen = 0;
    let throttled = 0;
    proxy.rule({
      match: () => {
        seen++;
        const throttle = seen <= 6 || seen % 20 < 3;
        if (throttle) throttled++;
        return throttle;
      },
      error: { status: 503, code: 'RequestLimitExceeded', message: 'Request limit exceeded.' },
    });
    proxy.rule({ delayMs: 2_000 });
    await env.createDeployment('busy', 30, 'busy-mc');
    const troubled = new Set<string>();
    await until(
      '30 Running machines',
      async () => {
        for (const m of await env.machines('busy')) {
          if (m.status?.lastOperation?.state === 'Failed' || phaseOf(m) === MachinePhase.Failed) {
            troubled.add(`${m.metadata.name ?? ''}: ${m.status?.lastOperation?.description ?? ''}`);
          }
        }
        return runningFleet('busy', 30);
      },
      240_000,
    );
    expect(throttled, 'calls answered RequestLimitExceeded').to.be.greaterThan(10);
    expect(proxy.faulted.get('RunInstances') ?? 0, 'RunInstances calls throttled or delayed').to.be.at.least(
      30,
    );
    expect([...troubled], 'no machine saw a failed operation').to.deep.equal([]);
    expect(await liveInstances(), 'one instance per machine').to.have.length(30);
    proxy.clearRules();
    await removeDeployment('busy');
  });

  it('srcAndDstChecksEnabled: false with two interfaces, gzipped user data, new instances hidden from DescribeInstances at first: every interface is initialised, the user data arrives byte for byte', async () => {
    const userData = gzipSync(Buffer.from('#cloud-config\nruncmd: [[echo, hello]]\n'.repeat(20)));
    await applySample(
      'nat',
      (c) => {
        c.providerSpec.srcAndDstChecksEnabled = false;
        const first = (c.providerSpec.networkInterfaces as Record<string, unknown>[])[0] ?? {};
        c.providerSpec.networkInterfaces = [first, { ...first }];
      },
      (secret) => {
        secret.data = { ...(secret.data ?? {}), userData: userData.toString('base64') };
      },
    );
    // Real EC2 may leave a new instance out of DescribeInstances for a while after RunInstances.
    proxy.hideNewInstances(3);
    await env.createDeployment('nat', 3, 'nat');
    await until('3 Running machines', () => runningFleet('nat', 3), 180_000);
    expect(proxy.hiddenAnswers, 'the emulator hid new instances').to.be.greaterThan(0);
    const live = await liveInstances();
    expect(live).to.have.length(3);
    for (const i of live) {
      expect(i.NetworkInterfaces, `instance ${i.InstanceId ?? ''}`).to.have.length(2);
      expect(
        (i.NetworkInterfaces ?? []).map((n) => n.SourceDestCheck),
        `the check is off on every interface of ${i.InstanceId ?? ''}`,
      ).to.deep.equal([false, false]);
      const ud = await cloud.ec2.send(
        new DescribeInstanceAttributeCommand({ InstanceId: i.InstanceId, Attribute: 'userData' }),
      );
      expect(Buffer.from(ud.UserData?.Value ?? '', 'base64').equals(userData), 'gzipped user data unchanged')
        .to.be.true;
    }
    await removeDeployment('nat');
  });

  it('a rolling update to another machineType replaces every instance within maxSurge 1 / maxUnavailable 0', async () => {
    await applySample('roll-small');
    await applySample('roll-large', (c) => {
      c.providerSpec.machineType = 'm5.large';
      c.providerSpec.srcAndDstChecksEnabled = false;
    });
    await env.createDeployment('roll', 3, 'roll-small');
    const before = await until('3 Running t2.large machines', () => runningFleet('roll', 3), 180_000);
    const oldInstances = before.map((m) => instanceIdOf(m.spec?.providerID ?? ''));
    const watch = new FleetWatch(env, 'roll');
    await watch.start();
    await env.client.patch(
      MachineDeploymentResource,
      'roll',
      { spec: { template: { spec: { class: { name: 'roll-large' } } } } },
      { type: 'merge', namespace: NS },
    );
    const after = await until(
      '3 Running machines of the new class, none of the old',
      async () => {
        const ms = await runningFleet('roll', 3);
        return ms?.every((m) => m.spec?.class?.name === 'roll-large') === true ? ms : undefined;
      },
      180_000,
    );
    await watch.stop();
    expect(watch.maxTotal, 'never more than replicas + maxSurge machines').to.be.at.most(4);
    expect(watch.minRunning, 'never fewer than replicas - maxUnavailable Running').to.be.at.least(3);
    // The watch saw the rollout itself: old and new machines at once, each new one created and
    // each old one deleted while it watched.
    expect(watch.mixed, 'old and new machines existed at once').to.equal(true);
    expect(watch.created.size, 'new machines created while watched').to.equal(3);
    expect(watch.deleted.size, 'old machines deleted while watched').to.equal(3);
    const all = await taggedInstances(cloud.ec2);
    const live = all.filter(isLive);
    expect(live.map((i) => i.InstanceType)).to.deep.equal(['m5.large', 'm5.large', 'm5.large']);
    // Per interface: the emulator does not mirror the primary interface's check on the instance.
    const checks = (i: Instance): (boolean | undefined)[] =>
      (i.NetworkInterfaces ?? []).map((n) => n.SourceDestCheck);
    expect(
      live.flatMap(checks),
      'InitializeMachine disabled the source/destination check (srcAndDstChecksEnabled: false)',
    ).to.deep.equal([false, false, false]);
    expect(
      all.filter((i) => oldInstances.includes(i.InstanceId ?? '')).flatMap(checks),
      'the old class left it on',
    ).to.deep.equal([true, true, true]);
    expect(live.map((i) => i.InstanceId ?? '').sort()).to.deep.equal(
      after.map((m) => instanceIdOf(m.spec?.providerID ?? '')).sort(),
    );
    for (const id of oldInstances) {
      expect(all.find((i) => i.InstanceId === id)?.State?.Name, `old instance ${id}`).to.equal('terminated');
    }
    await removeDeployment('roll');
  });
});
