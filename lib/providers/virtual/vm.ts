// A virtual VM and the Node it registers. With a target cluster the VM *is* its Node (the record
// lives in the Node's labels, annotations and spec.providerID), so the inventory survives our
// restarts, costs one object per VM, and anything that can write Nodes (a Go driver for gardener
// MCM included) can drive the same simulated cloud.

import { createHash } from 'node:crypto';

import type { Node, NodeAddress, NodeCondition, Taint } from '../../kube/types.js';
import { WellKnownLabel } from '../../kube/wellknown.js';
import type { VirtualVmShape } from './spec.js';

export { WellKnownLabel };

export const VIRTUAL_PROVIDER = 'virtual';
export const VIRTUAL_PROVIDER_ID_PREFIX = 'virtual://';
/** The CSI driver name of the virtual cloud's volumes (GetVolumeIDs, the serial volume drain). */
export const VIRTUAL_CSI_DRIVER = 'virtual.csi.mcm-ts.io';

/** Keys of the virtual cloud's records (this project's own domain). */
export const VirtualKey = {
  /** Label, value "true": the object is a virtual VM record. */
  Vm: 'virtual.mcm-ts.io/vm',
  /** Annotation: `<namespace>/<name>` of the machine the VM was created for. */
  Machine: 'virtual.mcm-ts.io/machine',
  /** Annotation: the MachineClass the VM was created from. */
  MachineClass: 'virtual.mcm-ts.io/machine-class',
  /** Annotation: booting | running | stopped. */
  State: 'virtual.mcm-ts.io/state',
  /** Annotation: when a booting VM becomes Ready (RFC 3339, ms). */
  BootAt: 'virtual.mcm-ts.io/boot-at',
  /** Annotation: when a running VM turns NotReady (failure mode; RFC 3339, ms). */
  NotReadyAt: 'virtual.mcm-ts.io/not-ready-at',
  /** Annotation "true": initialisation never completes (failure mode). */
  BootNeverCompletes: 'virtual.mcm-ts.io/boot-never-completes',
  /** Annotation: the MachineClass the simulated update agent last updated the VM to in place. */
  UpdatedTo: 'virtual.mcm-ts.io/updated-to',
} as const;

export type VmState = 'booting' | 'running' | 'stopped';

/** kwok keeps Nodes with this annotation alive (heartbeats, leases) and runs their pods. */
export const KWOK_ANNOTATION = 'kwok.x-k8s.io/node';
export const KWOK_ANNOTATION_VALUE = 'fake';

/** Taint a kubelet registers with until its node is Ready. */
export const NOT_READY_TAINT: Taint = { key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' };

export function providerIDOf(zone: string, name: string): string {
  return `${VIRTUAL_PROVIDER_ID_PREFIX}${zone}/${name}`;
}

/** The VM name in a virtual providerID, or undefined when it is not one. */
export function vmNameOfProviderID(providerID: string): string | undefined {
  const m = /^virtual:\/\/[^/]*\/([^/]+)$/.exec(providerID);
  return m?.[1];
}

/** A stable private address for a VM (10.0.0.0/8, from a hash of its name). */
export function internalIPOf(name: string): string {
  const h = createHash('sha256').update(name).digest();
  return `10.${h[0] ?? 0}.${h[1] ?? 0}.${Math.max(1, h[2] ?? 1)}`;
}

export function addressesOf(name: string): NodeAddress[] {
  return [
    { type: 'InternalIP', address: internalIPOf(name) },
    { type: 'Hostname', address: name },
  ];
}

/** The labels every node of this shape carries, stable and beta variants. */
export function wellKnownLabels(name: string, shape: VirtualVmShape): Record<string, string> {
  return {
    [WellKnownLabel.Hostname]: name,
    [WellKnownLabel.Arch]: shape.architecture,
    [WellKnownLabel.BetaArch]: shape.architecture,
    [WellKnownLabel.OS]: 'linux',
    [WellKnownLabel.BetaOS]: 'linux',
    [WellKnownLabel.InstanceType]: shape.instanceType,
    [WellKnownLabel.BetaInstanceType]: shape.instanceType,
    [WellKnownLabel.Region]: shape.region,
    [WellKnownLabel.BetaRegion]: shape.region,
    [WellKnownLabel.Zone]: shape.zone,
    [WellKnownLabel.BetaZone]: shape.zone,
  };
}

export function readyCondition(ready: boolean, now: string): NodeCondition {
  return ready
    ? {
        type: 'Ready',
        status: 'True',
        reason: 'KubeletReady',
        message: 'virtual machine is running',
        lastHeartbeatTime: now,
        lastTransitionTime: now,
      }
    : {
        type: 'Ready',
        status: 'False',
        reason: 'KubeletNotReady',
        message: 'virtual machine is not running',
        lastHeartbeatTime: now,
        lastTransitionTime: now,
      };
}

/** What the driver knows when it creates a VM. */
export interface NewVm {
  name: string;
  machine: string;
  machineClass: string;
  shape: VirtualVmShape;
  /** ms since the epoch; the node is Ready at once when bootAt <= now. */
  bootAt: number;
  notReadyAt: number | undefined;
  bootNeverCompletes: boolean;
  /**
   * Labels and taints of the machine's node template: the VM's kubelet registers with them (as
   * one started with --node-labels and --register-with-taints does), so its Node matches the
   * pods it is for from the start.
   */
  nodeLabels?: Readonly<Record<string, string>> | undefined;
  nodeTaints?: readonly Taint[] | undefined;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** The Node a new VM registers: Ready at once when it boots immediately, else booting. */
export function buildVmNode(vm: NewVm, now: number): Node {
  const booted = vm.bootAt <= now && !vm.bootNeverCompletes;
  const stamp = iso(now).replace(/\.\d{3}Z$/, 'Z');
  const taints: Taint[] = [
    ...(booted ? [] : [{ ...NOT_READY_TAINT }]),
    ...(vm.nodeTaints ?? []).map((t) => ({ ...t })),
  ];
  const annotations: Record<string, string> = {
    [VirtualKey.Machine]: vm.machine,
    [VirtualKey.MachineClass]: vm.machineClass,
    [VirtualKey.State]: booted ? 'running' : 'booting',
    [VirtualKey.BootAt]: iso(vm.bootAt),
  };
  if (booted) annotations[KWOK_ANNOTATION] = KWOK_ANNOTATION_VALUE;
  if (vm.notReadyAt !== undefined) annotations[VirtualKey.NotReadyAt] = iso(vm.notReadyAt);
  if (vm.bootNeverCompletes) annotations[VirtualKey.BootNeverCompletes] = 'true';
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: vm.name,
      labels: { ...vm.nodeLabels, ...wellKnownLabels(vm.name, vm.shape), [VirtualKey.Vm]: 'true' },
      annotations,
    },
    spec: {
      providerID: providerIDOf(vm.shape.zone, vm.name),
      ...(taints.length === 0 ? {} : { taints }),
    },
    status: {
      capacity: { ...vm.shape.capacity },
      allocatable: { ...vm.shape.allocatable },
      conditions: [readyCondition(booted, stamp)],
      addresses: addressesOf(vm.name),
      nodeInfo: {
        architecture: vm.shape.architecture,
        operatingSystem: 'linux',
        kubeletVersion: 'virtual',
        containerRuntimeVersion: 'virtual',
        kernelVersion: 'virtual',
        osImage: 'virtual machine',
        machineID: '',
        systemUUID: '',
        bootID: '',
        kubeProxyVersion: '',
      },
      phase: booted ? 'Running' : 'Pending',
    },
  };
}
