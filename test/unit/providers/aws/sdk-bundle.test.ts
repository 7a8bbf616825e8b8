import { createHash } from 'node:crypto';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import type { Ec2Sdk } from '../../../../lib/providers/aws/client.js';
import type { SqsSdk } from '../../../../lib/providers/aws/interruption/queue.js';
import { repoRoot } from '../../../harness/tools.js';

/** What the tests read of the request the SDK hands its HTTP handler. */
interface SentRequest {
  hostname: string;
  headers: Record<string, string>;
  body?: unknown;
}
type Command = {
  [K in keyof Ec2Sdk]: K extends `${string}Command` ? K : never;
}[keyof Ec2Sdk];

/** The bundle `npm run build` makes of lib/providers/aws/sdk-entry.ts, as client.ts loads it. */
const bundleUrl = pathToFileURL(
  path.join(repoRoot, 'dist', 'lib', 'providers', 'aws', 'sdk-bundle', 'sdk-entry.js'),
).href;

/**
 * A request handler in place of the SDK's HTTP one: records each request and answers it with the
 * XML EC2 would send (the Query protocol's `<ActionResponse>`, the members given).
 */
function fakeEc2(members: string): { handler: object; requests: SentRequest[] } {
  const requests: SentRequest[] = [];
  const handler = {
    handle: (request: SentRequest) => {
      requests.push(request);
      const action = new URLSearchParams(String(request.body)).get('Action') ?? '';
      const xml =
        `<?xml version="1.0" encoding="UTF-8"?><${action}Response xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">` +
        `<requestId>req-1</requestId>${members}</${action}Response>`;
      return Promise.resolve({
        response: {
          statusCode: 200,
          headers: { 'content-type': 'text/xml;charset=UTF-8' },
          body: Readable.from([Buffer.from(xml)]),
        },
      });
    },
    updateHttpClientConfig: () => undefined,
    httpHandlerConfigs: () => ({}),
  };
  return { handler, requests };
}

interface Case {
  command: Command;
  input: object;
  /** Query parameters the request must carry (besides Action and Version). */
  query: Record<string, string>;
  /** The response's members. */
  answer: string;
  /** What the output must hold. */
  output: object;
}

