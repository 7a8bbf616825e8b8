// The EC2 calls the driver makes, behind a small interface (tests pass a fake), and the real
// client on @aws-sdk/client-ec2: one per region and credentials, reused across calls.
//
// The endpoint is the SDK's own business: AWS_ENDPOINT_URL_EC2 or AWS_ENDPOINT_URL (or the shared
// config file's endpoint_url) point it at a VPC endpoint, a proxy or an emulator. Throttling and
// transient errors are retried by the SDK with backoff (adaptive mode also slows the client down
// when EC2 throttles it), so they reach the driver only when they persist; RunInstances alone is
// retried by the driver, which must know whether a failed attempt started an instance.

import {
  DescribeImagesCommand,
  DescribeInstancesCommand,
  EC2Client,
  ModifyInstanceAttributeCommand,
  RunInstancesCommand,
  TerminateInstancesCommand,
  type DescribeImagesCommandInput,
  type DescribeImagesCommandOutput,
  type DescribeInstancesCommandInput,
  type DescribeInstancesCommandOutput,
  type ModifyInstanceAttributeCommandInput,
  type RunInstancesCommandInput,
  type RunInstancesCommandOutput,
  type TerminateInstancesCommandInput,
  type TerminateInstancesCommandOutput,
} from '@aws-sdk/client-ec2';
import { fromTokenFile } from '@aws-sdk/credential-provider-web-identity';

import type { AwsCredentials } from './credentials.js';

export interface Ec2Api {
  /** Sent once: never retried by the client itself. */
  runInstances(input: RunInstancesCommandInput, signal?: AbortSignal): Promise<RunInstancesCommandOutput>;
  describeInstances(
    input: DescribeInstancesCommandInput,
    signal?: AbortSignal,
  ): Promise<DescribeInstancesCommandOutput>;
  describeImages(
    input: DescribeImagesCommandInput,
    signal?: AbortSignal,
  ): Promise<DescribeImagesCommandOutput>;
  terminateInstances(
    input: TerminateInstancesCommandInput,
    signal?: AbortSignal,
  ): Promise<TerminateInstancesCommandOutput>;
  modifyInstanceAttribute(input: ModifyInstanceAttributeCommandInput, signal?: AbortSignal): Promise<void>;
  destroy(): void;
}

export type Ec2ApiFactory = (region: string, credentials: AwsCredentials) => Ec2Api;

/** Attempts per call, the first included (the SDK's default is 3). */
const MAX_ATTEMPTS = 5;
/** One HTTP request's limit; the SDK retries a request that timed out. */
const REQUEST_TIMEOUT_MS = 30_000;
const CONNECTION_TIMEOUT_MS = 5_000;

/** The real EC2 client for a region and credentials. */
export const sdkEc2Api: Ec2ApiFactory = (region, credentials) => {
  const config = {
    region,
    credentials:
      credentials.kind === 'static'
        ? { accessKeyId: credentials.accessKeyId, secretAccessKey: credentials.secretAccessKey }
        : fromTokenFile({
            webIdentityTokenFile: credentials.tokenFile,
            roleArn: credentials.roleARN,
            roleSessionName: 'machine-controller-manager',
          }),
    requestHandler: { requestTimeout: REQUEST_TIMEOUT_MS, connectionTimeout: CONNECTION_TIMEOUT_MS },
  };
  const client = new EC2Client({ ...config, maxAttempts: MAX_ATTEMPTS, retryMode: 'adaptive' });
  // RunInstances is not retried by the SDK: after a timeout or a lost answer the driver first
  // looks for the instance the attempt may have started (see AwsDriver.launch).
  const launcher = new EC2Client({ ...config, maxAttempts: 1 });
  const opts = (signal?: AbortSignal): { abortSignal?: AbortSignal } =>
    signal === undefined ? {} : { abortSignal: signal };
  return {
    runInstances: (input, signal) => launcher.send(new RunInstancesCommand(input), opts(signal)),
    describeInstances: (input, signal) => client.send(new DescribeInstancesCommand(input), opts(signal)),
    describeImages: (input, signal) => client.send(new DescribeImagesCommand(input), opts(signal)),
    terminateInstances: (input, signal) => client.send(new TerminateInstancesCommand(input), opts(signal)),
    modifyInstanceAttribute: async (input, signal) => {
      await client.send(new ModifyInstanceAttributeCommand(input), opts(signal));
    },
    destroy: () => {
      client.destroy();
      launcher.destroy();
    },
  };
};
