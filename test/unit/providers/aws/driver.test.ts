import { gzipSync } from 'node:zlib';

import { expect } from 'chai';

import type { Instance, InstanceNetworkInterface } from '@aws-sdk/client-ec2';

import type { Machine, MachineClass } from '../../../../lib/api/types.js';
import { MachineError } from '../../../../lib/driver/codes.js';
import type { Clock, TimerHandle } from '../../../../lib/kube/clock.js';
import type { Secret } from '../../../../lib/kube/types.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { AwsDriver, parseProviderID } from '../../../../lib/providers/aws/driver.js';
import { UnavailableOfferings } from '../../../../lib/providers/aws/offerings.js';
import { FakeEc2, ec2Error } from './fake-ec2.js';
import { b64, cls, codeOf, machine, secret } from './fixtures.js';

const meta = { $metadata: {} };
const CLUSTER = 'kubernetes.io/cluster/YOUR_CLUSTER_NAME';

/**
 * A clock whose sleeps return at once and move its time on by what they slept: a sequence of
 * paced calls shows its spacing in `monotonic()` without waiting for it.
 */
class InstantClock implements Clock {
  constructor(public t = 1_000_000) {}
  now(): number {
    return this.t;
  }
  monotonic(): number {
    return this.t;
  }
  setTimeout(): TimerHandle {
    throw new Error('not used');
  }
  sleep(ms: number): Promise<void> {
    this.t += ms;
    return Promise.resolve();
  }
}

function setup(
  clock: InstantClock = new InstantClock(),
  offerings?: UnavailableOfferings,
): {
  fake: FakeEc2;
  driver: AwsDriver;
  regions: string[];
} {
  const fake = new FakeEc2();
  const regions: string[] = [];
  const driver = new AwsDriver({
    logger: nullLogger,
    ...(offerings === undefined ? {} : { offerings }),
    launchBackoffMs: 0,
    visibilityBackoffMs: 0,
    lookupGatherMs: 0,
    clock,
    ec2: (region) => {
      regions.push(region);
      return fake;
    },
  });
  return { fake, driver, regions };
}

const tagged = (name: string): Partial<Instance> => ({
  Tags: [
    { Key: 'Name', Value: name },
    { Key: CLUSTER, Value: '1' },
    { Key: 'kubernetes.io/role/YOUR_ROLE_NAME', Value: '1' },
  ],
});

