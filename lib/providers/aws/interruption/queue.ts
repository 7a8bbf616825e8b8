// The SQS queue EventBridge delivers interruption events to, behind a small interface (tests pass
// a fake): long-polled receives, deletes and visibility changes, on @aws-sdk/client-sqs from the
// bundle of sqs-entry.ts, loaded by the first call.
//
// The queue is the manager's, not a MachineClass's: its client takes the manager's own AWS
// identity through the SDK's default chain (IRSA or EKS Pod Identity web identity, environment,
// shared config, instance profile). The region is the queue URL's (sqs.<region>.amazonaws.com),
// else the SDK's (AWS_REGION). The endpoint is the SDK's as for EC2: AWS_ENDPOINT_URL_SQS or
// AWS_ENDPOINT_URL (a VPC endpoint, a proxy, an emulator), else the queue URL's host.
//
// DeleteMessage and ChangeMessageVisibility are fenced per attempt, as EC2 writes are (client.ts):
// a process that lost the Lease acknowledges nothing and reschedules nothing, so the message comes
// back to the leader after its visibility timeout.

import type { SQSClient } from '@aws-sdk/client-sqs';

import type { WriteFence } from '../../../kube/fence.js';
import type * as SqsEntry from '../sqs-entry.js';

/** A message as received: its body and the handle that deletes it. */
export interface QueueMessage {
  messageId: string;
  receiptHandle: string;
  body: string;
  /** How often SQS has handed it out, this time included. */
  receiveCount: number;
}

export interface InterruptionQueue {
  readonly url: string;
  /** One long poll: up to 10 messages, or none after the wait. */
  receive(signal: AbortSignal): Promise<QueueMessage[]>;
  delete(receiptHandle: string, signal: AbortSignal): Promise<void>;
  /** Hands a received message out again `seconds` from now, instead of after its visibility timeout. */
  changeVisibility(receiptHandle: string, seconds: number, signal: AbortSignal): Promise<void>;
  close(): void;
}

/** Messages per receive (SQS's maximum). */
const MAX_MESSAGES = 10;
/** The long poll's wait (SQS's maximum). */
export const WAIT_SECONDS = 20;
/**
 * How long a received message stays invisible to other receives: a message whose handling failed,
 * or whose receiver stopped (a restart, a lost Lease), comes back after this long.
 */
export const VISIBILITY_SECONDS = 20;
/** Longer than the long poll: the socket is idle while the server waits for messages. */
const REQUEST_TIMEOUT_MS = (WAIT_SECONDS + 15) * 1000;
const CONNECTION_TIMEOUT_MS = 5_000;

export type SqsSdk = typeof SqsEntry;

/** The commands that change the queue, by the name the fence reports. */
const FENCED_COMMANDS = new Map([
  ['DeleteMessageCommand', 'SQS DeleteMessage'],
  ['ChangeMessageVisibilityCommand', 'SQS ChangeMessageVisibility'],
]);

const SQS_BUNDLE = new URL('../sdk-bundle/sqs-entry.js', import.meta.url).href;
const loadSqsBundle = (): Promise<SqsSdk> => import(SQS_BUNDLE) as Promise<SqsSdk>;

/** The region of an SQS queue URL on AWS (https://sqs.<region>.amazonaws.com/<account>/<name>). */
export function regionOfQueueUrl(url: string): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    return undefined;
  }
  return /^sqs[.-]([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/.exec(host)?.[1];
}

/** Why a queue URL cannot be one, or undefined when it may be. */
export function queueUrlProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `"${url}" is not a URL (expected https://sqs.<region>.amazonaws.com/<account>/<queue>)`;
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return `"${url}": expected an http(s) URL`;
  if (u.pathname.split('/').filter((p) => p !== '').length !== 2)
    return `"${url}": expected the path /<account>/<queue> of an SQS queue URL`;
  return undefined;
}

/** Whether the SDK's variables give SQS an endpoint (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL). */
function endpointConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS ?? '').toLowerCase() === 'true') return false;
  return (env.AWS_ENDPOINT_URL_SQS ?? '') !== '' || (env.AWS_ENDPOINT_URL ?? '') !== '';
}

export interface SqsQueueOptions {
  fence?: WriteFence | undefined;
  /** Replaces the SDK's HTTP handler (tests). */
  requestHandler?: unknown;
  /** Where the SDK comes from (default: the bundle). */
  loadSdk?: () => Promise<SqsSdk>;
}

/** The real queue at `url`; the SDK is loaded by the first call. */
export function sqsInterruptionQueue(url: string, opts: SqsQueueOptions = {}): InterruptionQueue {
  let made: Promise<{ sdk: SqsSdk; client: SQSClient }> | undefined;
  let closed = false;
  const get = (): Promise<{ sdk: SqsSdk; client: SQSClient }> => {
    made ??= (opts.loadSdk ?? loadSqsBundle)()
      .then((sdk) => {
        const region = regionOfQueueUrl(url) ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
        const client = new sdk.SQSClient({
          // An emulator's URL names no region, and the region is then the SDK's (or any).
          region: region ?? 'us-east-1',
          // The SDK sends to the queue URL's host unless told otherwise, even over an endpoint its
          // own variables configure: those must win (a VPC endpoint, a proxy).
          useQueueUrlAsEndpoint: !endpointConfigured(),
          maxAttempts: 3,
          requestHandler: (opts.requestHandler ?? {
            requestTimeout: REQUEST_TIMEOUT_MS,
            connectionTimeout: CONNECTION_TIMEOUT_MS,
          }) as { requestTimeout: number },
        });
        const fence = opts.fence;
        if (fence !== undefined) {
          client.middlewareStack.add(
            (next, context) => (args) => {
              const write = FENCED_COMMANDS.get(context.commandName ?? '');
              if (write !== undefined) fence.check(write);
              return next(args);
            },
            { step: 'deserialize', priority: 'low', name: 'leaderFenceMiddleware' },
          );
        }
        if (closed) client.destroy();
        return { sdk, client };
      })
      .catch((err: unknown) => {
        made = undefined;
        throw err;
      });
    return made;
  };
  return {
    url,
    receive: async (signal) => {
      const { sdk, client } = await get();
      const out = await client.send(
        new sdk.ReceiveMessageCommand({
          QueueUrl: url,
          MaxNumberOfMessages: MAX_MESSAGES,
          WaitTimeSeconds: WAIT_SECONDS,
          VisibilityTimeout: VISIBILITY_SECONDS,
          MessageSystemAttributeNames: ['ApproximateReceiveCount'],
        }),
        { abortSignal: signal },
      );
      return (out.Messages ?? []).map((m) => ({
        messageId: m.MessageId ?? '',
        receiptHandle: m.ReceiptHandle ?? '',
        body: m.Body ?? '',
        receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? '1') || 1,
      }));
    },
    delete: async (receiptHandle, signal) => {
      const { sdk, client } = await get();
      await client.send(new sdk.DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: receiptHandle }), {
        abortSignal: signal,
      });
    },
    changeVisibility: async (receiptHandle, seconds, signal) => {
      const { sdk, client } = await get();
      await client.send(
        new sdk.ChangeMessageVisibilityCommand({
          QueueUrl: url,
          ReceiptHandle: receiptHandle,
          VisibilityTimeout: seconds,
        }),
        { abortSignal: signal },
      );
    },
    close: () => {
      closed = true;
      void made?.then(
        (c) => {
          c.client.destroy();
        },
        () => undefined,
      );
    },
  };
}
