// The two stacks a scenario can be replayed on, each on a control plane of its own: gardener's
// (machine-controller-manager v0.62.1 with its own CRDs, and its provider app with the virtual
// cloud's Go driver, both unchanged real processes) and ours (the manager with every controller,
// the built-in virtual provider). A stack's controllers can be stopped and started again while
// its control plane and its machines stay, so that a scenario can make several writes that no
// controller sees in between (what a fast autoscaler or an operator can do to a busy manager).

import type { ManagerConfig } from '../../../lib/config.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import {
  applyCrdDirectory,
  gardenerCrdDir,
  gardenerMachineControllerManagerPath,
  gardenerMachineControllerPath,
  startGardenerMachineController,
  startGardenerMachineControllerManager,
} from '../../harness/gardener.js';
import type { ManagedProcess } from '../../harness/process.js';
import { readToolVersions } from '../../harness/tools.js';
import { LifecycleEnv, NS } from './lifecycle.js';

export type StackName = 'gardener' | 'ours';

/** The userData Secret every class of a stack names (gardener's machine controller requires one). */
export const USER_DATA_SECRET = 'stack-userdata';

export interface Stack {
  readonly name: StackName;
  /** How the stack is named in results: gardener's release, or "ours". */
  readonly label: string;
  readonly env: LifecycleEnv;
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
}

/**
 * Starts a stack on a fresh control plane (kube-apiserver and etcd only: the virtual cloud's VMs
 * are its Nodes, and nothing else writes them) with its controllers running.
 */
export async function startStack(name: StackName, settings: StackSettings = {}): Promise<Stack> {
  const env = await LifecycleEnv.start({ installCRDs: name === 'ours' });
  try {
    if (name === 'gardener') await applyCrdDirectory(env.cp, gardenerCrdDir());
    await env.client.create(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: USER_DATA_SECRET, namespace: NS },
      data: { userData: Buffer.from('#!/bin/bash\n# join as <<MACHINE_NAME>>\n').toString('base64') },
    });
  } catch (err) {
    await env.stop();
    throw err;
  }
  const reattach = settings.pvReattachTimeoutMs;
  const stack =
    name === 'gardener'
      ? new GardenerStack(env, reattach === undefined ? [] : [`--machine-pv-reattach-timeout=${reattach}ms`])
      : new OurStack(env, reattach === undefined ? {} : { machinePvReattachTimeoutMs: reattach });
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
  ) {}

  async startControllers(): Promise<void> {
    await this.env.startManager(this.config);
  }

  async stopControllers(): Promise<void> {
    await this.env.stopManager();
  }

  async stop(): Promise<void> {
    await this.env.stop();
  }
}

class GardenerStack implements Stack {
  readonly name = 'gardener';
  readonly label = `gardener MCM ${readToolVersions().MCM_ANCHOR_VERSION}`;
  private procs: ManagedProcess[] = [];

  constructor(
    readonly env: LifecycleEnv,
    private readonly machineControllerArgs: string[],
  ) {}

  async startControllers(): Promise<void> {
    this.procs.push(
      await startGardenerMachineControllerManager(this.env.cp, NS, [
        '--machine-safety-overshooting-period=5s',
      ]),
    );
    this.procs.push(await startGardenerMachineController(this.env.cp, NS, this.machineControllerArgs));
  }

  async stopControllers(): Promise<void> {
    const procs = this.procs;
    this.procs = [];
    await Promise.all(procs.map((p) => p.stop(5_000)));
  }

  async stop(): Promise<void> {
    await this.stopControllers();
    await this.env.stop();
  }
}