describe('AWS provider: driver behaviour (fake EC2)', () => {
  it('creates an instance and answers providerID aws:///<region>/<id> and the private DNS name', async () => {
    const { fake, driver, regions } = setup();
    const r = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    const id = fake.instances[0]?.InstanceId ?? '';
    expect(r.providerID).to.equal(`aws:///eu-west-1/${id}`);
    expect(r.nodeName).to.equal(fake.instances[0]?.PrivateDnsName);
    expect(fake.runs).to.have.length(1);
    expect(regions).to.deep.equal(['eu-west-1']);
  });

  it('sends gzipped user data to RunInstances byte for byte', async () => {
    const { fake, driver } = setup();
    const gz = gzipSync(Buffer.from('#cloud-config\npackages: [curl]\n'.repeat(40)));
    const gzSecret: Secret = { ...secret, data: { ...secret.data, userData: gz.toString('base64') } };
    await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret: gzSecret });
    expect(Buffer.from(fake.runs[0]?.UserData ?? '', 'base64').equals(gz)).to.be.true;
  });

  it("returns the machine's live instance instead of starting a second one", async () => {
    const { fake, driver } = setup();
    const existing = fake.add(tagged('m1'));
    fake.add({ ...tagged('m1'), State: { Name: 'terminated' } });
    const r = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(r.providerID).to.equal(`aws:///eu-west-1/${existing.InstanceId ?? ''}`);
    expect(fake.runs).to.have.length(0);
  });

  it('after a RunInstances whose answer was lost, finds the started instance and sends no second one', async () => {
    const { fake, driver } = setup();
    fake.afterRun = (n) => {
      if (n === 1) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    };
    const r = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(fake.runs).to.have.length(1);
    expect(fake.instances).to.have.length(1);
    expect(r.providerID).to.match(/^aws:\/\/\/eu-west-1\/i-/);
  });

  it('after a RunInstances answered with a server error once EC2 had started the instance, finds it and sends no second one', async () => {
    const { fake, driver } = setup();
    fake.afterRun = (n) => {
      if (n === 1) throw ec2Error('InternalError', 500);
    };
    const r = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(fake.runs).to.have.length(1);
    expect(fake.instances).to.have.length(1);
    expect(r.providerID).to.match(/^aws:\/\/\/eu-west-1\/i-/);
  });

  it('CreateMachine right after a GetMachineStatus that found nothing sends no second lookup; later it looks again', async () => {
    const clock = new InstantClock();
    const { fake, driver } = setup(clock);
    const req = { machine: machine('m1'), machineClass: cls(), secret };
    const describeImages = fake.describeImages.bind(fake);
    let images = 0;
    fake.describeImages = () => {
      images++;
      return describeImages();
    };
    expect(await codeOf(driver.getMachineStatus(req))).to.match(/^NotFound/);
    const created = await driver.createMachine(req);
    expect(fake.describes, 'the status lookup, then the wait for the instance to show').to.have.length(2);
    // InitializeMachine right after takes the instance the wait saw: two lookups per machine.
    const m1 = machine('m1', created.providerID);
    await driver.initializeMachine({ ...req, machine: m1 });
    expect(fake.describes, 'no lookup of its own').to.have.length(2);

    const req2 = { machine: machine('m2'), machineClass: cls(), secret };
    expect(await codeOf(driver.getMachineStatus(req2))).to.match(/^NotFound/);
    clock.t += 2_001;
    await driver.createMachine(req2);
    expect(fake.describes, 'a stale absence is looked at again').to.have.length(5);
    expect(images, 'one DescribeImages per AMI').to.equal(1);
    expect(fake.runs).to.have.length(2);
  });

  it('concurrent creates share their lookups and one DescribeImages, and each gets its own instance', async () => {
    const { fake, driver } = setup();
    const describeImages = fake.describeImages.bind(fake);
    let images = 0;
    fake.describeImages = () => {
      images++;
      return describeImages();
    };
    const names = Array.from({ length: 12 }, (_, k) => `burst-${String(k)}`);
    const answers = await Promise.all(
      names.map((n) => driver.createMachine({ machine: machine(n), machineClass: cls(), secret })),
    );
    expect(images, 'one DescribeImages for the burst').to.equal(1);
    const byFilter = (name: string): number =>
      fake.describes.filter((d) => d.Filters?.[0]?.Name === name).length;
    // The lookups before the launches and the waits for visibility after them, all by Name.
    expect(byFilter('tag:Name'), 'lookups by Name coalesced').to.be.at.most(4);
    expect(byFilter('instance-id'), 'visible by Name: no lookup by id').to.equal(0);
    expect(fake.runs).to.have.length(12);
    const nameOf = (providerID: string): string | undefined =>
      fake.instances
        .find((i) => providerID.endsWith(`/${i.InstanceId ?? ''}`))
        ?.Tags?.find((t) => t.Key === 'Name')?.Value;
    expect(answers.map((a) => nameOf(a.providerID))).to.deep.equal(names);
  });

  it('retries a throttled RunInstances; a capacity error fails at once as ResourceExhausted', async () => {
    const { fake, driver } = setup();
    fake.beforeRun = (n) => {
      if (n <= 2) throw ec2Error('RequestLimitExceeded', 503);
    };
    await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(fake.runs).to.have.length(3);
    expect(fake.instances).to.have.length(1);

    fake.beforeRun = () => {
      throw ec2Error('InsufficientInstanceCapacity', 500);
    };
    const before = fake.runs.length;
    expect(
      await codeOf(driver.createMachine({ machine: machine('m2'), machineClass: cls(), secret })),
    ).to.match(/^ResourceExhausted: AWS RunInstances failed: InsufficientInstanceCapacity/);
    expect(fake.runs.length - before, 'not retried by the driver').to.equal(1);
  });

  it('a capacity error marks the offering: its next launches fail ResourceExhausted without calling EC2 until the mark ends, other offerings launch', async () => {
    const clock = new InstantClock();
    const offerings = new UnavailableOfferings({ ttlMs: 180_000, clock });
    const { fake, driver } = setup(clock, offerings);
    const spot = cls({ spotPrice: undefined, instanceMarketOptions: { marketType: 'spot' } });
    fake.beforeRun = () => {
      throw ec2Error('InsufficientInstanceCapacity', 500);
    };
    expect(
      await codeOf(driver.createMachine({ machine: machine('m1'), machineClass: spot, secret })),
    ).to.match(/^ResourceExhausted: AWS RunInstances failed: InsufficientInstanceCapacity/);
    expect(fake.runs).to.have.length(1);

    fake.beforeRun = undefined;
    expect(
      await codeOf(driver.createMachine({ machine: machine('m2'), machineClass: spot, secret })),
    ).to.match(
      /^ResourceExhausted: AWS RunInstances not tried: spot t2.large in subnet-acbd1234 is unavailable until .* \(EC2 answered InsufficientInstanceCapacity\)$/,
    );
    expect(fake.runs, 'no call for a marked offering').to.have.length(1);
    clock.t += 60_000;
    const refused = await driver.createMachine({ machine: machine('m2'), machineClass: spot, secret }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused, 'a retry hint: when the mark ends').to.include({
      code: 'ResourceExhausted',
      retryAfterMs: 120_000,
    });

    // The on-demand class of the same type and subnet, and the spot class of another type.
    const onDemand = cls({ spotPrice: undefined });
    await driver.createMachine({ machine: machine('m3'), machineClass: onDemand, secret });
    const otherType = cls({
      spotPrice: undefined,
      machineType: 'm5.large',
      instanceMarketOptions: { marketType: 'spot' },
    });
    await driver.createMachine({ machine: machine('m4'), machineClass: otherType, secret });
    expect(fake.runs).to.have.length(3);

    clock.t += 120_000;
    await driver.createMachine({ machine: machine('m2'), machineClass: spot, secret });
    expect(fake.runs, 'launched once the mark ended').to.have.length(4);
  });

  it('a marked offering still answers a retried launch with the instance it started', async () => {
    const clock = new InstantClock();
    const offerings = new UnavailableOfferings({ ttlMs: 180_000, clock });
    const { fake, driver } = setup(clock, offerings);
    const spot = cls({ spotPrice: '' });
    const first = await driver.createMachine({ machine: machine('m1'), machineClass: spot, secret });
    offerings.mark(
      { market: 'spot', instanceType: 't2.large', subnetID: 'subnet-acbd1234' },
      'interruption',
      'x',
    );
    const again = await driver.createMachine({ machine: machine('m1'), machineClass: spot, secret });
    expect(again.providerID).to.equal(first.providerID);
    expect(fake.runs).to.have.length(1);
  });

  it('the account limits and other errors do not mark the offering', async () => {
    const clock = new InstantClock();
    const offerings = new UnavailableOfferings({ ttlMs: 180_000, clock });
    const { fake, driver } = setup(clock, offerings);
    for (const code of ['VcpuLimitExceeded', 'InstanceLimitExceeded', 'InvalidAMIID.NotFound']) {
      fake.beforeRun = () => {
        throw ec2Error(code, 400);
      };
      await codeOf(driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret }));
    }
    fake.beforeRun = undefined;
    await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(fake.runs).to.have.length(4);
  });

  it('after EC2 throttles a launch, the launches of that account and region are spaced out, and speed up again as they succeed', async () => {
    const pace = new InstantClock(0);
    const { fake, driver } = setup(pace);
    const at: number[] = [];
    fake.beforeRun = (n) => {
      at.push(pace.monotonic());
      if (n === 3) throw ec2Error('RequestLimitExceeded', 503);
    };
    for (let k = 0; k < 8; k++) {
      await driver.createMachine({ machine: machine(`m${String(k)}`), machineClass: cls(), secret });
    }
    expect(at.slice(0, 3), 'not limited before the first throttle').to.deep.equal([0, 0, 0]);
    expect(at[3], "the throttled launch's retry").to.equal(0);
    const gaps = at.slice(4).map((t, k) => t - (at[k + 3] ?? 0));
    // 2 launches a second right after the throttle (EC2's RunInstances refill), then faster.
    expect(gaps[0]).to.be.closeTo(500, 1);
    for (let k = 1; k < gaps.length; k++) {
      expect(gaps[k]).to.be.greaterThan(300);
      expect(gaps[k], 'speeding up as launches succeed').to.be.below(gaps[k - 1] ?? 0);
    }
  });

  it('a ClientToken EC2 answers with a terminated instance is replaced by a token of its own', async () => {
    const { fake, driver } = setup();
    const gone = fake.add({ ...tagged('other'), State: { Name: 'terminated' } });
    let first = true;
    fake.runInstances = (input) => {
      fake.runs.push(input);
      if (first) {
        first = false;
        return Promise.resolve({ ...meta, Instances: [gone] });
      }
      return Promise.resolve({ ...meta, Instances: [fake.add(tagged('m1'))] });
    };
    const r = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(r.providerID).not.to.include(gone.InstanceId ?? 'none');
    expect(fake.runs).to.have.length(2);
    expect(fake.runs[1]?.ClientToken).not.to.equal(fake.runs[0]?.ClientToken);
  });

  it('refuses an invalid class or Secret with InvalidArgument, naming fields and no secret value', async () => {
    const { fake, driver } = setup();
    expect(
      await codeOf(driver.createMachine({ machine: machine('m1'), machineClass: cls({ ami: '' }), secret })),
    ).to.match(
      /^InvalidArgument: invalid providerSpec of MachineClass test-mc: providerSpec\.ami: Required value/,
    );
    const noUserData: Secret = {
      metadata: {},
      data: { accessKeyID: b64('AKIDUNIT'), secretAccessKey: b64('SECRETUNIT') },
    };
    const text = await codeOf(
      driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret: noUserData }),
    );
    expect(text).to.match(/secretRef\.userData: Required value/);
    const noKey = await codeOf(
      driver.createMachine({
        machine: machine('m1'),
        machineClass: cls(),
        secret: { metadata: {}, data: { secretAccessKey: b64('SECRETUNIT') } },
      }),
    );
    expect(noKey).to.match(/secretRef\.providerAccessKeyId: Required value/);
    expect(noKey).not.to.include('SECRETUNIT');
    expect(fake.runs).to.have.length(0);
  });

  it('GetMachineStatus: by id when the machine has a providerID, NotFound when the instance is gone', async () => {
    const { fake, driver } = setup();
    const i = fake.add(tagged('m1'));
    const pid = `aws:///eu-west-1/${i.InstanceId ?? ''}`;
    const r = await driver.getMachineStatus({ machine: machine('m1', pid), machineClass: cls(), secret });
    expect(r.nodeName).to.equal(i.PrivateDnsName);
    // By the instance-id filter, not InstanceIds: an unknown id must not fail a coalesced lookup.
    expect(fake.describes.at(-1)?.Filters).to.deep.equal([{ Name: 'instance-id', Values: [i.InstanceId] }]);
    i.State = { Name: 'shutting-down' };
    expect(
      await codeOf(driver.getMachineStatus({ machine: machine('m1', pid), machineClass: cls(), secret })),
    ).to.match(/^NotFound/);
    expect(
      await codeOf(
        driver.getMachineStatus({
          machine: machine('m1', 'aws:///eu-west-1/i-ffffffff'),
          machineClass: cls(),
          secret,
        }),
      ),
    ).to.match(/^NotFound/);
    expect(
      await codeOf(driver.getMachineStatus({ machine: machine('m9'), machineClass: cls(), secret })),
    ).to.match(/^NotFound/);
  });

  it('srcAndDstChecksEnabled: false: Uninitialized until InitializeMachine disabled the check', async () => {
    const { fake, driver } = setup();
    const i = fake.add({ ...tagged('m1'), SourceDestCheck: true });
    const req = {
      machine: machine('m1', `aws:///eu-west-1/${i.InstanceId ?? ''}`),
      machineClass: cls({ srcAndDstChecksEnabled: false }),
      secret,
    };
    expect(await codeOf(driver.getMachineStatus(req))).to.match(/^Uninitialized/);
    await driver.initializeMachine(req);
    expect(fake.modified).to.deep.equal([i.InstanceId]);
    expect(await codeOf(driver.getMachineStatus(req))).to.equal('OK');
  });

  it('srcAndDstChecksEnabled: false on an instance with several interfaces: each non-EFA interface is changed, not the instance', async () => {
    const { fake, driver } = setup();
    const eni = (id: string, index: number, type = 'interface'): InstanceNetworkInterface => ({
      NetworkInterfaceId: id,
      InterfaceType: type,
      SourceDestCheck: true,
      Attachment: { DeviceIndex: index },
    });
    const i = fake.add({
      ...tagged('m1'),
      SourceDestCheck: true,
      NetworkInterfaces: [eni('eni-a', 0), eni('eni-b', 1), eni('eni-efa', 2, 'efa')],
    });
    const req = {
      machine: machine('m1', `aws:///eu-west-1/${i.InstanceId ?? ''}`),
      machineClass: cls({ srcAndDstChecksEnabled: false }),
      secret,
    };
    expect(await codeOf(driver.getMachineStatus(req))).to.match(/^Uninitialized/);
    await driver.initializeMachine(req);
    // EC2 refuses the instance-level attribute on an instance with more than one interface.
    expect(fake.modified, 'no instance-level change').to.deep.equal([]);
    expect(fake.modifiedInterfaces.sort()).to.deep.equal(['eni-a', 'eni-b']);
    expect(await codeOf(driver.getMachineStatus(req)), 'the EFA interface keeps its check').to.equal('OK');
  });

  it('an Uninitialized GetMachineStatus names the instance it found (the machine may not record it yet)', async () => {
    const { fake, driver } = setup();
    const i = fake.add({ ...tagged('m1'), SourceDestCheck: true });
    const err = await driver
      .getMachineStatus({
        machine: machine('m1'),
        machineClass: cls({ srcAndDstChecksEnabled: false }),
        secret,
      })
      .catch((e: unknown) => e);
    expect(err).to.be.instanceOf(MachineError);
    expect((err as MachineError).code).to.equal('Uninitialized');
    expect((err as MachineError).vm?.providerID).to.equal(`aws:///eu-west-1/${i.InstanceId ?? ''}`);
    expect((err as MachineError).vm?.nodeName).to.equal(i.PrivateDnsName);
  });

  it('CreateMachine waits for a new instance to show in DescribeInstances; InitializeMachine then finds it', async () => {
    const { fake, driver } = setup();
    let lookups = 0;
    const describe = fake.describeInstances.bind(fake);
    let launched = false;
    fake.describeInstances = (input) => {
      // After the launch the instance shows from the third wait's lookup on (EC2's eventual
      // consistency); each wait asks by Name, then by id.
      if (launched && input.Filters?.[0]?.Name === 'tag:Name' && ++lookups >= 3) fake.hidden.clear();
      return describe(input);
    };
    fake.afterRun = () => {
      launched = true;
      for (const i of fake.instances) fake.hidden.add(i.InstanceId ?? '');
    };
    const req = { machine: machine('m1'), machineClass: cls({ srcAndDstChecksEnabled: false }), secret };
    const created = await driver.createMachine(req);
    expect(lookups, 'looked until it showed').to.equal(3);
    const byId = fake.describes.filter((d) => d.Filters?.[0]?.Name === 'instance-id').length;
    expect(byId, 'asked by id after each miss by Name').to.equal(2);
    const i = fake.instances[0];
    expect(created.providerID).to.equal(`aws:///eu-west-1/${i?.InstanceId ?? ''}`);
    if (i !== undefined) i.SourceDestCheck = true;
    await driver.initializeMachine({ ...req, machine: machine('m1', created.providerID) });
    expect(fake.modified, 'initialised, not skipped').to.deep.equal([i?.InstanceId]);
  });

  it('CreateMachine answers with the started instance once 60 s have passed without it showing, the lookups’ own time counted', async () => {
    const clock = new InstantClock();
    const { fake, driver } = setup(clock);
    let launched = false;
    let after = 0;
    const describe = fake.describeInstances.bind(fake);
    fake.describeInstances = (input) => {
      // Each lookup after the launch takes 10 s (a slow or throttled DescribeInstances).
      if (launched) {
        after++;
        clock.t += 10_000;
      }
      return describe(input);
    };
    fake.afterRun = () => {
      launched = true;
      for (const i of fake.instances) fake.hidden.add(i.InstanceId ?? '');
    };
    const created = await driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(created.providerID).to.equal(`aws:///eu-west-1/${fake.instances[0]?.InstanceId ?? ''}`);
    // Three rounds of a lookup by Name and one by id (60 s), not the 20 rounds the pauses alone allow.
    expect(after).to.equal(6);
  });

  it('InitializeMachine of an instance not visible yet is Uninitialized (retried), not skipped', async () => {
    const { fake, driver } = setup();
    const i = fake.add({ ...tagged('m1'), SourceDestCheck: true });
    fake.hidden.add(i.InstanceId ?? '');
    const req = {
      machine: machine('m1', `aws:///eu-west-1/${i.InstanceId ?? ''}`),
      machineClass: cls({ srcAndDstChecksEnabled: false }),
      secret,
    };
    expect(await codeOf(driver.initializeMachine(req))).to.match(
      /^Uninitialized: .*visible to DescribeInstances yet/,
    );
    fake.hidden.clear();
    await driver.initializeMachine(req);
    expect(fake.modified).to.deep.equal([i.InstanceId]);
  });

  it('ipv6PrefixCount: assigned by InitializeMachine per interface (as gardener), not at launch; Uninitialized until assigned', async () => {
    const { fake, driver } = setup();
    const ipv6Class = cls({
      networkInterfaces: [
        { subnetID: 'subnet-a', securityGroupIDs: ['sg-1'], ipv6PrefixCount: 2 },
        { subnetID: 'subnet-b', securityGroupIDs: ['sg-1'] },
      ],
    });
    await driver.createMachine({ machine: machine('m0'), machineClass: ipv6Class, secret });
    expect(fake.runs[0]?.NetworkInterfaces?.[0]).to.not.have.property('Ipv6PrefixCount');
    const i = fake.add({
      ...tagged('m1'),
      NetworkInterfaces: [
        {
          NetworkInterfaceId: 'eni-0',
          Attachment: { DeviceIndex: 0 },
          Ipv6Prefixes: [{ Ipv6Prefix: 'x::/80' }],
        },
        { NetworkInterfaceId: 'eni-1', Attachment: { DeviceIndex: 1 } },
      ],
    });
    const req = {
      machine: machine('m1', `aws:///eu-west-1/${i.InstanceId ?? ''}`),
      machineClass: ipv6Class,
      secret,
    };
    expect(await codeOf(driver.getMachineStatus(req))).to.match(/^Uninitialized: .*1 IPv6 prefixes fewer/);
    await driver.initializeMachine(req);
    expect(fake.assigned).to.deep.equal([{ eni: 'eni-0', prefixes: 1 }]);
    expect(await codeOf(driver.getMachineStatus(req))).to.equal('OK');
  });

  it('uses the awsPlacement node-template annotation when the class sets no placement', async () => {
    const { fake, driver } = setup();
    const annotated = (name: string, value: string): Machine => {
      const m = machine(name);
      m.spec = { nodeTemplate: { metadata: { annotations: { 'machine.sapcloud.io/awsPlacement': value } } } };
      return m;
    };
    await driver.createMachine({
      machine: annotated('m1', '{"availabilityZone":"eu-west-1b","groupName":"pg-1","partitionNumber":2}'),
      machineClass: cls(),
      secret,
    });
    expect(fake.runs[0]?.Placement).to.deep.equal({
      AvailabilityZone: 'eu-west-1b',
      GroupName: 'pg-1',
      PartitionNumber: 2,
    });
    await driver.createMachine({
      machine: annotated('m2', '{"availabilityZone":"eu-west-1b"}'),
      machineClass: cls({ placement: { tenancy: 'dedicated' } }),
      secret,
    });
    expect(fake.runs[1]?.Placement, "the class's placement wins").to.deep.equal({ Tenancy: 'dedicated' });
    expect(
      await codeOf(
        driver.createMachine({ machine: annotated('m3', '{not json'), machineClass: cls(), secret }),
      ),
    ).to.match(/^InvalidArgument: .*machine\.sapcloud\.io\/awsPlacement/);
    expect(fake.runs).to.have.length(2);
  });

  it('refuses a class without block devices when creating, as gardener does, and starts nothing', async () => {
    const { fake, driver } = setup();
    expect(
      await codeOf(
        driver.createMachine({ machine: machine('m1'), machineClass: cls({ blockDevices: [] }), secret }),
      ),
    ).to.match(/^InvalidArgument: .*providerSpec\.blockDevices: Required value/);
    expect(fake.runs).to.have.length(0);
  });

  it('looks a machine up by its Name tag and both the cluster and the role tag', async () => {
    const { fake, driver } = setup();
    fake.add({
      Tags: [
        { Key: 'Name', Value: 'm1' },
        { Key: CLUSTER, Value: '1' },
      ],
    });
    expect(
      await codeOf(driver.getMachineStatus({ machine: machine('m1'), machineClass: cls(), secret })),
    ).to.match(/^NotFound/);
    const filters = fake.describes[0]?.Filters ?? [];
    expect(filters.filter((f) => f.Name === 'tag-key').map((f) => f.Values?.[0])).to.deep.equal([
      CLUSTER,
      'kubernetes.io/role/YOUR_ROLE_NAME',
    ]);
  });

  it('closes the EC2 client of credentials no call used for 30 minutes (a rotated key)', async () => {
    const clock = new InstantClock();
    const { fake, driver } = setup(clock);
    await driver
      .getMachineStatus({ machine: machine('m1'), machineClass: cls(), secret })
      .catch(() => undefined);
    const rotated: Secret = { ...secret, data: { ...secret.data, providerSecretAccessKey: b64('ROTATED') } };
    clock.t += 29 * 60_000;
    await driver
      .getMachineStatus({ machine: machine('m1'), machineClass: cls(), secret: rotated })
      .catch(() => undefined);
    expect(driver.openClients()).to.equal(2);
    expect(fake.destroyed).to.equal(0);
    clock.t += 2 * 60_000;
    await driver
      .getMachineStatus({ machine: machine('m1'), machineClass: cls(), secret: rotated })
      .catch(() => undefined);
    expect(driver.openClients(), "the old key's client is closed").to.equal(1);
    expect(fake.destroyed).to.equal(1);
  });

  it('DeleteMachine terminates; an instance already gone is NotFound (success), even when terminate fails on a part', async () => {
    const { fake, driver } = setup();
    const i = fake.add(tagged('m1'));
    const req = {
      machine: machine('m1', `aws:///eu-west-1/${i.InstanceId ?? ''}`),
      machineClass: cls(),
      secret,
    };
    expect(await driver.deleteMachine(req)).to.deep.equal({});
    expect(fake.terminated).to.deep.equal([i.InstanceId]);
    expect(await codeOf(driver.deleteMachine(req)), 'previous state terminated').to.match(/^NotFound/);
    fake.instances = [];
    expect(await codeOf(driver.deleteMachine(req)), 'unknown to EC2').to.match(/^NotFound/);
    const j = fake.add({ ...tagged('m2'), State: { Name: 'terminated' } });
    fake.terminate = () => {
      throw ec2Error('InvalidNetworkInterfaceID.NotFound', 400);
    };
    const req2 = {
      machine: machine('m2', `aws:///eu-west-1/${j.InstanceId ?? ''}`),
      machineClass: cls(),
      secret,
    };
    expect(await codeOf(driver.deleteMachine(req2))).to.match(/^NotFound/);
  });

  it('DeleteMachine works with an invalid or missing class: the region comes from the providerID', async () => {
    const { fake, driver, regions } = setup();
    const i = fake.add(tagged('m1'));
    const bare: MachineClass = { metadata: { name: 'gone' }, provider: 'AWS', providerSpec: {} };
    await driver.deleteMachine({
      machine: machine('m1', `aws:///us-east-2a/${i.InstanceId ?? ''}`),
      machineClass: bare,
      secret,
    });
    expect(fake.terminated).to.deep.equal([i.InstanceId]);
    expect(regions).to.deep.equal(['us-east-2']);
  });

  it('DeleteMachine of a machine without providerID terminates the instances tagged with its name', async () => {
    const { fake, driver } = setup();
    const i = fake.add(tagged('m1'));
    fake.add(tagged('m2'));
    await driver.deleteMachine({ machine: machine('m1'), machineClass: cls(), secret });
    expect(fake.terminated).to.deep.equal([i.InstanceId]);
  });

  it('ListMachines: cluster and role tag keys, live states, every page, instances without Name left out', async () => {
    const { fake, driver } = setup();
    fake.pageSize = 2;
    const live = [
      fake.add(tagged('a')),
      fake.add(tagged('b')),
      fake.add({ ...tagged('c'), State: { Name: 'stopped' } }),
    ];
    fake.add({ ...tagged('d'), State: { Name: 'terminated' } });
    fake.add({
      Tags: [
        { Key: CLUSTER, Value: '1' },
        { Key: 'kubernetes.io/role/YOUR_ROLE_NAME', Value: '1' },
      ],
    });
    fake.add({
      Tags: [
        { Key: 'Name', Value: 'e' },
        { Key: CLUSTER, Value: '1' },
      ],
    });
    const r = await driver.listMachines({ machineClass: cls(), secret });
    expect(r.machineList).to.deep.equal(
      Object.fromEntries(live.map((i, n) => [`aws:///eu-west-1/${i.InstanceId ?? ''}`, ['a', 'b', 'c'][n]])),
    );
    const filters = fake.describes.at(-1)?.Filters;
    expect(filters).to.deep.include({
      Name: 'instance-state-name',
      Values: ['pending', 'running', 'stopping', 'stopped'],
    });
    expect(fake.describes.length, 'paged').to.be.greaterThan(1);
  });

  it('GetVolumeIDs: in-tree awsElasticBlockStore and CSI ebs.csi.aws.com volumes, nothing else', async () => {
    const { driver } = setup();
    const r = await driver.getVolumeIDs({
      pvSpecs: [
        { awsElasticBlockStore: { volumeID: 'aws://eu-west-1a/vol-0a' } },
        { awsElasticBlockStore: { volumeID: 'vol-0b' } },
        { csi: { driver: 'ebs.csi.aws.com', volumeHandle: 'vol-0c' } },
        { csi: { driver: 'efs.csi.aws.com', volumeHandle: 'fs-1' } },
        { nfs: { server: 'x', path: '/' } },
      ],
    });
    expect(r.volumeIDs).to.deep.equal(['vol-0a', 'vol-0b', 'vol-0c']);
  });

  it('parses providerIDs of the driver and of a kubelet', () => {
    expect(parseProviderID('aws:///eu-west-1/i-0abc')).to.deep.equal({
      location: 'eu-west-1',
      instanceId: 'i-0abc',
    });
    expect(parseProviderID('aws:///eu-west-1a/i-0abc')).to.deep.equal({
      location: 'eu-west-1a',
      instanceId: 'i-0abc',
    });
    expect(parseProviderID('virtual://zone/m1')).to.be.undefined;
    expect(parseProviderID('aws:///eu-west-1/vol-1')).to.be.undefined;
  });
});
