// Wire types of the machine.sapcloud.io/v1alpha1 API as plain JSON. Field names follow the JSON
// tags of gardener machine-controller-manager v0.62/v0.63 so objects written by either
// implementation round-trip unchanged. Timestamps and durations (Go metav1.Duration, e.g.
// "10m0s") stay strings and quantities stay as served: we never reinterpret what we did not write.

import type {
  ConditionStatus,
  MachineDeploymentConditionType,
  MachineOperationType,
  MachinePhase,
  MachineSetConditionType,
  MachineState,
  OrchestrationType,
  StrategyType,
  TaintEffect,
} from './constants.js';

export type {
  ConditionStatus,
  MachineDeploymentConditionType,
  MachineOperationType,
  MachinePhase,
  MachineSetConditionType,
  MachineState,
  OrchestrationType,
  TaintEffect,
};
export type MachineDeploymentStrategyType = StrategyType;
export type {
  LabelSelector,
  LabelSelectorOperator,
  LabelSelectorRequirement,
  ListMeta,
  NodeAddress,
  NodeCondition,
  ObjectMeta,
  OwnerReference,
  Taint,
} from '../kube/types.js';
import type {
  LabelSelector,
  ListMeta,
  NodeAddress,
  NodeCondition,
  ObjectMeta,
  Taint,
} from '../kube/types.js';

