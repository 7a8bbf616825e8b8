import { createHash } from 'node:crypto';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import { FakeClock } from '../../../../../lib/kube/clock.js';
import { LeaseFence } from '../../../../../lib/kube/fence.js';
import {
  queueUrlProblem,
  regionOfQueueUrl,
  sqsInterruptionQueue,
  type SqsSdk,
} from '../../../../../lib/providers/aws/interruption/queue.js';
import { repoRoot } from '../../../../harness/tools.js';

const sqsBundle = pathToFileURL(
  path.join(repoRoot, 'dist', 'lib', 'providers', 'aws', 'sdk-bundle', 'sqs-entry.js'),
).href;
const loadSdk = (): Promise<SqsSdk> => import(sqsBundle) as Promise<SqsSdk>;

interface Sent {
  hostname: string;
  headers: Record<string, string>;
  body?: unknown;
}

/** Answers every SQS request with `answer`, recording the requests. */
function fakeSqs(answer: () => object): { handler: object; requests: Sent[] } {
  const requests: Sent[] = [];
  return {
    requests,
    handler: {
      handle: (request: Sent) => {
        requests.push(request);
        return Promise.resolve({
          response: {
            statusCode: 200,
            headers: { 'content-type': 'application/x-amz-json-1.0' },
            body: Readable.from([Buffer.from(JSON.stringify(answer()))]),
          },
        });
      },
      updateHttpClientConfig: () => undefined,
      httpHandlerConfigs: () => ({}),
    },
  };
}

describe('the interruption queue (SQS)', () => {
  const URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions';
  const savedKey = process.env.AWS_ACCESS_KEY_ID;
  const savedSecret = process.env.AWS_SECRET_ACCESS_KEY;
  before(() => {
    process.env.AWS_ACCESS_KEY_ID = 'AKID';
    process.env.AWS_SECRET_ACCESS_KEY = 'SECRET';
  });
  after(() => {
    if (savedKey === undefined) delete process.env.AWS_ACCESS_KEY_ID;
    else process.env.AWS_ACCESS_KEY_ID = savedKey;
    if (savedSecret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
    else process.env.AWS_SECRET_ACCESS_KEY = savedSecret;
  });

  it('takes the region from an AWS queue URL, none from an emulator’s', () => {
    expect(regionOfQueueUrl(URL)).to.equal('eu-west-1');
    expect(regionOfQueueUrl('https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q')).to.equal('cn-north-1');
    expect(regionOfQueueUrl('http://127.0.0.1:5000/123456789012/q')).to.equal(undefined);
  });

  it('accepts queue URLs and says what is wrong with other values', () => {
    expect(queueUrlProblem(URL)).to.equal(undefined);
    expect(queueUrlProblem('http://127.0.0.1:5000/123456789012/q')).to.equal(undefined);
    expect(queueUrlProblem('mcm-interruptions')).to.contain('not a URL');
    expect(queueUrlProblem('https://sqs.eu-west-1.amazonaws.com/mcm-interruptions')).to.contain(
      '/<account>/<queue>',
    );
    expect(queueUrlProblem('ftp://example.com/1/q')).to.contain('http(s)');
  });

  it('long-polls for up to 10 messages with the visibility timeout, and returns their bodies and handles', async () => {
    const body = '{"x":1}';
    const md5 = createHash('md5').update(body).digest('hex');
    const { handler, requests } = fakeSqs(() => ({
      Messages: [
        {
          MessageId: 'm-1',
          ReceiptHandle: 'rh-1',
          MD5OfBody: md5,
          Body: body,
          Attributes: { ApproximateReceiveCount: '3' },
        },
      ],
    }));
    const queue = sqsInterruptionQueue(URL, { loadSdk, requestHandler: handler });
    try {
      const got = await queue.receive(new AbortController().signal);
      expect(got).to.deep.equal([{ messageId: 'm-1', receiptHandle: 'rh-1', body, receiveCount: 3 }]);
      expect(requests[0]?.hostname).to.equal('sqs.eu-west-1.amazonaws.com');
      const raw = requests[0]?.body as Uint8Array;
      const sent = JSON.parse(
        Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'),
      ) as object;
      expect(sent).to.deep.include({
        QueueUrl: URL,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 20,
        VisibilityTimeout: 20,
      });
    } finally {
      queue.close();
    }
  });

  it('asks for each message’s receive count (ApproximateReceiveCount), 1 when SQS leaves it out', async () => {
    const body = '{}';
    const md5 = createHash('md5').update(body).digest('hex');
    const { handler, requests } = fakeSqs(() => ({
      Messages: [{ MessageId: 'm-1', ReceiptHandle: 'rh-1', MD5OfBody: md5, Body: body }],
    }));
    const queue = sqsInterruptionQueue(URL, { loadSdk, requestHandler: handler });
    try {
      const got = await queue.receive(new AbortController().signal);
      expect(got[0]?.receiveCount).to.equal(1);
      const raw = requests[0]?.body as Uint8Array;
      const sent = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8')) as {
        MessageSystemAttributeNames?: string[];
      };
      expect(sent.MessageSystemAttributeNames).to.deep.equal(['ApproximateReceiveCount']);
    } finally {
      queue.close();
    }
  });

  it('changes a message’s visibility: ChangeMessageVisibility with its receipt handle and the seconds', async () => {
    const { handler, requests } = fakeSqs(() => ({}));
    const queue = sqsInterruptionQueue(URL, { loadSdk, requestHandler: handler });
    try {
      await queue.changeVisibility('rh-1', 10, new AbortController().signal);
      expect(requests[0]?.headers['x-amz-target']).to.equal('AmazonSQS.ChangeMessageVisibility');
      const raw = requests[0]?.body as Uint8Array;
      const sent = JSON.parse(
        Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'),
      ) as object;
      expect(sent).to.deep.equal({ QueueUrl: URL, ReceiptHandle: 'rh-1', VisibilityTimeout: 10 });
    } finally {
      queue.close();
    }
  });

  it('sends to AWS_ENDPOINT_URL_SQS when it is set, whatever host the queue URL names', async () => {
    const { handler, requests } = fakeSqs(() => ({}));
    process.env.AWS_ENDPOINT_URL_SQS = 'http://127.0.0.1:4566';
    const queue = sqsInterruptionQueue(URL, { loadSdk, requestHandler: handler });
    try {
      await queue.delete('rh-1', new AbortController().signal);
      expect(requests[0]?.hostname).to.equal('127.0.0.1');
    } finally {
      delete process.env.AWS_ENDPOINT_URL_SQS;
      queue.close();
    }
  });

  it('deletes nothing and changes no visibility from a process that does not hold the Lease: the requests never leave', async () => {
    const { handler, requests } = fakeSqs(() => ({}));
    const fence = new LeaseFence(new FakeClock());
    const queue = sqsInterruptionQueue(URL, { loadSdk, requestHandler: handler, fence });
    try {
      const err = await queue.delete('rh-1', new AbortController().signal).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(String(err)).to.contain('SQS DeleteMessage: refused');
      const changeErr = await queue.changeVisibility('rh-1', 10, new AbortController().signal).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(String(changeErr)).to.contain('SQS ChangeMessageVisibility: refused');
      expect(requests).to.deep.equal([]);
      // Receiving is no write: it goes out.
      await queue.receive(new AbortController().signal);
      expect(requests).to.have.length(1);
    } finally {
      queue.close();
    }
  });
});
