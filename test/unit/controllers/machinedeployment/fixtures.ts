import type { Node } from '../../../../lib/kube/types.js';
import {
  API_VERSION,
  type Machine,
  type MachineDeployment,
  type MachineDeploymentStrategy,
  type MachineSet,
} from '../../../../lib/api/types.js';
import { templateHash } from '../../../../lib/api/template.js';
import { buildNewMachineSet } from '../../../../lib/controllers/machinedeployment/newset.js';
import type { SetState } from '../../../../lib/controllers/machinedeployment/sets.js';

export const NS = 'default';
export const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
export const NOW_RFC3339 = '2026-11-21T10:00:00Z';

export interface DeploymentOpts {
  className?: string;
  strategy?: MachineDeploymentStrategy;
  maxSurge?: number | string;
  maxUnavailable?: number | string;
  annotations?: Record<string, string>;
  revisionHistoryLimit?: number;
  paused?: boolean;
  progressDeadlineSeconds?: number;
  generation?: number;
}

/** A valid RollingUpdate deployment (maxSurge 1, maxUnavailable 0 unless told otherwise). */
export function deployment(name: string, replicas: number, opts: DeploymentOpts = {}): MachineDeployment {
  const labels = { app: 'worker', pool: name };
  const mcd: MachineDeployment = {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS, uid: `uid-${name}`, generation: opts.generation ?? 1 },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      strategy: opts.strategy ?? {
        type: 'RollingUpdate',
        rollingUpdate: { maxSurge: opts.maxSurge ?? 1, maxUnavailable: opts.maxUnavailable ?? 0 },
      },
      template: {
        metadata: { labels: { ...labels, name } },
        spec: { class: { kind: 'MachineClass', name: opts.className ?? 'small' } },
      },
    },
  };
  if (opts.annotations !== undefined) mcd.metadata.annotations = opts.annotations;
  if (mcd.spec !== undefined) {
    if (opts.revisionHistoryLimit !== undefined) mcd.spec.revisionHistoryLimit = opts.revisionHistoryLimit;
    if (opts.paused !== undefined) mcd.spec.paused = opts.paused;
    if (opts.progressDeadlineSeconds !== undefined)
      mcd.spec.progressDeadlineSeconds = opts.progressDeadlineSeconds;
  }
  return mcd;
}

/** The deployment with another machine class: a template change that rolls machines. */
export function withClass(mcd: MachineDeployment, className: string): MachineDeployment {
  const next = structuredClone(mcd);
  const spec = next.spec?.template.spec;
  if (spec !== undefined) spec.class = { kind: 'MachineClass', name: className };
  return next;
}

export interface SetOpts {
  /** Template class name (defaults to the deployment's). */
  className?: string;
  revision?: number;
  created?: string;
  /** status.replicas and status.availableReplicas (default: replicas, all available). */
  statusReplicas?: number;
  statusAvailable?: number;
  desired?: number;
  annotations?: Record<string, string>;
}

/** A set as the deployment controller would have created it for a template of `mcd`. */
export function ownedSet(mcd: MachineDeployment, replicas: number, opts: SetOpts = {}): MachineSet {
  const source = opts.className === undefined ? mcd : withClass(mcd, opts.className);
  const hash = templateHash(source.spec?.template ?? {});
  const ms = buildNewMachineSet(source, { hash, revision: opts.revision ?? 1, replicas, maxSurge: 1 });
  ms.metadata.uid = `uid-${ms.metadata.name ?? ''}`;
  ms.metadata.creationTimestamp = opts.created ?? '2026-11-20T00:00:00Z';
  ms.metadata.generation = 1;
  ms.metadata.annotations = {
    ...(ms.metadata.annotations ?? {}),
    'deployment.kubernetes.io/desired-replicas': String(opts.desired ?? mcd.spec?.replicas ?? 0),
    ...(opts.annotations ?? {}),
  };
  const statusReplicas = opts.statusReplicas ?? replicas;
  ms.status = {
    replicas: statusReplicas,
    availableReplicas: opts.statusAvailable ?? statusReplicas,
    readyReplicas: opts.statusAvailable ?? statusReplicas,
    fullyLabeledReplicas: statusReplicas,
    observedGeneration: 1,
  };
  return ms;
}

export interface MachineOpts {
  phase?: string;
  node?: string;
  annotations?: Record<string, string>;
  deleting?: boolean;
  created?: string;
  preserveExpiry?: string;
}

export function machineOf(ms: MachineSet, name: string, opts: MachineOpts = {}): Machine {
  const labels: Record<string, string> = { ...(ms.spec?.template?.metadata?.labels ?? {}) };
  if (opts.node !== undefined) labels.node = opts.node;
  const m: Machine = {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      uid: `uid-${name}`,
      labels,
      creationTimestamp: opts.created ?? '2026-11-21T09:00:00Z',
      finalizers: ['machine.sapcloud.io/machine-controller-manager'],
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'MachineSet',
          name: ms.metadata.name ?? '',
          uid: ms.metadata.uid ?? '',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: structuredClone(ms.spec?.template?.spec ?? {}),
    status: { currentStatus: { phase: (opts.phase ?? 'Running') as 'Running' } },
  };
  if (opts.annotations !== undefined) m.metadata.annotations = opts.annotations;
  if (opts.deleting === true) m.metadata.deletionTimestamp = '2026-11-21T09:30:00Z';
  if (opts.preserveExpiry !== undefined && m.status?.currentStatus !== undefined) {
    m.status.currentStatus.preserveExpiryTime = opts.preserveExpiry;
  }
  return m;
}

/** `count` machines of a set named `<prefix>-0..n`. */
export function machinesOf(ms: MachineSet, prefix: string, count: number, opts: MachineOpts = {}): Machine[] {
  return Array.from({ length: count }, (_, i) => machineOf(ms, `${prefix}-${i}`, opts));
}

export function node(name: string, extra: Partial<Node> = {}): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, ...(extra.metadata ?? {}) },
    ...(extra.spec === undefined ? {} : { spec: extra.spec }),
  };
}

/** A SetState for planner tables. */
export function state(name: string, replicas: number, extra: Partial<SetState> = {}): SetState {
  return { name, created: 0, replicas, machines: replicas, available: replicas, ...extra };
}
