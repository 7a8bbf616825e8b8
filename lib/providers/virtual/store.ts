// Where the virtual cloud keeps its VMs. With a target cluster a VM is its Node; without one
// (--target-kubeconfig=none) it is a ConfigMap in the control namespace. Either way one small
// object per VM, read from a watch-fed cache, written with create/delete only, so that creation
// is idempotent per machine (the apiserver refuses a second object of the same name).

import { createHash } from 'node:crypto';

import { MachineError } from '../../driver/codes.js';
import type { KubeApi } from '../../kube/client.js';
import { isAlreadyExists, isNotFound, errorMessage } from '../../kube/errors.js';
import { Informer, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { ConfigMap, Node, NodeAddress } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { VirtualKey, WellKnownLabel, addressesOf, buildVmNode, providerIDOf, type NewVm } from './vm.js';

/** One VM, whatever object stores it. */
export interface VmRecord {
  name: string;
  providerID: string;
  zone: string;
  /** `<namespace>/<name>` of its machine. */
  machine: string;
  machineClass: string;
  /** Termination requested: the VM no longer counts as existing. */
  terminating: boolean;
  /** The UID of the object that stores it ('' when unknown). */
  uid: string;
  bootNeverCompletes: boolean;
  addresses: NodeAddress[];
}

export interface VmStore {
  /** The VM of that name, from the cache. */
  get(name: string): VmRecord | undefined;
  /** The VM of that name: from the cache, else read live (for deletions, where a lagging cache must not leak a VM). */
  getFresh(name: string, signal?: AbortSignal): Promise<VmRecord | undefined>;
  /** Every VM in the cache. */
  list(): VmRecord[];
  /** VMs in a zone that are not terminating. */
  countInZone(zone: string): number;
  /** Creates the VM; when it already exists for the same machine, returns it (idempotent). */
  create(vm: NewVm, now: number, signal?: AbortSignal): Promise<VmRecord>;
  /** Terminates the VM; false when it was already gone. */
  delete(vm: VmRecord, signal?: AbortSignal): Promise<boolean>;
  start(): void;
  waitForSync(signal?: AbortSignal): Promise<void>;
  stop(): Promise<void>;
}

const ZONE_INDEX = 'virtual-vm-zone';

/**
 * The VMs this process deleted that its cache still shows (by VM name: the UID of the deleted
 * object), so that a VM reads as terminating from the moment its deletion was answered, not only
 * once the watch delivers it: ListMachines and GetMachineStatus right after DeleteMachine see
 * their own deletion. An entry goes when the cache drops that object or holds another one.
 */
class Deleted {
  private readonly uids = new Map<string, string>();

  add(name: string, uid: string): void {
    if (uid !== '') this.uids.set(name, uid);
  }

  /** Whether the object of that VM name and UID is one this process deleted. */
  has(name: string | undefined, uid: string | undefined): boolean {
    return uid !== undefined && uid !== '' && this.uids.get(name ?? '') === uid;
  }

  /** The record, marked terminating when it is an object this process deleted. */
  apply(rec: VmRecord): VmRecord {
    return !rec.terminating && this.has(rec.name, rec.uid) ? { ...rec, terminating: true } : rec;
  }

  /** The cache no longer holds the VM's object. */
  forget(name: string, uid: string): void {
    if (this.uids.get(name) === uid) this.uids.delete(name);
  }

  /** The cache holds another object under that name (a relist replaced the deleted one). */
  replaced(name: string, uid: string): void {
    const deleted = this.uids.get(name);
    if (deleted !== undefined && deleted !== uid) this.uids.delete(name);
  }
}

function cloudError(op: string, err: unknown): MachineError {
  return new MachineError('Unavailable', `virtual cloud: ${op}: ${errorMessage(err)}`, { cause: err });
}

// ---------------------------------------------------------------------------------------------
// Nodes (with a target cluster)
// ---------------------------------------------------------------------------------------------

export function isVmNode(node: DeepReadonly<Node> | Node): boolean {
  return node.metadata.labels?.[VirtualKey.Vm] === 'true';
}

export function vmRecordOfNode(node: DeepReadonly<Node> | Node): VmRecord {
  const a = node.metadata.annotations ?? {};
  const name = node.metadata.name ?? '';
  return {
    name,
    providerID: node.spec?.providerID ?? '',
    zone: node.metadata.labels?.[WellKnownLabel.Zone] ?? '',
    machine: a[VirtualKey.Machine] ?? '',
    machineClass: a[VirtualKey.MachineClass] ?? '',
    terminating: node.metadata.deletionTimestamp !== undefined,
    uid: node.metadata.uid ?? '',
    bootNeverCompletes: a[VirtualKey.BootNeverCompletes] === 'true',
    addresses: (node.status?.addresses ?? []).map((x) => ({ ...x })),
  };
}

export class NodeVmStore implements VmStore {
  private readonly deleted = new Deleted();

  constructor(
    private readonly client: KubeApi,
    private readonly nodes: Informer<Node>,
  ) {
    nodes.addIndexer(ZONE_INDEX, (n) => {
      const zone = n.metadata.labels?.[WellKnownLabel.Zone];
      return isVmNode(n) && zone !== undefined ? [zone] : [];
    });
    nodes.addHandler({
      onUpdate: (_old, n) => {
        this.deleted.replaced(n.metadata.name ?? '', n.metadata.uid ?? '');
      },
      onDelete: (n) => {
        this.deleted.forget(n.metadata.name ?? '', n.metadata.uid ?? '');
      },
    });
  }

  get(name: string): VmRecord | undefined {
    const n = this.nodes.get(undefined, name);
    return n !== undefined && isVmNode(n) ? this.deleted.apply(vmRecordOfNode(n)) : undefined;
  }

  async getFresh(name: string, signal?: AbortSignal): Promise<VmRecord | undefined> {
    const cached = this.get(name);
    if (cached !== undefined) return cached;
    try {
      const n = await this.client.get<Node>(CoreResources.nodes, name, undefined, signal);
      return isVmNode(n) ? vmRecordOfNode(n) : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw cloudError(`read VM ${name}`, err);
    }
  }

  list(): VmRecord[] {
    return this.nodes
      .list()
      .filter((n) => isVmNode(n))
      .map((n) => this.deleted.apply(vmRecordOfNode(n)));
  }

  countInZone(zone: string): number {
    return this.nodes
      .byIndex(ZONE_INDEX, zone)
      .filter(
        (n) =>
          n.metadata.deletionTimestamp === undefined && !this.deleted.has(n.metadata.name, n.metadata.uid),
      ).length;
  }

  async create(vm: NewVm, now: number, signal?: AbortSignal): Promise<VmRecord> {
    try {
      const created = await this.client.create<Node>(CoreResources.nodes, buildVmNode(vm, now), {
        ...(signal === undefined ? {} : { signal }),
      });
      return vmRecordOfNode(created);
    } catch (err) {
      if (!isAlreadyExists(err)) throw cloudError(`create VM ${vm.name}`, err);
    }
    // A VM of that name exists: ours if it was made for the same machine (a repeated call).
    let existing: Node;
    try {
      existing = await this.client.get<Node>(CoreResources.nodes, vm.name, undefined, signal);
    } catch (err) {
      throw cloudError(`read VM ${vm.name}`, err);
    }
    const rec = vmRecordOfNode(existing);
    if (rec.terminating && rec.machine === vm.machine) {
      throw new MachineError('Unavailable', `the previous VM ${vm.name} is still shutting down`);
    }
    if (!isVmNode(existing) || rec.machine !== vm.machine) {
      throw new MachineError(
        'AlreadyExists',
        `a node named ${vm.name} already exists and is not the virtual VM of machine ${vm.machine}`,
      );
    }
    return rec;
  }

  async delete(vm: VmRecord, signal?: AbortSignal): Promise<boolean> {
    const cached = this.nodes.get(undefined, vm.name);
    try {
      await this.client.delete(CoreResources.nodes, vm.name, {
        ...(cached?.metadata.uid === undefined ? {} : { preconditions: { uid: cached.metadata.uid } }),
        ...(signal === undefined ? {} : { signal }),
      });
      this.deleted.add(vm.name, cached?.metadata.uid ?? vm.uid);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw cloudError(`delete VM ${vm.name}`, err);
    }
  }

  // The node informer belongs to the manager, which starts and stops it.
  start(): void {
    // nothing to start
  }

  waitForSync(signal?: AbortSignal): Promise<void> {
    return this.nodes.waitForSync(signal);
  }

  async stop(): Promise<void> {
    // nothing to stop
  }
}

// ---------------------------------------------------------------------------------------------
// ConfigMaps (without a target cluster)
// ---------------------------------------------------------------------------------------------

const MAX_NAME = 253;

/** The ConfigMap of a VM: `virtual-vm-<name>`, shortened with a hash when that is too long. */
export function configMapNameOf(vmName: string): string {
  const name = `virtual-vm-${vmName}`;
  if (name.length <= MAX_NAME) return name;
  const hash = createHash('sha256').update(vmName).digest('hex').slice(0, 10);
  return `${name.slice(0, MAX_NAME - 11)}-${hash}`;
}

function vmRecordOfConfigMap(cm: DeepReadonly<ConfigMap> | ConfigMap): VmRecord {
  const d = cm.data ?? {};
  let addresses: NodeAddress[];
  try {
    addresses = JSON.parse(d.addresses ?? '[]') as NodeAddress[];
  } catch {
    addresses = [];
  }
  return {
    name: d.name ?? '',
    providerID: d.providerID ?? '',
    zone: d.zone ?? '',
    machine: d.machine ?? '',
    machineClass: d.machineClass ?? '',
    terminating: cm.metadata.deletionTimestamp !== undefined,
    uid: cm.metadata.uid ?? '',
    bootNeverCompletes: d.bootNeverCompletes === 'true',
    addresses,
  };
}

export class ConfigMapVmStore implements VmStore {
  private readonly informer: Informer<ConfigMap>;
  private readonly byName = 'virtual-vm-name';
  private readonly deleted = new Deleted();

  constructor(
    private readonly client: KubeApi,
    private readonly namespace: string,
    logger: Logger,
  ) {
    this.informer = new Informer<ConfigMap>({
      client,
      resource: CoreResources.configMaps,
      namespace,
      labelSelector: `${VirtualKey.Vm}=true`,
      name: 'virtual-vms',
      logger,
    });
    this.informer.addIndexer(this.byName, (cm) => (cm.data?.name === undefined ? [] : [cm.data.name]));
    this.informer.addIndexer(ZONE_INDEX, (cm) => (cm.data?.zone === undefined ? [] : [cm.data.zone]));
    this.informer.addHandler({
      onUpdate: (_old, cm) => {
        this.deleted.replaced(cm.data?.name ?? '', cm.metadata.uid ?? '');
      },
      onDelete: (cm) => {
        this.deleted.forget(cm.data?.name ?? '', cm.metadata.uid ?? '');
      },
    });
  }

  get(name: string): VmRecord | undefined {
    const cm = this.informer.byIndex(this.byName, name)[0];
    return cm === undefined ? undefined : this.deleted.apply(vmRecordOfConfigMap(cm));
  }

  async getFresh(name: string, signal?: AbortSignal): Promise<VmRecord | undefined> {
    const cached = this.get(name);
    if (cached !== undefined) return cached;
    try {
      const cm = await this.client.get<ConfigMap>(
        CoreResources.configMaps,
        configMapNameOf(name),
        this.namespace,
        signal,
      );
      return vmRecordOfConfigMap(cm);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw cloudError(`read VM ${name}`, err);
    }
  }

  list(): VmRecord[] {
    return this.informer.list().map((cm) => this.deleted.apply(vmRecordOfConfigMap(cm)));
  }

  countInZone(zone: string): number {
    return this.informer
      .byIndex(ZONE_INDEX, zone)
      .filter(
        (cm) =>
          cm.metadata.deletionTimestamp === undefined && !this.deleted.has(cm.data?.name, cm.metadata.uid),
      ).length;
  }

  async create(vm: NewVm, _now: number, signal?: AbortSignal): Promise<VmRecord> {
    const name = configMapNameOf(vm.name);
    const cm: ConfigMap = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: this.namespace, labels: { [VirtualKey.Vm]: 'true' } },
      data: {
        name: vm.name,
        providerID: providerIDOf(vm.shape.zone, vm.name),
        zone: vm.shape.zone,
        machine: vm.machine,
        machineClass: vm.machineClass,
        instanceType: vm.shape.instanceType,
        bootNeverCompletes: String(vm.bootNeverCompletes),
        addresses: JSON.stringify(addressesOf(vm.name)),
      },
    };
    try {
      return vmRecordOfConfigMap(
        await this.client.create<ConfigMap>(CoreResources.configMaps, cm, {
          ...(signal === undefined ? {} : { signal }),
        }),
      );
    } catch (err) {
      if (!isAlreadyExists(err)) throw cloudError(`create VM ${vm.name}`, err);
    }
    let existing: ConfigMap;
    try {
      existing = await this.client.get<ConfigMap>(CoreResources.configMaps, name, this.namespace, signal);
    } catch (err) {
      throw cloudError(`read VM ${vm.name}`, err);
    }
    const rec = vmRecordOfConfigMap(existing);
    if (rec.terminating) {
      throw new MachineError('Unavailable', `the previous VM ${vm.name} is still shutting down`);
    }
    if (rec.machine !== vm.machine) {
      throw new MachineError('AlreadyExists', `VM ${vm.name} exists for another machine (${rec.machine})`);
    }
    return rec;
  }

  async delete(vm: VmRecord, signal?: AbortSignal): Promise<boolean> {
    try {
      await this.client.delete(CoreResources.configMaps, configMapNameOf(vm.name), {
        namespace: this.namespace,
        ...(signal === undefined ? {} : { signal }),
      });
      this.deleted.add(vm.name, vm.uid);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw cloudError(`delete VM ${vm.name}`, err);
    }
  }

  start(): void {
    this.informer.start();
  }

  waitForSync(signal?: AbortSignal): Promise<void> {
    return this.informer.waitForSync(signal);
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }
}