// The commands the AWS provider sends: one case each, and the bundle exports no other command.
const cases: Case[] = [
  {
    command: 'RunInstancesCommand',
    input: {
      ImageId: 'ami-1',
      InstanceType: 'm5.large',
      MinCount: 1,
      MaxCount: 1,
      ClientToken: 'token-1',
      TagSpecifications: [{ ResourceType: 'instance', Tags: [{ Key: 'Name', Value: 'm-1' }] }],
    },
    query: {
      ImageId: 'ami-1',
      InstanceType: 'm5.large',
      MinCount: '1',
      MaxCount: '1',
      ClientToken: 'token-1',
      'TagSpecification.1.ResourceType': 'instance',
      'TagSpecification.1.Tag.1.Key': 'Name',
      'TagSpecification.1.Tag.1.Value': 'm-1',
    },
    answer:
      '<reservationId>r-1</reservationId><instancesSet><item><instanceId>i-1</instanceId>' +
      '<instanceState><code>0</code><name>pending</name></instanceState></item></instancesSet>',
    output: { ReservationId: 'r-1', Instances: [{ InstanceId: 'i-1', State: { Code: 0, Name: 'pending' } }] },
  },
  {
    command: 'DescribeInstancesCommand',
    input: { Filters: [{ Name: 'tag:Name', Values: ['m-1'] }], MaxResults: 1000, NextToken: 'n1' },
    query: {
      'Filter.1.Name': 'tag:Name',
      'Filter.1.Value.1': 'm-1',
      MaxResults: '1000',
      NextToken: 'n1',
    },
    answer:
      '<reservationSet><item><reservationId>r-1</reservationId><instancesSet><item>' +
      '<instanceId>i-1</instanceId><privateDnsName>ip-10-0-0-1.ec2.internal</privateDnsName>' +
      '<launchTime>2026-11-27T10:00:00.000Z</launchTime><tagSet><item><key>Name</key><value>m-1</value></item></tagSet>' +
      '</item></instancesSet></item></reservationSet><nextToken>n2</nextToken>',
    output: {
      NextToken: 'n2',
      Reservations: [
        {
          ReservationId: 'r-1',
          Instances: [
            {
              InstanceId: 'i-1',
              PrivateDnsName: 'ip-10-0-0-1.ec2.internal',
              LaunchTime: new Date('2026-11-27T10:00:00.000Z'),
              Tags: [{ Key: 'Name', Value: 'm-1' }],
            },
          ],
        },
      ],
    },
  },
  {
    command: 'DescribeImagesCommand',
    input: { ImageIds: ['ami-1'] },
    query: { 'ImageId.1': 'ami-1' },
    answer:
      '<imagesSet><item><imageId>ami-1</imageId><rootDeviceName>/dev/xvda</rootDeviceName>' +
      '</item></imagesSet>',
    output: { Images: [{ ImageId: 'ami-1', RootDeviceName: '/dev/xvda' }] },
  },
  {
    command: 'TerminateInstancesCommand',
    input: { InstanceIds: ['i-1', 'i-2'] },
    query: { 'InstanceId.1': 'i-1', 'InstanceId.2': 'i-2' },
    answer:
      '<instancesSet><item><instanceId>i-1</instanceId><currentState><code>32</code>' +
      '<name>shutting-down</name></currentState></item></instancesSet>',
    output: {
      TerminatingInstances: [{ InstanceId: 'i-1', CurrentState: { Code: 32, Name: 'shutting-down' } }],
    },
  },
  {
    command: 'ModifyInstanceAttributeCommand',
    input: { InstanceId: 'i-1', SourceDestCheck: { Value: false } },
    query: { InstanceId: 'i-1', 'SourceDestCheck.Value': 'false' },
    answer: '<return>true</return>',
    output: {},
  },
  {
    command: 'ModifyNetworkInterfaceAttributeCommand',
    input: { NetworkInterfaceId: 'eni-1', SourceDestCheck: { Value: false } },
    query: { NetworkInterfaceId: 'eni-1', 'SourceDestCheck.Value': 'false' },
    answer: '<return>true</return>',
    output: {},
  },
  {
    command: 'AssignIpv6AddressesCommand',
    input: { NetworkInterfaceId: 'eni-1', Ipv6AddressCount: 1 },
    query: { NetworkInterfaceId: 'eni-1', Ipv6AddressCount: '1' },
    answer:
      '<networkInterfaceId>eni-1</networkInterfaceId>' +
      '<assignedIpv6Addresses><item>2001:db8::1</item></assignedIpv6Addresses>',
    output: { NetworkInterfaceId: 'eni-1', AssignedIpv6Addresses: ['2001:db8::1'] },
  },
  {
    command: 'DescribeInstanceStatusCommand',
    input: { InstanceIds: ['i-1'], IncludeAllInstances: true },
    query: { 'InstanceId.1': 'i-1', IncludeAllInstances: 'true' },
    answer:
      '<instanceStatusSet><item><instanceId>i-1</instanceId><instanceState><code>16</code>' +
      '<name>running</name></instanceState><systemStatus><status>impaired</status></systemStatus>' +
      '</item></instanceStatusSet>',
    output: {
      InstanceStatuses: [
        {
          InstanceId: 'i-1',
          InstanceState: { Code: 16, Name: 'running' },
          SystemStatus: { Status: 'impaired' },
        },
      ],
    },
  },
  {
    command: 'DescribeSpotPriceHistoryCommand',
    input: { InstanceTypes: ['m5.large'], ProductDescriptions: ['Linux/UNIX'], StartTime: new Date(0) },
    query: {
      'InstanceType.1': 'm5.large',
      'ProductDescription.1': 'Linux/UNIX',
      StartTime: '1970-01-01T00:00:00Z',
    },
    answer:
      '<spotPriceHistorySet><item><availabilityZone>eu-west-1a</availabilityZone>' +
      '<instanceType>m5.large</instanceType><spotPrice>0.035000</spotPrice>' +
      '<timestamp>2026-11-27T10:00:00.000Z</timestamp></item></spotPriceHistorySet>',
    output: {
      SpotPriceHistory: [
        {
          AvailabilityZone: 'eu-west-1a',
          InstanceType: 'm5.large',
          SpotPrice: '0.035000',
          Timestamp: new Date('2026-11-27T10:00:00.000Z'),
        },
      ],
    },
  },
];

