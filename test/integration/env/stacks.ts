// The two stacks a scenario can be replayed on, each on a control plane of its own: gardener's
// (machine-controller-manager v0.62.1 with its own CRDs, and its provider app with the virtual
// cloud's Go driver, or provider-aws v0.28.0's machine-controller on the EC2 emulator, all
// unchanged real processes) and ours (the manager with every controller, the built-in virtual or
// aws provider). A stack's controllers can be stopped and started again while
// its control plane and its machines stay, so that a scenario can make several writes that no
// controller sees in between (what a fast autoscaler or an operator can do to a busy manager).

import type { ManagerConfig } from '../../../lib/config.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import {
  applyCrdDirectory,
  gardenerAwsMachineControllerPath,
  gardenerCrdDir,
  gardenerMachineControllerManagerPath,
  gardenerMachineControllerPath,
  startGardenerMachineController,
  startGardenerMachineControllerManager,
} from '../../harness/gardener.js';
import { CLUSTER_TAG, provisionCloud, REGION, type Ec2Cloud } from '../../harness/ec2cloud.js';
import { Ec2KubeletSimulator } from '../../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../../harness/ec2proxy.js';
import { startMoto, type Moto } from '../../harness/moto.js';
import type { ManagedProcess } from '../../harness/process.js';
import { readToolVersions } from '../../harness/tools.js';
import { LifecycleEnv, NS } from './lifecycle.js';

export type StackName = 'gardener' | 'ours';

/** The userData Secret every class of a stack names (gardener's machine controller requires one). */
export const USER_DATA_SECRET = 'stack-userdata';

/**
 * The EC2 emulator a stack on AWS runs against, behind the fault proxy (both stacks' EC2 calls go
 * through it); the kubelet simulator registers a Node for each instance that starts.
 */
export interface AwsCloud {
  moto: Moto;
  proxy: Ec2FaultProxy;
  cloud: Ec2Cloud;
  kubelet: Ec2KubeletSimulator;
}

export interface Stack {
  readonly name: StackName;
  /** How the stack is named in results: gardener's release (and provider), or "ours". */
  readonly label: string;
  readonly env: LifecycleEnv;
  /** Set on AWS (StackSettings.cloud). */
  readonly aws: AwsCloud | undefined;
  /** Starts the stack's controllers (again). */
  startControllers(): Promise<void>;
  /** Stops them; the control plane, the machines and the VMs stay. */
  stopControllers(): Promise<void>;
  /** Stops the controllers and the control plane. */
  stop(): Promise<void>;
}

/** Fails at once, naming the build command, when gardener's binaries are not built. */
export function requireGardenerBinaries(): void {
  gardenerMachineControllerManagerPath();
  gardenerMachineControllerPath();
  gardenerCrdDir();
}

/** Settings a scenario gives both stacks alike (each in its own terms). */
export interface StackSettings {
  /** How long a drain waits for a pod's volume to attach to another node. */
  pvReattachTimeoutMs?: number;
  /**
   * The cloud: the virtual one (default; its VMs are Nodes) or AWS on the EC2 emulator (gardener:
   * provider-aws v0.28.0's machine-controller; ours: the built-in aws provider), with kwok.
   */
  cloud?: 'virtual' | 'aws';
}

/** Fails at once, naming the build command, when gardener's AWS provider is not built. */
export function requireGardenerAwsBinary(): void {
  gardenerAwsMachineControllerPath();
}

async function startAwsCloud(env: LifecycleEnv): Promise<AwsCloud> {
  const moto = await startMoto();
  const proxy = new Ec2FaultProxy(moto.endpoint, { resourceNamesIn: REGION });
  try {
    await proxy.start();
    const cloud = await provisionCloud(moto.endpoint);
    const kubelet = new Ec2KubeletSimulator({
      endpoint: proxy.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
      // A real instance boots for a while before its kubelet registers; gardener's controller
      // takes a Node that exists before its CreateMachine call returned for a stale one.
      bootDelayMs: 2_000,
    });
    kubelet.watch(proxy);
    kubelet.start();
    return { moto, proxy, cloud, kubelet };
  } catch (err) {
    await proxy.stop();
    await moto.stop();
    throw err;
  }
}

async function stopAwsCloud(aws: AwsCloud | undefined): Promise<void> {
  if (aws === undefined) return;
  await aws.kubelet.stop();
  aws.cloud.ec2.destroy();
  aws.cloud.iam.destroy();
  await aws.proxy.stop();
  await aws.moto.stop();
}

