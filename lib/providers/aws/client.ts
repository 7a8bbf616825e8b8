// The EC2 calls the driver makes, behind a small interface (tests pass a fake), and the real
// client on @aws-sdk/client-ec2: one per region and credentials, reused across calls. The SDK comes
// from the bundle `npm run build` makes of sdk-entry.ts (the EC2 client and the commands the
// provider sends, nothing else of the SDK), loaded by the first EC2 call.
//
// Every EC2 write is fenced per attempt: a middleware at the last step before a request is handed
// to the HTTP handler checks the leader fence, so a write that follows an awaited read, or an SDK
// retry after a pause, never leaves a process that lost the Lease (the fence's abort signal alone
// would not do: it is set by a timer, which a stalled process runs only after the read's answer).
//
// The endpoint is the SDK's own business: AWS_ENDPOINT_URL_EC2 or AWS_ENDPOINT_URL (or the shared
// config file's endpoint_url) point it at a VPC endpoint, a proxy or an emulator. Throttling and
// transient errors are retried by the SDK with backoff (adaptive mode also slows the client down
// when EC2 throttles it), so they reach the driver only when they persist; RunInstances alone is
// retried by the driver, which must know whether a failed attempt started an instance.

import type {
  AssignIpv6AddressesCommandInput,
  DescribeImagesCommandInput,
  DescribeImagesCommandOutput,
  DescribeInstanceStatusCommandInput,
  DescribeInstanceStatusCommandOutput,
  DescribeInstancesCommandInput,
  DescribeInstancesCommandOutput,
  DescribeSpotPriceHistoryCommandInput,
  DescribeSpotPriceHistoryCommandOutput,
  EC2Client,
  ModifyInstanceAttributeCommandInput,
  ModifyNetworkInterfaceAttributeCommandInput,
  RunInstancesCommandInput,
  RunInstancesCommandOutput,
  TerminateInstancesCommandInput,
  TerminateInstancesCommandOutput,
} from '@aws-sdk/client-ec2';

import type { WriteFence } from '../../kube/fence.js';
import type { AwsCredentials } from './credentials.js';
import type * as SdkEntry from './sdk-entry.js';

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
  modifyNetworkInterfaceAttribute(
    input: ModifyNetworkInterfaceAttributeCommandInput,
    signal?: AbortSignal,
  ): Promise<void>;
  assignIpv6Addresses(input: AssignIpv6AddressesCommandInput, signal?: AbortSignal): Promise<void>;
  /** Spot prices (prices/spot.ts, in the background). */
  describeSpotPriceHistory(
    input: DescribeSpotPriceHistoryCommandInput,
    signal?: AbortSignal,
  ): Promise<DescribeSpotPriceHistoryCommandOutput>;
  /** Instance status checks (health/, in the background). */
  describeInstanceStatus(
    input: DescribeInstanceStatusCommandInput,
    signal?: AbortSignal,
  ): Promise<DescribeInstanceStatusCommandOutput>;
  destroy(): void;
}

/**
 * Creates the EC2 client of a region and credentials. `fence`, when given, is checked before every
 * attempt of every call that changes something (anything but Describe*, Get*, List*).
 */
export type Ec2ApiFactory = (region: string, credentials: AwsCredentials, fence?: WriteFence) => Ec2Api;

/** Whether an EC2 action only reads (the rest are writes, fenced). */
export function isReadAction(action: string): boolean {
  return /^(Describe|Get|List)/.test(action);
}

/** Attempts per call, the first included (the SDK's default is 3). */
const MAX_ATTEMPTS = 5;
/** One HTTP request's limit; the SDK retries a request that timed out. */
const REQUEST_TIMEOUT_MS = 30_000;
const CONNECTION_TIMEOUT_MS = 5_000;

/** What the bundle exports: sdk-entry.ts, the part of the SDK the provider runs. */
export type Ec2Sdk = typeof SdkEntry;

/** The bundle of sdk-entry.ts (hack/bundle-aws-sdk.mjs), beside this module in dist/. */
const SDK_BUNDLE = new URL('./sdk-bundle/sdk-entry.js', import.meta.url).href;

/**
 * The bundled EC2 SDK. @aws-sdk/client-ec2's own module holds every EC2 command and shape: after
 * the provider's calls a process was 44 MiB larger with it, 12 MiB with the bundle (`npm run bench
 * sdk-memory`). A manager without an AWS class loads neither.
 */
const loadSdkBundle = (): Promise<Ec2Sdk> => import(SDK_BUNDLE) as Promise<Ec2Sdk>;

interface SdkClients {
  sdk: Ec2Sdk;
  /** Every call but RunInstances: retried by the SDK. */
  client: EC2Client;
  /** RunInstances only: one attempt per call. */
  launcher: EC2Client;
}

