/**
 * The subset of Kubernetes core and meta types this project reads and writes, in their plain JSON
 * form (timestamps are RFC 3339 strings, quantities are strings). These are wire facts of the
 * Kubernetes API; everything else in lib/ builds on them.
 */

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ManagedFieldsEntry {
  manager?: string;
  operation?: string;
  apiVersion?: string;
  time?: string;
  fieldsType?: string;
  fieldsV1?: unknown;
  subresource?: string;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  managedFields?: unknown[];
}

/** Any object served by the Kubernetes API. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export interface ListMeta {
  resourceVersion?: string;
  continue?: string;
  remainingItemCount?: number;
  selfLink?: string;
}

export interface KubeList<T> {
  apiVersion?: string;
  kind?: string;
  metadata: ListMeta;
  items: T[];
}

export type LabelSelectorOperator = 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';

export interface LabelSelectorRequirement {
  key: string;
  operator: LabelSelectorOperator;
  values?: string[];
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export interface StatusCause {
  reason?: string;
  message?: string;
  field?: string;
}

/** metav1.Status, returned by the apiserver for errors. */
export interface Status {
  apiVersion?: string;
  kind?: 'Status';
  status?: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    uid?: string;
    causes?: StatusCause[];
    retryAfterSeconds?: number;
  };
}

export interface ObjectReference {
  apiVersion?: string;
  kind?: string;
  namespace?: string;
  name?: string;
  uid?: string;
  resourceVersion?: string;
  fieldPath?: string;
}

/** autoscaling/v1 Scale, served by the scale subresource. */
export interface Scale extends KubeObject {
  spec: { replicas?: number };
  status?: { replicas: number; selector?: string };
}

/** coordination.k8s.io/v1 Lease. */
export interface Lease extends KubeObject {
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number | null;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number | null;
  };
}

/** core/v1 Event. */
export interface CoreEvent extends KubeObject {
  involvedObject: ObjectReference;
  reason?: string;
  message?: string;
  type?: 'Normal' | 'Warning';
  count?: number;
  firstTimestamp?: string;
  lastTimestamp?: string;
  eventTime?: string | null;
  source?: { component?: string; host?: string };
  reportingComponent?: string;
  reportingInstance?: string;
  action?: string;
}

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface NodeCondition {
  type: string;
  status: ConditionStatus;
  lastHeartbeatTime?: string;
  lastTransitionTime?: string;
  reason?: string;
  message?: string;
}

export interface NodeAddress {
  type: string;
  address: string;
}

export type TaintEffect = 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';

export interface Taint {
  key: string;
  value?: string;
  effect: TaintEffect;
  timeAdded?: string;
}

/** Resource name to quantity string (cpu: "2", memory: "8Gi"). */
export type ResourceList = Record<string, string>;

export interface Node extends KubeObject {
  spec?: {
    providerID?: string;
    unschedulable?: boolean;
    taints?: Taint[];
    podCIDR?: string;
  };
  status?: {
    capacity?: ResourceList;
    allocatable?: ResourceList;
    conditions?: NodeCondition[];
    addresses?: NodeAddress[];
    volumesAttached?: { name: string; devicePath: string }[];
    nodeInfo?: Record<string, string>;
    phase?: string;
  };
}

/** core/v1 Secret; `data` values are base64 as on the wire. */
export interface Secret extends KubeObject {
  type?: string;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
  immutable?: boolean;
}

/** core/v1 ConfigMap. */
export interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
}

/** core/v1 PersistentVolumeSpec: the parts drivers map to cloud volume IDs. */
export interface PersistentVolumeSpec {
  csi?: { driver: string; volumeHandle: string; fsType?: string };
  hostPath?: { path: string };
  local?: { path: string };
  nfs?: { server: string; path: string };
  claimRef?: ObjectReference;
  capacity?: ResourceList;
  storageClassName?: string;
  [source: string]: unknown;
}

/** core/v1 Pod: the fields the drain reads (the pod cache keeps only these). */
export interface Pod extends KubeObject {
  spec?: {
    nodeName?: string;
    priority?: number;
    terminationGracePeriodSeconds?: number;
    schedulerName?: string;
    volumes?: {
      name: string;
      persistentVolumeClaim?: { claimName: string; readOnly?: boolean };
      [k: string]: unknown;
    }[];
    [k: string]: unknown;
  };
  status?: { phase?: string; [k: string]: unknown };
}

/** policy/v1 PodDisruptionBudget. */
export interface PodDisruptionBudget extends KubeObject {
  spec?: { selector?: LabelSelector; minAvailable?: number | string; maxUnavailable?: number | string };
  status?: {
    observedGeneration?: number;
    disruptionsAllowed?: number;
    currentHealthy?: number;
    desiredHealthy?: number;
    expectedPods?: number;
    disruptedPods?: Record<string, string>;
  };
}

/** core/v1 PersistentVolumeClaim. */
export interface PersistentVolumeClaim extends KubeObject {
  spec?: { volumeName?: string; [k: string]: unknown };
}

/** core/v1 PersistentVolume. */
export interface PersistentVolume extends KubeObject {
  spec?: PersistentVolumeSpec;
}

/** storage.k8s.io/v1 VolumeAttachment. */
export interface VolumeAttachment extends KubeObject {
  spec?: { attacher?: string; nodeName?: string; source?: { persistentVolumeName?: string } };
  status?: { attached?: boolean };
}
