// The EC2 calls the driver makes, behind a small interface (tests pass a fake), and the real
// client on @aws-sdk/client-ec2: one per region and credentials, reused across calls.
//
// The endpoint is the SDK's own business: AWS_ENDPOINT_URL_EC2 or AWS_ENDPOINT_URL (or the shared
// config file's endpoint_url) point it at a VPC endpoint, a proxy or an emulator. Throttling and
// transient errors are retried by the SDK with backoff (adaptive mode also slows the client down
// when EC2 throttles it), so they reach the driver only when they persist; RunInstances alone is
// retried by the driver, which must know whether a failed attempt started an instance.

import type {
  DescribeImagesCommandInput,
  DescribeImagesCommandOutput,
  DescribeInstancesCommandInput,
  DescribeInstancesCommandOutput,
  EC2Client,
  ModifyInstanceAttributeCommandInput,
  RunInstancesCommandInput,
  RunInstancesCommandOutput,
  TerminateInstancesCommandInput,
  TerminateInstancesCommandOutput,
} from '@aws-sdk/client-ec2';
import type * as Ec2Module from '@aws-sdk/client-ec2';
import type * as WebIdentityModule from '@aws-sdk/credential-provider-web-identity';

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

type Ec2Sdk = typeof Ec2Module;
type WebIdentity = typeof WebIdentityModule;

let sdkLoad: Promise<[Ec2Sdk, WebIdentity]> | undefined;

/**
 * The EC2 SDK, loaded on the first EC2 call: its module graph costs about 80 MiB of resident
 * memory, which a manager without an AWS class never needs. A failed load is not kept.
 */
function loadSdk(): Promise<[Ec2Sdk, WebIdentity]> {
  sdkLoad ??= Promise.all([
    import('@aws-sdk/client-ec2'),
    import('@aws-sdk/credential-provider-web-identity'),
  ]).catch((err: unknown) => {
    sdkLoad = undefined;
    throw err;
  });
  return sdkLoad;
}

interface SdkClients {
  sdk: Ec2Sdk;
  /** Every call but RunInstances: retried by the SDK. */
  client: EC2Client;
  /** RunInstances only: one attempt per call. */
  launcher: EC2Client;
}

function sdkClients(
  [sdk, webIdentity]: [Ec2Sdk, WebIdentity],
  region: string,
  credentials: AwsCredentials,
): SdkClients {
  const config = {
    region,
    credentials:
      credentials.kind === 'static'
        ? { accessKeyId: credentials.accessKeyId, secretAccessKey: credentials.secretAccessKey }
        : webIdentity.fromTokenFile({
            webIdentityTokenFile: credentials.tokenFile,
            roleArn: credentials.roleARN,
            roleSessionName: 'machine-controller-manager',
          }),
    requestHandler: { requestTimeout: REQUEST_TIMEOUT_MS, connectionTimeout: CONNECTION_TIMEOUT_MS },
  };
  return {
    sdk,
    client: new sdk.EC2Client({ ...config, maxAttempts: MAX_ATTEMPTS, retryMode: 'adaptive' }),
    // RunInstances is not retried by the SDK: after a timeout or a lost answer the driver first
    // looks for the instance the attempt may have started (see AwsDriver.launch).
    launcher: new sdk.EC2Client({ ...config, maxAttempts: 1 }),
  };
}

/** The real EC2 client for a region and credentials; the SDK is loaded by its first call. */
export const sdkEc2Api: Ec2ApiFactory = (region, credentials) => {
  let clients: Promise<SdkClients> | undefined;
  let destroyed = false;
  const get = (): Promise<SdkClients> => {
    clients ??= loadSdk()
      .then((modules) => {
        const made = sdkClients(modules, region, credentials);
        if (destroyed) {
          made.client.destroy();
          made.launcher.destroy();
        }
        return made;
      })
      .catch((err: unknown) => {
        clients = undefined;
        throw err;
      });
    return clients;
  };
  const opts = (signal?: AbortSignal): { abortSignal?: AbortSignal } =>
    signal === undefined ? {} : { abortSignal: signal };
  return {
    runInstances: async (input, signal) => {
      const { sdk, launcher } = await get();
      return launcher.send(new sdk.RunInstancesCommand(input), opts(signal));
    },
    describeInstances: async (input, signal) => {
      const { sdk, client } = await get();
      return client.send(new sdk.DescribeInstancesCommand(input), opts(signal));
    },
    describeImages: async (input, signal) => {
      const { sdk, client } = await get();
      return client.send(new sdk.DescribeImagesCommand(input), opts(signal));
    },
    terminateInstances: async (input, signal) => {
      const { sdk, client } = await get();
      return client.send(new sdk.TerminateInstancesCommand(input), opts(signal));
    },
    modifyInstanceAttribute: async (input, signal) => {
      const { sdk, client } = await get();
      await client.send(new sdk.ModifyInstanceAttributeCommand(input), opts(signal));
    },
    destroy: () => {
      destroyed = true;
      void clients?.then(
        (c) => {
          c.client.destroy();
          c.launcher.destroy();
        },
        () => undefined,
      );
    },
  };
};