describe('aws sdk bundle: the EC2 commands the provider sends, bundled with the client', () => {
  let sdk: Ec2Sdk;
  before(async () => {
    sdk = (await import(bundleUrl)) as Ec2Sdk;
  });

  it('exports the client, the web-identity credentials and exactly the commands tested here', () => {
    expect(typeof sdk.EC2Client).to.equal('function');
    expect(typeof sdk.fromTokenFile).to.equal('function');
    const commands = Object.keys(sdk).filter((k) => k.endsWith('Command'));
    expect(commands.sort()).to.deep.equal(cases.map((c) => c.command).sort());
  });

  for (const c of cases) {
    it(`${c.command}: the request carries the input's members, the answer parses into the output`, async () => {
      const { handler, requests } = fakeEc2(c.answer);
      const client = new sdk.EC2Client({
        region: 'eu-west-1',
        credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' },
        requestHandler: handler,
      });
      try {
        const Command = sdk[c.command] as new (input: object) => Parameters<typeof client.send>[0];
        const output = (await client.send(new Command(c.input))) as object;
        expect(requests).to.have.length(1);
        const request = requests[0];
        expect(request?.hostname).to.equal('ec2.eu-west-1.amazonaws.com');
        expect(request?.headers.authorization ?? '').to.match(/^AWS4-HMAC-SHA256 Credential=AKID\//);
        const params = Object.fromEntries(new URLSearchParams(String(request?.body)));
        expect(params).to.deep.equal({
          Action: c.command.replace(/Command$/, ''),
          Version: '2016-11-15',
          ...c.query,
        });
        expect(output).to.deep.include(c.output);
      } finally {
        client.destroy();
      }
    });
  }
});

/** The bundle of lib/providers/aws/sqs-entry.ts (the interruption queue's client), as queue.ts loads it. */
const sqsBundleUrl = pathToFileURL(
  path.join(repoRoot, 'dist', 'lib', 'providers', 'aws', 'sdk-bundle', 'sqs-entry.js'),
).href;

/** A request body as text (the JSON protocol's body is bytes). */
const bodyText = (b: unknown): string =>
  b instanceof Uint8Array ? Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8') : String(b);

/** A request handler answering SQS's JSON protocol with `answer` (as JSON). */
function fakeSqs(answer: object): { handler: object; requests: SentRequest[] } {
  const requests: SentRequest[] = [];
  const handler = {
    handle: (request: SentRequest) => {
      requests.push(request);
      return Promise.resolve({
        response: {
          statusCode: 200,
          headers: { 'content-type': 'application/x-amz-json-1.0' },
          body: Readable.from([Buffer.from(JSON.stringify(answer))]),
        },
      });
    },
    updateHttpClientConfig: () => undefined,
    httpHandlerConfigs: () => ({}),
  };
  return { handler, requests };
}

describe('aws sdk bundle: the SQS commands the interruption queue sends', () => {
  let sdk: SqsSdk;
  const queueUrl = 'https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions';
  before(async () => {
    sdk = (await import(sqsBundleUrl)) as SqsSdk;
  });

  it('exports the client and exactly ReceiveMessage, DeleteMessage and ChangeMessageVisibility', () => {
    expect(typeof sdk.SQSClient).to.equal('function');
    const commands = Object.keys(sdk).filter((k) => k.endsWith('Command'));
    expect(commands.sort()).to.deep.equal([
      'ChangeMessageVisibilityCommand',
      'DeleteMessageCommand',
      'ReceiveMessageCommand',
    ]);
  });

  it('ReceiveMessage: a JSON request to the queue URL’s host with the long poll’s parameters; the body checked against its MD5', async () => {
    const body = '{"detail-type":"EC2 Spot Instance Interruption Warning"}';
    const md5 = createHash('md5').update(body).digest('hex');
    const { handler, requests } = fakeSqs({
      Messages: [{ MessageId: 'm-1', ReceiptHandle: 'rh-1', MD5OfBody: md5, Body: body }],
    });
    const client = new sdk.SQSClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' },
      requestHandler: handler,
    });
    try {
      const out = await client.send(
        new sdk.ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 20,
          VisibilityTimeout: 20,
        }),
      );
      expect(out.Messages?.[0]).to.deep.include({ MessageId: 'm-1', ReceiptHandle: 'rh-1', Body: body });
      const request = requests[0];
      expect(request?.hostname).to.equal('sqs.eu-west-1.amazonaws.com');
      expect(request?.headers['x-amz-target']).to.equal('AmazonSQS.ReceiveMessage');
      expect(request?.headers.authorization ?? '').to.match(
        /^AWS4-HMAC-SHA256 Credential=AKID\/\d+\/eu-west-1\/sqs\//,
      );
      expect(JSON.parse(bodyText(request?.body))).to.deep.equal({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 20,
        VisibilityTimeout: 20,
      });
    } finally {
      client.destroy();
    }
  });

  it('ReceiveMessage: a body that does not match its MD5 fails', async () => {
    const { handler } = fakeSqs({
      Messages: [{ MessageId: 'm-1', ReceiptHandle: 'rh-1', MD5OfBody: '0'.repeat(32), Body: 'x' }],
    });
    const client = new sdk.SQSClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' },
      requestHandler: handler,
    });
    try {
      const err = await client.send(new sdk.ReceiveMessageCommand({ QueueUrl: queueUrl })).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(String(err)).to.match(/md5|checksum/i);
    } finally {
      client.destroy();
    }
  });

  it('ChangeMessageVisibility: the queue, the receipt handle and the seconds', async () => {
    const { handler, requests } = fakeSqs({});
    const client = new sdk.SQSClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' },
      requestHandler: handler,
    });
    try {
      await client.send(
        new sdk.ChangeMessageVisibilityCommand({
          QueueUrl: queueUrl,
          ReceiptHandle: 'rh-1',
          VisibilityTimeout: 10,
        }),
      );
      expect(requests[0]?.headers['x-amz-target']).to.equal('AmazonSQS.ChangeMessageVisibility');
      expect(JSON.parse(bodyText(requests[0]?.body))).to.deep.equal({
        QueueUrl: queueUrl,
        ReceiptHandle: 'rh-1',
        VisibilityTimeout: 10,
      });
    } finally {
      client.destroy();
    }
  });

  it('DeleteMessage: the queue and the receipt handle', async () => {
    const { handler, requests } = fakeSqs({});
    const client = new sdk.SQSClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' },
      requestHandler: handler,
    });
    try {
      await client.send(new sdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: 'rh-1' }));
      expect(requests[0]?.headers['x-amz-target']).to.equal('AmazonSQS.DeleteMessage');
      expect(JSON.parse(bodyText(requests[0]?.body))).to.deep.equal({
        QueueUrl: queueUrl,
        ReceiptHandle: 'rh-1',
      });
    } finally {
      client.destroy();
    }
  });
});
