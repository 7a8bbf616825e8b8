import { Readable } from 'node:stream';

import { expect } from 'chai';

import { fenceDriver } from '../../../../lib/driver/fence.js';
import { FakeClock } from '../../../../lib/kube/clock.js';
import { LeaseFence } from '../../../../lib/kube/fence.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { sdkEc2ApiWith } from '../../../../lib/providers/aws/client.js';
import { AwsDriver } from '../../../../lib/providers/aws/driver.js';
import { cls, codeOf, machine, secret } from './fixtures.js';

// The real SDK client (its middleware stack, signing and retries) in front of an HTTP handler that
// answers in memory: what reaches the handler is what would have left the process.

const CLUSTER = 'kubernetes.io/cluster/YOUR_CLUSTER_NAME';
const ROLE = 'kubernetes.io/role/YOUR_ROLE_NAME';

/** A describe answer for one instance (or none), in EC2's XML. */
function instancesXml(instance?: { id: string; name: string }): string {
  const item =
    instance === undefined
      ? ''
      : `<item><reservationId>r-1</reservationId><instancesSet><item>
          <instanceId>${instance.id}</instanceId><instanceState><code>16</code><name>running</name></instanceState>
          <privateDnsName>ip-10-0-0-1.eu-west-1.compute.internal</privateDnsName><sourceDestCheck>true</sourceDestCheck>
          <tagSet><item><key>Name</key><value>${instance.name}</value></item>
          <item><key>${CLUSTER}</key><value>1</value></item><item><key>${ROLE}</key><value>1</value></item></tagSet>
        </item></instancesSet></item>`;
  return `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>q</requestId><reservationSet>${item}</reservationSet></DescribeInstancesResponse>`;
}

const XML: Record<string, string> = {
  DescribeImages:
    '<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>q</requestId><imagesSet><item><imageId>ami-123456</imageId><rootDeviceName>/dev/xvda</rootDeviceName></item></imagesSet></DescribeImagesResponse>',
  TerminateInstances:
    '<TerminateInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>q</requestId><instancesSet/></TerminateInstancesResponse>',
  ModifyInstanceAttribute:
    '<ModifyInstanceAttributeResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>q</requestId><return>true</return></ModifyInstanceAttributeResponse>',
};

/**
 * EC2 in memory behind the SDK's HTTP handler seam. `onDescribe` runs while a DescribeInstances
 * is being answered (a test freezes the process there).
 */
class EndpointStub {
  readonly sent: string[] = [];
  instance: { id: string; name: string } | undefined;
  onDescribe: (() => void) | undefined;

  readonly handler = {
    handle: (request: { body?: unknown }): Promise<{ response: unknown }> => {
      const action = new URLSearchParams(String(request.body)).get('Action') ?? '';
      this.sent.push(action);
      let body = XML[action] ?? '';
      if (action === 'DescribeInstances') {
        this.onDescribe?.();
        body = instancesXml(this.instance);
      }
      return Promise.resolve({
        response: {
          statusCode: 200,
          headers: { 'content-type': 'text/xml' },
          body: Readable.from([Buffer.from(body)]),
        },
      });
    },
  };
}

function setup(): {
  stub: EndpointStub;
  clock: FakeClock;
  fence: LeaseFence;
  driver: ReturnType<typeof fenceDriver>;
} {
  const stub = new EndpointStub();
  const clock = new FakeClock();
  const fence = new LeaseFence(clock);
  fence.grant(clock.monotonic(), 10_000);
  const aws = new AwsDriver({
    logger: nullLogger,
    fence,
    launchBackoffMs: 0,
    visibilityBackoffMs: 0,
    lookupGatherMs: 0,
    ec2: sdkEc2ApiWith({ requestHandler: stub.handler }),
  });
  // As the manager wires it: the registry's guard checks the fence when a call starts.
  return { stub, clock, fence, driver: fenceDriver('AWS', aws, fence) };
}

describe('AWS provider: every EC2 write is fenced per attempt (real SDK, in-memory endpoint)', () => {
  it('sends no RunInstances when the process froze during the lookup before it and lost the Lease', async () => {
    const { stub, clock, driver } = setup();
    // A GC pause or SIGSTOP while the lookup's answer comes: the fence's deadline passes, its
    // timer has not run when the answer is handled.
    stub.onDescribe = () => {
      clock.stall(30_000);
    };
    const code = await codeOf(driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret }));
    expect(code).to.match(
      /^Unavailable: AWS RunInstances refused: this process no longer holds the leader Lease/,
    );
    expect(stub.sent).to.not.include('RunInstances');
    expect(stub.sent).to.include('DescribeInstances');
  });

  it('sends RunInstances while the Lease is held', async () => {
    const { stub, driver } = setup();
    const code = await codeOf(driver.createMachine({ machine: machine('m1'), machineClass: cls(), secret }));
    // The in-memory endpoint does not answer RunInstances with an instance: what matters is that it was sent.
    expect(code).to.match(/returned no instance/);
    expect(stub.sent).to.include('RunInstances');
  });

  it('sends no TerminateInstances after a freeze during the lookup by tags', async () => {
    const { stub, clock, driver } = setup();
    stub.instance = { id: 'i-0abc', name: 'm1' };
    stub.onDescribe = () => {
      clock.stall(30_000);
    };
    const code = await codeOf(driver.deleteMachine({ machine: machine('m1'), machineClass: cls(), secret }));
    expect(code).to.match(/^Unavailable: AWS TerminateInstances refused/);
    expect(stub.sent).to.deep.equal(['DescribeInstances']);
  });

  it('sends no ModifyInstanceAttribute after a freeze during the lookup of the instance to initialise', async () => {
    const { stub, clock, driver } = setup();
    stub.instance = { id: 'i-0abc', name: 'm1' };
    stub.onDescribe = () => {
      clock.stall(30_000);
    };
    const code = await codeOf(
      driver.initializeMachine({
        machine: machine('m1', 'aws:///eu-west-1/i-0abc'),
        machineClass: cls({ srcAndDstChecksEnabled: false }),
        secret,
      }),
    );
    expect(code).to.match(/^Unavailable: AWS ModifyInstanceAttribute refused/);
    expect(stub.sent).to.deep.equal(['DescribeInstances']);
  });

  it('lets reads through on a standby (the fence guards writes only)', async () => {
    const { stub, fence, driver } = setup();
    fence.revoke('standby');
    stub.instance = { id: 'i-0abc', name: 'm1' };
    const status = await driver.getMachineStatus({ machine: machine('m1'), machineClass: cls(), secret });
    expect(status.providerID).to.equal('aws:///eu-west-1/i-0abc');
  });
});