export const GROUP = 'machine.sapcloud.io';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}` as const;

// ---------------------------------------------------------------------------------------------
// Core (k8s.io/api, k8s.io/apimachinery) types come from lib/kube/types.ts; declared in-project instead of
// taken from @kubernetes/client-node because its classes model timestamps as Date objects.
// ---------------------------------------------------------------------------------------------

/** RFC 3339 timestamp as serialized by the apiserver. */
export type Time = string;

/** Go duration string such as "10m0s", "96h" or "30s". */
export type Duration = string;

/**
 * Kubernetes resource quantity ("4", "16Gi", "500m"). Go writes strings, but the schema is
 * int-or-string, so a manifest saying `cpu: 4` is stored and served as the number 4.
 */
export type Quantity = string | number;

/** Either an absolute number or a percentage string such as "25%". */
export type IntOrString = number | string;

export type ResourceList = Record<string, Quantity>;

export interface ConfigMapNodeConfigSource {
  namespace: string;
  name: string;
  kubeletConfigKey: string;
  uid?: string;
  resourceVersion?: string;
}

export interface NodeConfigSource {
  configMap?: ConfigMapNodeConfigSource;
}

/** core/v1 NodeSpec; MCM only acts on `taints` but keeps every field. */
export interface NodeSpec {
  podCIDR?: string;
  podCIDRs?: string[];
  providerID?: string;
  unschedulable?: boolean;
  taints?: Taint[];
  configSource?: NodeConfigSource;
  externalID?: string;
}

export interface SecretReference {
  name?: string;
  namespace?: string;
}

// ---------------------------------------------------------------------------------------------
// Shared machine.sapcloud.io types
// ---------------------------------------------------------------------------------------------

/** Reference from a machine (template) to its class. */
export interface ClassSpec {
  apiGroup?: string;
  kind?: string;
  name?: string;
}

/**
 * Per-machine overrides of controller-wide timeouts and health settings. In Go this struct is
 * embedded inline, so its fields appear directly in a MachineSpec.
 */
export interface MachineConfiguration {
  drainTimeout?: Duration;
  healthTimeout?: Duration;
  creationTimeout?: Duration;
  inPlaceUpdateTimeout?: Duration;
  machinePreserveTimeout?: Duration;
  disableHealthTimeout?: boolean;
  maxEvictRetries?: number;
  /** Comma-separated node condition types that count as unhealthy. */
  nodeConditions?: string;
}

/**
 * Every MachineConfiguration field. They change on existing machines in place: MachineSets copy
 * them to their machines, and a MachineDeployment neither rolls nor hashes them.
 */
export const MACHINE_CONFIGURATION_FIELDS = [
  'drainTimeout',
  'healthTimeout',
  'creationTimeout',
  'inPlaceUpdateTimeout',
  'machinePreserveTimeout',
  'disableHealthTimeout',
  'maxEvictRetries',
  'nodeConditions',
] as const satisfies readonly (keyof MachineConfiguration)[];

/** Metadata and spec propagated from a machine to its Node. */
export interface NodeTemplateSpec {
  metadata?: ObjectMeta;
  spec?: NodeSpec;
}

export interface MachineSpec extends MachineConfiguration {
  class?: ClassSpec;
  providerID?: string;
  nodeTemplate?: NodeTemplateSpec;
}

export interface MachineTemplateSpec {
  metadata?: ObjectMeta;
  spec?: MachineSpec;
}

export interface LastOperation {
  description?: string;
  /** Name of a machine error code (e.g. "ResourceExhausted"), not its number. */
  errorCode?: string;
  lastUpdateTime?: Time;
  state?: MachineState;
  type?: MachineOperationType;
}

/** Summary of a failed machine as reported in MachineSet/MachineDeployment status. */
export interface MachineSummary {
  name?: string;
  providerID?: string;
  lastOperation?: LastOperation;
  /** Name of the controlling object. */
  ownerRef?: string;
}

export interface CurrentStatus {
  phase?: MachinePhase;
  timeoutActive?: boolean;
  lastUpdateTime?: Time;
  preserveExpiryTime?: Time;
}

// ---------------------------------------------------------------------------------------------
// MachineClass
// ---------------------------------------------------------------------------------------------

/** What a node of this class looks like; lets the autoscaler scale a group up from zero. */
export interface NodeTemplate {
  capacity: ResourceList;
  virtualCapacity?: ResourceList;
  /**
   * Addition (not in MCM): what a node of this class offers to pods, i.e. capacity less what the
   * kubelet reserves (kube/system reserved, eviction threshold), per resource; a resource it does
   * not name is allocatable in full. The autoscaler's template node and the virtual provider's
   * Nodes use it.
   */
  allocatable?: ResourceList;
  instanceType: string;
  region: string;
  zone: string;
  architecture?: string;
}

/** MachineClass has no spec/status: its fields sit at the top level of the object. */
export interface MachineClass {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  nodeTemplate?: NodeTemplate;
  credentialsSecretRef?: SecretReference;
  /** Opaque, driver-specific configuration. */
  providerSpec: Record<string, unknown>;
  provider?: string;
  secretRef?: SecretReference;
}

export interface MachineClassList {
  apiVersion?: string;
  kind?: string;
  metadata?: ListMeta;
  items: MachineClass[];
}

// ---------------------------------------------------------------------------------------------
// Machine
// ---------------------------------------------------------------------------------------------

export interface MachineStatus {
  /** Only filled when running without a target cluster. */
  addresses?: NodeAddress[];
  /** Mirror of the backing Node's conditions. */
  conditions?: NodeCondition[];
  lastOperation?: LastOperation;
  currentStatus?: CurrentStatus;
  /** Opaque state a driver may keep between calls. */
  lastKnownState?: string;
  /**
   * Additive field (not in gardener MCM): the step the deletion flow has reached, so that it
   * resumes there instead of re-deriving it from lastOperation.description. Written by our
   * machine controller; absent means "from the start" (every step is idempotent).
   */
  deletionStep?: string;
}

export interface Machine {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec?: MachineSpec;
  status?: MachineStatus;
}

export interface MachineList {
  apiVersion?: string;
  kind?: string;
  metadata?: ListMeta;
  items: Machine[];
}

// ---------------------------------------------------------------------------------------------
// MachineSet
// ---------------------------------------------------------------------------------------------

export interface MachineSetCondition {
  type: MachineSetConditionType;
  status: ConditionStatus;
  lastTransitionTime?: Time;
  reason?: string;
  message?: string;
}

export interface MachineSetSpec {
  replicas?: number;
  selector?: LabelSelector;
  /** Legacy class reference; kept for compatibility, the template's class is what counts. */
  machineClass?: ClassSpec;
  template?: MachineTemplateSpec;
  minReadySeconds?: number;
  autoPreserveFailedMachineMax?: number;
}

export interface MachineSetStatus {
  replicas?: number;
  fullyLabeledReplicas?: number;
  readyReplicas?: number;
  availableReplicas?: number;
  preservedFailedReplicas?: number;
  observedGeneration?: number;
  /** JSON name differs from the usual `conditions`; kept for wire compatibility. */
  machineSetCondition?: MachineSetCondition[];
  lastOperation?: LastOperation;
  failedMachines?: MachineSummary[];
  autoPreserveFailedMachineCount?: number;
  /**
   * Additive field (not in gardener MCM): the selector serialized in label-selector syntax. The
   * scale subresource's labelSelectorPath points here so scale clients (HPA-style tooling, the
   * `/scale` status.selector) can find the machines. Filled by our MachineSet controller.
   */
  labelSelector?: string;
}

export interface MachineSet {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec?: MachineSetSpec;
  status?: MachineSetStatus;
}

export interface MachineSetList {
  apiVersion?: string;
  kind?: string;
  metadata?: ListMeta;
  items: MachineSet[];
}

// ---------------------------------------------------------------------------------------------
// MachineDeployment
// ---------------------------------------------------------------------------------------------

/** Shared by the RollingUpdate and InPlaceUpdate blocks (inline in Go). */
export interface UpdateConfiguration {
  maxUnavailable?: IntOrString;
  maxSurge?: IntOrString;
}

export type RollingUpdateMachineDeployment = UpdateConfiguration;

export interface InPlaceUpdateMachineDeployment extends UpdateConfiguration {
  orchestrationType?: OrchestrationType;
}

export interface MachineDeploymentStrategy {
  type?: MachineDeploymentStrategyType;
  rollingUpdate?: RollingUpdateMachineDeployment;
  inPlaceUpdate?: InPlaceUpdateMachineDeployment;
}

export interface RollbackConfig {
  /** 0 means the previous revision. */
  revision?: number;
}

export interface MachineDeploymentSpec {
  replicas?: number;
  selector?: LabelSelector;
  template: MachineTemplateSpec;
  strategy?: MachineDeploymentStrategy;
  minReadySeconds?: number;
  /** Absent means old MachineSets are never cleaned up. */
  revisionHistoryLimit?: number;
  paused?: boolean;
  rollbackTo?: RollbackConfig;
  /** Absent means no progress deadline. */
  progressDeadlineSeconds?: number;
  autoPreserveFailedMachineMax?: number;
}

export interface MachineDeploymentCondition {
  type: MachineDeploymentConditionType;
  status: ConditionStatus;
  lastUpdateTime?: Time;
  lastTransitionTime?: Time;
  reason?: string;
  message?: string;
}

export interface MachineDeploymentStatus {
  observedGeneration?: number;
  replicas?: number;
  updatedReplicas?: number;
  readyReplicas?: number;
  availableReplicas?: number;
  preservedFailedReplicas?: number;
  unavailableReplicas?: number;
  conditions?: MachineDeploymentCondition[];
  collisionCount?: number;
  failedMachines?: MachineSummary[];
  /**
   * Additive field (not in gardener MCM): the selector serialized in label-selector syntax, read
   * by the scale subresource through labelSelectorPath. Filled by our MachineDeployment controller.
   */
  labelSelector?: string;
}

export interface MachineDeployment {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec?: MachineDeploymentSpec;
  status?: MachineDeploymentStatus;
}

export interface MachineDeploymentList {
  apiVersion?: string;
  kind?: string;
  metadata?: ListMeta;
  items: MachineDeployment[];
}

// ---------------------------------------------------------------------------------------------
// Resource descriptors
// ---------------------------------------------------------------------------------------------

export interface ResourceDescriptor {
  readonly group: typeof GROUP;
  readonly version: typeof VERSION;
  readonly apiVersion: typeof API_VERSION;
  readonly kind: string;
  readonly listKind: string;
  readonly plural: string;
  readonly singular: string;
  readonly shortName: string;
  readonly namespaced: true;
}

function describe(kind: string, plural: string, shortName: string): ResourceDescriptor {
  return {
    group: GROUP,
    version: VERSION,
    apiVersion: API_VERSION,
    kind,
    listKind: `${kind}List`,
    plural,
    singular: kind.toLowerCase(),
    shortName,
    namespaced: true,
  };
}

export const MachineClassResource = describe('MachineClass', 'machineclasses', 'mcc');
export const MachineResource = describe('Machine', 'machines', 'mc');
export const MachineSetResource = describe('MachineSet', 'machinesets', 'mcs');
export const MachineDeploymentResource = describe('MachineDeployment', 'machinedeployments', 'mcd');

export const ALL_RESOURCES: readonly ResourceDescriptor[] = [
  MachineClassResource,
  MachineResource,
  MachineSetResource,
  MachineDeploymentResource,
];
