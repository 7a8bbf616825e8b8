import type { Registry } from 'prom-client';

import type { Machine, MachineClass, MachineDeployment, MachineSet } from '../api/types.js';
import type { KubeApi } from '../kube/client.js';
import type { Clock } from '../kube/clock.js';
import type { DeepReadonly, Informer, Lister } from '../kube/informer.js';
import type { Node } from '../kube/types.js';
import type { WriteFence } from '../kube/fence.js';
import type { Logger } from '../observability/logger.js';
import type { Driver } from './driver.js';
import { fenceDriver } from './fence.js';
import type { VmNoticeSink } from './notices.js';
import { instrumentDriver } from './metrics.js';

/** The manager's caches of the control namespace's machine objects, shared and read only. */
export interface ControlCaches {
  machines: Lister<Machine>;
  machineSets: Lister<MachineSet>;
  machineDeployments: Lister<MachineDeployment>;
  machineClasses: Lister<MachineClass>;
}

/** What a provider may use of the manager: clients, the caches, time, logs, metrics. */
export interface ProviderContext {
  /** Control cluster (machine objects), for providers that keep state there. */
  control: KubeApi;
  /** Target cluster, undefined when running without one (--target-kubeconfig=none). */
  target: KubeApi | undefined;
  /** The control namespace the manager serves. */
  namespace: string;
  /** The manager's cache of target-cluster Nodes (shared, read only); undefined without target. */
  nodes: Informer<Node> | undefined;
  /**
   * The manager's caches of machines, sets, deployments and classes (synced before start() is
   * called); undefined where the provider runs without them (tests).
   */
  informers?: ControlCaches | undefined;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /**
   * Closed unless this process holds the leader Lease (undefined without leader election). The
   * registry guards every mutating driver call with it; providers that write elsewhere check it too.
   */
  fence?: WriteFence | undefined;
  /**
   * Where notices about VMs go (interruptions, stops the manager did not ask for): the manager
   * records them on the machines. Undefined where nothing takes them (tests).
   */
  notices?: VmNoticeSink | undefined;
}

/** A VM as its provider's own inventory records it: enough to find its machine and delete it. */
export interface InventoryVm {
  providerID: string;
  machineNamespace: string;
  machineName: string;
  /** The MachineClass it was created from (which may no longer exist). */
  machineClass: string;
}

/**
 * What the autoscaler's price expander asks a provider: the price of one node of a class. It is
 * answered from the provider's own tables and caches, synchronously (never a cloud call on the
 * autoscaler's path; a provider refreshes what it needs in start()).
 */
export interface NodePriceRequest {
  /** The class of the node's machine (or of the group's template, for a node yet to be created). */
  machineClass: DeepReadonly<MachineClass>;
  /**
   * The node's labels as the autoscaler sent them: instance type, region, zone
   * (node.kubernetes.io/instance-type, topology.kubernetes.io/region and /zone) and the rest.
   */
  labels: Readonly<Record<string, string>>;
}

/**
 * A node's price per hour, in the currency the provider prices in (one currency per cluster
 * matters: the expander compares prices with each other), with where it came from; or why
 * there is none. Never a made-up number: an unpriced node is `unknown`.
 */
export type NodePriceAnswer =
  { pricePerHour: number; currency: string; source: string } | { unknown: string };

/** A running provider: its driver plus an optional background lifecycle. */
export interface Provider {
  readonly driver: Driver;
  /**
   * The price of a node of the class (an addition to MCM's driver calls, optional, part of
   * provider API version 1 since it is optional): for cluster-autoscaler's price expander.
   * Synchronous and from memory only; a provider without prices leaves it out.
   */
  nodePrice?(req: NodePriceRequest): NodePriceAnswer;
  /**
   * Every VM of the provider, whatever its class (an addition to MCM's driver calls, optional):
   * lets the orphan collection find VMs whose class is gone, which ListMachines cannot list.
   */
  listAllMachines?(signal?: AbortSignal): Promise<InventoryVm[]>;
  /** Starts background work (the manager calls it once the caches are synced). */
  start?(): void;
  stop?(): Promise<void>;
}

export type ProviderFactory = (ctx: ProviderContext) => Provider;

/**
 * Providers by `MachineClass.provider` name. Factories are registered at start-up; the manager
 * instantiates each once, and drivers handed out are wrapped with call metrics.
 */
export class ProviderRegistry {
  private readonly factories = new Map<string, ProviderFactory>();
  private readonly prefixes = new Map<string, string>();
  private readonly providers = new Map<string, { provider: Provider; driver: Driver }>();

  /**
   * Registers a provider. providerIDPrefix (e.g. "virtual://") lets a VM be deleted through its
   * providerID alone when the machine's class is gone.
   */
  register(name: string, factory: ProviderFactory, opts: { providerIDPrefix?: string } = {}): this {
    if (this.factories.has(name)) throw new Error(`provider ${name} is registered twice`);
    this.factories.set(name, factory);
    if (opts.providerIDPrefix !== undefined) this.prefixes.set(opts.providerIDPrefix, name);
    return this;
  }

  /** The provider whose VMs have providerIDs like this one. */
  providerOfID(providerID: string): string | undefined {
    for (const [prefix, name] of this.prefixes) if (providerID.startsWith(prefix)) return name;
    return undefined;
  }

  names(): string[] {
    return [...this.factories.keys()].sort();
  }

  /** Instantiates every registered provider. */
  instantiate(ctx: ProviderContext): void {
    for (const [name, factory] of this.factories) {
      if (this.providers.has(name)) continue;
      const provider = factory(ctx);
      const driver =
        ctx.fence === undefined ? provider.driver : fenceDriver(name, provider.driver, ctx.fence);
      this.providers.set(name, { provider, driver: instrumentDriver(name, driver, ctx.registry) });
    }
  }

  /** The providers that can list all their VMs without a class, by name. */
  inventories(): { provider: string; listAllMachines: (signal?: AbortSignal) => Promise<InventoryVm[]> }[] {
    const out: { provider: string; listAllMachines: (signal?: AbortSignal) => Promise<InventoryVm[]> }[] = [];
    for (const [name, { provider }] of [...this.providers].sort(([a], [b]) => a.localeCompare(b))) {
      const list = provider.listAllMachines?.bind(provider);
      if (list !== undefined) out.push({ provider: name, listAllMachines: list });
    }
    return out;
  }

  /** A node's price from its class's provider; unknown when the provider prices nothing. */
  nodePrice(name: string, req: NodePriceRequest): NodePriceAnswer {
    const entry = this.providers.get(name);
    if (entry === undefined) return { unknown: `provider ${name} is not registered` };
    const price = entry.provider.nodePrice?.(req);
    return price ?? { unknown: `provider ${name} has no prices` };
  }

  /** The driver for a class's provider, or undefined when no such provider is registered. */
  driverFor(name: string): Driver | undefined {
    return this.providers.get(name)?.driver;
  }

  start(): void {
    for (const { provider } of this.providers.values()) provider.start?.();
  }

  async stop(): Promise<void> {
    await Promise.all(
      [...this.providers.values()].map(({ provider }) => provider.stop?.() ?? Promise.resolve()),
    );
  }
}