/**
 * Starts a stack on a fresh control plane with its controllers running: kube-apiserver and etcd
 * only on the virtual cloud (its VMs are its Nodes, and nothing else writes them); on AWS also
 * kwok, the EC2 emulator behind the fault proxy, and the kubelet simulator.
 */
export async function startStack(name: StackName, settings: StackSettings = {}): Promise<Stack> {
  const onAws = settings.cloud === 'aws';
  const env = await LifecycleEnv.start({ installCRDs: name === 'ours', kwok: onAws });
  let aws: AwsCloud | undefined;
  try {
    if (onAws) aws = await startAwsCloud(env);
    if (name === 'gardener') await applyCrdDirectory(env.cp, gardenerCrdDir());
    await env.client.create(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: USER_DATA_SECRET, namespace: NS },
      data: { userData: Buffer.from('#!/bin/bash\n# join as <<MACHINE_NAME>>\n').toString('base64') },
    });
  } catch (err) {
    await stopAwsCloud(aws);
    await env.stop();
    throw err;
  }
  const reattach = settings.pvReattachTimeoutMs;
  const stack =
    name === 'gardener'
      ? new GardenerStack(
          env,
          reattach === undefined ? [] : [`--machine-pv-reattach-timeout=${reattach}ms`],
          aws,
        )
      : new OurStack(env, reattach === undefined ? {} : { machinePvReattachTimeoutMs: reattach }, aws);
  try {
    await stack.startControllers();
  } catch (err) {
    await stack.stop();
    throw err;
  }
  return stack;
}

class OurStack implements Stack {
  readonly name = 'ours';
  readonly label = 'ours';

  constructor(
    readonly env: LifecycleEnv,
    private readonly config: Partial<ManagerConfig>,
    readonly aws: AwsCloud | undefined,
  ) {}

  async startControllers(): Promise<void> {
    if (this.aws === undefined) {
      await this.env.startManager(this.config);
      return;
    }
    // The built-in aws provider takes its endpoint from the AWS SDK's standard variable, as in a
    // cluster; its EC2 clients read it when they are made, so it stays set until stop().
    this.savedEndpoint ??= { value: process.env.AWS_ENDPOINT_URL_EC2 };
    process.env.AWS_ENDPOINT_URL_EC2 = this.aws.proxy.endpoint;
    await this.env.startManager(this.config);
  }

  private savedEndpoint: { value: string | undefined } | undefined;

  async stopControllers(): Promise<void> {
    await this.env.stopManager();
  }

  async stop(): Promise<void> {
    await this.env.stop();
    await stopAwsCloud(this.aws);
    if (this.savedEndpoint !== undefined) {
      const { value } = this.savedEndpoint;
      if (value === undefined) Reflect.deleteProperty(process.env, 'AWS_ENDPOINT_URL_EC2');
      else process.env.AWS_ENDPOINT_URL_EC2 = value;
      this.savedEndpoint = undefined;
    }
  }
}

class GardenerStack implements Stack {
  readonly name = 'gardener';
  readonly label: string = `gardener MCM ${readToolVersions().MCM_ANCHOR_VERSION}`;
  private procs: ManagedProcess[] = [];

  constructor(
    readonly env: LifecycleEnv,
    private readonly machineControllerArgs: string[],
    readonly aws: AwsCloud | undefined,
  ) {
    if (aws !== undefined)
      this.label = `${this.label} with provider-aws ${readToolVersions().MCM_AWS_ANCHOR_VERSION}`;
  }

  async startControllers(): Promise<void> {
    this.procs.push(
      await startGardenerMachineControllerManager(this.env.cp, NS, [
        '--machine-safety-overshooting-period=5s',
      ]),
    );
    this.procs.push(
      await startGardenerMachineController(
        this.env.cp,
        NS,
        this.machineControllerArgs,
        this.aws === undefined
          ? {}
          : {
              command: gardenerAwsMachineControllerPath(),
              env: { ...process.env, AWS_ENDPOINT_URL_EC2: this.aws.proxy.endpoint },
            },
      ),
    );
  }

  async stopControllers(): Promise<void> {
    const procs = this.procs;
    this.procs = [];
    await Promise.all(procs.map((p) => p.stop(5_000)));
  }

  async stop(): Promise<void> {
    await this.stopControllers();
    await this.env.stop();
    await stopAwsCloud(this.aws);
  }
}