/** Options of the SDK clients. */
export interface SdkEc2Options {
  /** Replaces the SDK's HTTP handler (an object with `handle(request)`, as the SDK's own): tests. */
  requestHandler?: unknown;
  /** Where the SDK comes from (default: the bundle; the SDK memory benchmark passes the packages). */
  loadSdk?: () => Promise<Ec2Sdk>;
}

function sdkClients(
  sdk: Ec2Sdk,
  region: string,
  credentials: AwsCredentials,
  fence: WriteFence | undefined,
  opts: SdkEc2Options,
): SdkClients {
  const config = {
    region,
    credentials:
      credentials.kind === 'static'
        ? { accessKeyId: credentials.accessKeyId, secretAccessKey: credentials.secretAccessKey }
        : sdk.fromTokenFile({
            webIdentityTokenFile: credentials.tokenFile,
            roleArn: credentials.roleARN,
            roleSessionName: 'machine-controller-manager',
          }),
    requestHandler: (opts.requestHandler ?? {
      requestTimeout: REQUEST_TIMEOUT_MS,
      connectionTimeout: CONNECTION_TIMEOUT_MS,
    }) as { requestTimeout: number },
  };
  const clients = {
    sdk,
    client: new sdk.EC2Client({ ...config, maxAttempts: MAX_ATTEMPTS, retryMode: 'adaptive' }),
    // RunInstances is not retried by the SDK: after a timeout or a lost answer the driver first
    // looks for the instance the attempt may have started (see AwsDriver.launch).
    launcher: new sdk.EC2Client({ ...config, maxAttempts: 1 }),
  };
  if (fence !== undefined) {
    for (const c of [clients.client, clients.launcher]) {
      // The innermost middleware (deserialize step, low priority): it runs once per attempt,
      // after signing, right before the request is handed to the HTTP handler.
      c.middlewareStack.add(
        (next, context) => (args) => {
          const action = context.commandName?.replace(/Command$/, '') ?? '';
          if (!isReadAction(action)) fence.check(`EC2 ${action}`);
          return next(args);
        },
        { step: 'deserialize', priority: 'low', name: 'leaderFenceMiddleware' },
      );
    }
  }
  return clients;
}

/**
 * The real EC2 clients, on the SDK `opts.loadSdk` gives (the bundle by default), loaded by the
 * first call of any of them; a failed load is not kept.
 */
export function sdkEc2ApiWith(opts: SdkEc2Options = {}): Ec2ApiFactory {
  const loadSdk = opts.loadSdk ?? loadSdkBundle;
  let sdkLoad: Promise<Ec2Sdk> | undefined;
  const load = (): Promise<Ec2Sdk> => {
    sdkLoad ??= loadSdk().catch((err: unknown) => {
      sdkLoad = undefined;
      throw err;
    });
    return sdkLoad;
  };
  return (region, credentials, fence) => {
    let clients: Promise<SdkClients> | undefined;
    let destroyed = false;
    const get = (): Promise<SdkClients> => {
      clients ??= load()
        .then((sdk) => {
          const made = sdkClients(sdk, region, credentials, fence, opts);
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
    const send = (signal?: AbortSignal): { abortSignal?: AbortSignal } =>
      signal === undefined ? {} : { abortSignal: signal };
    return {
      runInstances: async (input, signal) => {
        const { sdk, launcher } = await get();
        return launcher.send(new sdk.RunInstancesCommand(input), send(signal));
      },
      describeInstances: async (input, signal) => {
        const { sdk, client } = await get();
        return client.send(new sdk.DescribeInstancesCommand(input), send(signal));
      },
      describeImages: async (input, signal) => {
        const { sdk, client } = await get();
        return client.send(new sdk.DescribeImagesCommand(input), send(signal));
      },
      terminateInstances: async (input, signal) => {
        const { sdk, client } = await get();
        return client.send(new sdk.TerminateInstancesCommand(input), send(signal));
      },
      modifyInstanceAttribute: async (input, signal) => {
        const { sdk, client } = await get();
        await client.send(new sdk.ModifyInstanceAttributeCommand(input), send(signal));
      },
      modifyNetworkInterfaceAttribute: async (input, signal) => {
        const { sdk, client } = await get();
        await client.send(new sdk.ModifyNetworkInterfaceAttributeCommand(input), send(signal));
      },
      assignIpv6Addresses: async (input, signal) => {
        const { sdk, client } = await get();
        await client.send(new sdk.AssignIpv6AddressesCommand(input), send(signal));
      },
      describeSpotPriceHistory: async (input, signal) => {
        const { sdk, client } = await get();
        return client.send(new sdk.DescribeSpotPriceHistoryCommand(input), send(signal));
      },
      describeInstanceStatus: async (input, signal) => {
        const { sdk, client } = await get();
        return client.send(new sdk.DescribeInstanceStatusCommand(input), send(signal));
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
}

/** The real EC2 client for a region and credentials; the bundled SDK is loaded by the first call. */
export const sdkEc2Api: Ec2ApiFactory = sdkEc2ApiWith();
