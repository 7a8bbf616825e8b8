import type { Machine, MachineClass, MachineDeployment, MachineSet } from '../../../lib/api/types.js';
import { API_VERSION } from '../../../lib/api/types.js';
import type { Node } from '../../../lib/kube/types.js';
import { DEFAULT_SHAPE } from '../../../lib/providers/virtual/spec.js';
import { buildVmNode } from '../../../lib/providers/virtual/vm.js';

export const NS = 'default';

export function machineSet(
  name: string,
  replicas: number,
  extra: { labels?: Record<string, string>; uid?: string } = {},
): MachineSet {
  const labels = { app: 'worker', pool: name };
  return {
    apiVersion: API_VERSION,
    kind: 'MachineSet',
    metadata: {
      name,
      namespace: NS,
      uid: extra.uid ?? `uid-${name}`,
      labels: extra.labels ?? {},
      generation: 1,
    },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels: { ...labels, name: 'md' } },
        spec: {
          class: { kind: 'MachineClass', name: 'small' },
          nodeTemplate: { metadata: { labels: { role: 'worker' } } },
        },
      },
    },
  };
}

export interface MachineOpts {
  owner?: MachineSet | undefined;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  phase?: string;
  created?: string;
  lastOpState?: string;
  preserveExpiry?: string;
  deleting?: boolean;
  uid?: string;
}

export function machine(name: string, opts: MachineOpts = {}): Machine {
  const m: Machine = {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      uid: opts.uid ?? `uid-${name}`,
      labels:
        opts.labels ??
        (opts.owner?.spec?.template?.metadata?.labels ? { ...opts.owner.spec.template.metadata.labels } : {}),
      creationTimestamp: opts.created ?? '2026-11-21T09:00:00Z',
      finalizers: ['machine.sapcloud.io/machine-controller-manager'],
    },
    spec: structuredClone(
      opts.owner?.spec?.template?.spec ?? { class: { kind: 'MachineClass', name: 'small' } },
    ),
    status: { currentStatus: { phase: (opts.phase ?? 'Running') as 'Running' } },
  };
  if (opts.annotations !== undefined) m.metadata.annotations = opts.annotations;
  if (opts.owner !== undefined) {
    m.metadata.ownerReferences = [
      {
        apiVersion: API_VERSION,
        kind: 'MachineSet',
        name: opts.owner.metadata.name ?? '',
        uid: opts.owner.metadata.uid ?? '',
        controller: true,
        blockOwnerDeletion: true,
      },
    ];
  }
  if (opts.lastOpState !== undefined && m.status !== undefined) {
    m.status.lastOperation = { state: opts.lastOpState as 'Failed', type: 'Create', description: 'boom' };
  }
  if (opts.preserveExpiry !== undefined && m.status?.currentStatus !== undefined) {
    m.status.currentStatus.preserveExpiryTime = opts.preserveExpiry;
  }
  if (opts.deleting === true) m.metadata.deletionTimestamp = '2026-11-21T09:30:00Z';
  return m;
}

export function machineDeployment(name: string, replicas: number): MachineDeployment {
  const labels = { app: 'worker', pool: name };
  return {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS, uid: `uid-${name}`, generation: 1 },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels: { ...labels, name } },
        spec: { class: { kind: 'MachineClass', name: 'small' } },
      },
    },
  };
}

/** A VM of the virtual cloud (its Node, Ready), created for machine `machineName` of class `className`. */
export function virtualVm(name: string, machineName: string, className = 'small'): Node {
  return buildVmNode(
    {
      name,
      machine: `${NS}/${machineName}`,
      machineClass: className,
      shape: DEFAULT_SHAPE,
      bootAt: 0,
      notReadyAt: undefined,
      bootNeverCompletes: false,
    },
    Date.UTC(2026, 10, 21, 9, 0, 0),
  );
}

/** A MachineClass of the virtual provider with an empty providerSpec. */
export function virtualClass(name: string, finalizers?: string[]): MachineClass {
  return {
    apiVersion: API_VERSION,
    kind: 'MachineClass',
    metadata: { name, namespace: NS, ...(finalizers === undefined ? {} : { finalizers }) },
    provider: 'virtual',
    providerSpec: {},
  };
}
