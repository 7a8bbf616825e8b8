// Well-known strings of the machine.sapcloud.io API. Every value is a wire fact shared with
// gardener machine-controller-manager, gardener and cluster-autoscaler: changing one breaks
// interoperability, so they live in one place and are never spelled inline elsewhere.

type ValueOf<T> = T[keyof T];

// ---------------------------------------------------------------------------------------------
// Machine lifecycle
// ---------------------------------------------------------------------------------------------

export const MachinePhase = {
  /** Not yet created at the provider. */
  Creating: '',
  Pending: 'Pending',
  Available: 'Available',
  Running: 'Running',
  Unknown: 'Unknown',
  Failed: 'Failed',
  CrashLoopBackOff: 'CrashLoopBackOff',
  Terminating: 'Terminating',
  InPlaceUpdating: 'InPlaceUpdating',
  InPlaceUpdateSuccessful: 'InPlaceUpdateSuccessful',
  InPlaceUpdateFailed: 'InPlaceUpdateFailed',
} as const;
export type MachinePhase = ValueOf<typeof MachinePhase>;

/** `status.lastOperation.state` */
export const MachineState = {
  Processing: 'Processing',
  Failed: 'Failed',
  Successful: 'Successful',
} as const;
export type MachineState = ValueOf<typeof MachineState>;

/** `status.lastOperation.type` */
export const MachineOperationType = {
  Create: 'Create',
  Update: 'Update',
  InPlaceUpdate: 'InPlaceUpdate',
  DrainNode: 'DrainNode',
  HealthCheck: 'HealthCheck',
  Delete: 'Delete',
} as const;
export type MachineOperationType = ValueOf<typeof MachineOperationType>;

export const ConditionStatus = {
  True: 'True',
  False: 'False',
  Unknown: 'Unknown',
} as const;
export type ConditionStatus = ValueOf<typeof ConditionStatus>;

/**
 * Markers MCM embeds in `lastOperation.description` while a machine moves through deletion and
 * initialization. Other tools (and old MCM versions picking up our objects) search for them.
 */
export const OperationDescriptionMarker = {
  GetVMStatus: 'Set machine status to termination. Now, getting VM Status',
  InstanceInitialization: 'Initialize VM Instance',
  InitiateDrain: 'Initiate node drain',
  NodeReadyForUpdate: 'Node drain successful. Node is ready for update',
  DeleteVolumeAttachments: 'Delete Volume Attachments',
  InitiateVMDeletion: 'Initiate VM deletion',
  InitiateNodeDeletion: 'Initiate node object deletion',
  InitiateFinalizerRemoval: 'Initiate machine object finalizer removal',
} as const;
export type OperationDescriptionMarker = ValueOf<typeof OperationDescriptionMarker>;

// ---------------------------------------------------------------------------------------------
// Machine error codes (gRPC-like, plus MCM's Uninitialized)
// ---------------------------------------------------------------------------------------------

export const MachineErrorCode = {
  OK: 0,
  Canceled: 1,
  Unknown: 2,
  InvalidArgument: 3,
  DeadlineExceeded: 4,
  NotFound: 5,
  AlreadyExists: 6,
  PermissionDenied: 7,
  ResourceExhausted: 8,
  FailedPrecondition: 9,
  Aborted: 10,
  OutOfRange: 11,
  Unimplemented: 12,
  Internal: 13,
  Unavailable: 14,
  DataLoss: 15,
  Unauthenticated: 16,
  Uninitialized: 17,
} as const;
export type MachineErrorCode = ValueOf<typeof MachineErrorCode>;
export type MachineErrorCodeName = keyof typeof MachineErrorCode;

/** Names indexed by numeric code; the name is what `lastOperation.errorCode` stores. */
export const MACHINE_ERROR_CODE_NAMES: readonly MachineErrorCodeName[] = [
  'OK',
  'Canceled',
  'Unknown',
  'InvalidArgument',
  'DeadlineExceeded',
  'NotFound',
  'AlreadyExists',
  'PermissionDenied',
  'ResourceExhausted',
  'FailedPrecondition',
  'Aborted',
  'OutOfRange',
  'Unimplemented',
  'Internal',
  'Unavailable',
  'DataLoss',
  'Unauthenticated',
  'Uninitialized',
];

/**
 * Shape of a machine-codes error string; `<CodeName>` and `<msg>` are placeholders. Providers and
 * MCM parse this exact text, so it is a contract (encoder/decoder live in lib/driver).
 */
export const MACHINE_CODES_ERROR_FORMAT = 'machine codes error: code = [<CodeName>] message = [<msg>]';
export const MACHINE_CODES_ERROR_PREFIX = 'machine codes error: ';

// ---------------------------------------------------------------------------------------------
// Labels
// ---------------------------------------------------------------------------------------------

export const Label = {
  /** On a Machine: name of its Node. */
  Node: 'node',
  /** On a Machine: name of its MachineDeployment (metrics and rate-limit grouping). */
  Name: 'name',
  /** On MachineSets and Machines: hash of the MachineDeployment template they came from. */
  MachineTemplateHash: 'machine-template-hash',
  /** On MachineSets/MachineDeployments, value `True`: frozen by the safety controller. */
  Freeze: 'freeze',
  /** On a Machine, boolean: delete without waiting for a graceful drain. */
  ForceDeletion: 'force-deletion',
  /** On a Machine, value `True`: drain forcefully (in-place update and preservation drains). */
  ForceDrain: 'force-drain',
  /** On a MachineSet: an old set that must not create machines during an in-place update. */
  ScaleUpDisabled: 'node.machine.sapcloud.io/scale-up-disabled',
  /** On a Node: name of its Machine. */
  NodeMachineName: 'node.gardener.cloud/machine-name',
  /** In-place update protocol, on a Node: its machine is to be updated in place. */
  CandidateForUpdate: 'node.machine.sapcloud.io/candidate-for-update',
  /** In-place update protocol, on a Node: chosen for its update now (drain, then update). */
  SelectedForUpdate: 'node.machine.sapcloud.io/selected-for-update',
  /** In-place update protocol, on a Node and its Machine: the update's result (see LabelValue). */
  UpdateResult: 'node.machine.sapcloud.io/update-result',
} as const;
export type Label = ValueOf<typeof Label>;

export const LabelValue = {
  /** Value of the `freeze` and `force-drain` labels. */
  True: 'True',
  /** Value of the `update-result` label: the in-place update succeeded. */
  UpdateSuccessful: 'successful',
  /** Value of the `update-result` label: the in-place update failed. */
  UpdateFailed: 'failed',
} as const;
export type LabelValue = ValueOf<typeof LabelValue>;

// ---------------------------------------------------------------------------------------------
// Annotations
// ---------------------------------------------------------------------------------------------

export const Annotation = {
  /** On a Machine: deletion priority, lower is deleted first (default 3). */
  MachinePriority: 'machinepriority.machine.sapcloud.io',
  /** On a Machine: when the autoscaler asked for its deletion (RFC 3339). */
  MarkedForDeletionTime: 'machine.sapcloud.io/marked-for-deletion-time',
  /** On a MachineDeployment (copied to its MachineSets): last replica change by the autoscaler. */
  LastDeploymentReplicaChangeByScalerTime:
    'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time',
  /** On a MachineDeployment: machines the autoscaler wants removed, `name~RFC3339,...`. */
  TriggerDeletionByMCM: 'node.machine.sapcloud.io/trigger-deletion-by-mcm',
  /** On MachineDeployment → MachineSet → Machine: overrides the creation timeout. */
  EffectiveCreationTimeout: 'node.machine.sapcloud.io/effective-creation-timeout',
  /**
   * On a Machine: how long the node took to join (gardener's name). Not written: gardener's write
   * of it never lands (see docs/differences-from-gardener.md); the join time is in the Running
   * lastOperation and mcm_machine_join_duration_seconds.
   */
  MachineJoinDuration: 'node.machine.sapcloud.io/machine-join-duration',
  /** On a Machine or Node: preservation request (see PreserveValue). */
  Preserve: 'node.machine.sapcloud.io/preserve',
  /** On a Machine: the Node preserve value last applied. */
  LastAppliedNodePreserveValue: 'node.machine.sapcloud.io/last-applied-node-preserve-value',
  /** On a Node: labels/annotations/taints last copied from the node template. */
  LastAppliedAnnotationsLabelsTaints: 'node.machine.sapcloud.io/last-applied-anno-labels-taints',
  /** On a Node: virtual capacity last copied from the class. */
  LastAppliedVirtualCapacity: 'node.machine.sapcloud.io/last-applied-virtual-capacity',
  /** On a Node: it has no Machine and the machine controller leaves it alone. */
  NotManagedByMCM: 'node.machine.sapcloud.io/not-managed-by-mcm',
  /** On a Node: why an in-place update failed. */
  UpdateFailedReason: 'node.machine.sapcloud.io/update-failed-reason',
  /** On a MachineSet: its nodes were tainted prefer-no-schedule during a rollout. */
  PreferNoSchedule: 'deployment.machine.sapcloud.io/prefer-no-schedule',
  /** On a MachineDeployment or MachineSet: manual unfreeze request. */
  SafetyUnfreeze: 'safety.machine.sapcloud.io/unfreeze',
  /** On a Node: cluster-autoscaler must not scale it down. */
  ClusterAutoscalerScaleDownDisabled: 'cluster-autoscaler.kubernetes.io/scale-down-disabled',
  /** On a Node: marks that the annotation above was set by MCM (so MCM may remove it). */
  ClusterAutoscalerScaleDownDisabledByMCM: 'cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm',
  /** Rollout bookkeeping shared with apps/v1 Deployments. */
  Revision: 'deployment.kubernetes.io/revision',
  /** On a MachineSet: the earlier revisions it had (rollbacks reuse a set). */
  RevisionHistory: 'deployment.kubernetes.io/revision-history',
  /** On a MachineSet: its deployment's replicas when the set was last sized. */
  DesiredReplicas: 'deployment.kubernetes.io/desired-replicas',
  /** On a MachineSet: its deployment's replicas plus maxSurge when the set was last sized. */
  MaxReplicas: 'deployment.kubernetes.io/max-replicas',
  /** Written by `kubectl apply`; never copied from a MachineDeployment to its MachineSets. */
  KubectlLastAppliedConfiguration: 'kubectl.kubernetes.io/last-applied-configuration',
} as const;
export type Annotation = ValueOf<typeof Annotation>;

/**
 * Keys this implementation adds, in its own domain (`mcm-ts.io`); gardener MCM ignores them.
 */
export const ExtensionAnnotation = {
  /**
   * On a MachineDeployment: how many of its machines may be in replacement at once before another
   * unhealthy machine is marked Failed — a count ("2") or a percentage of replicas ("10%").
   * Default: --max-unhealthy-replacements (1, MCM's fixed value).
   */
  MaxUnhealthyReplacements: 'mcm-ts.io/max-unhealthy-replacements',
  /**
   * On a MachineDeployment: machines older than this Go duration are replaced (expiry), surge
   * first, within the deployment's disruption budget and windows.
   */
  ExpireAfter: 'machine.mcm-ts.io/expire-after',
  /**
   * On a MachineDeployment: how many of its machines voluntary disruption (expiry) may take at
   * once, a count ("2") or a percentage of replicas ("10%", rounded up). Default 10%.
   */
  DisruptionBudget: 'machine.mcm-ts.io/disruption-budget',
  /**
   * On a MachineDeployment: the windows in which voluntary disruption may start, `<cron> <duration>`
   * in UTC, several separated by ";" (e.g. "0 2 * * 1-5 4h"). Absent: always.
   */
  DisruptionSchedule: 'machine.mcm-ts.io/disruption-schedule',
  /**
   * On a Machine: it is being replaced, surge first (value: why, e.g. "expired"). Its MachineSet
   * creates a machine in its place without counting it, and deletes it once the machines that stay
   * are available.
   */
  Replacing: 'machine.mcm-ts.io/replacing',
  /**
   * On a Machine: its VM is about to go (a cloud interruption notice: an EC2 Spot interruption
   * warning, a scheduled retirement, or a stop or termination the manager did not ask for), RFC 3339.
   * The node's drain ends by then: pods still there are deleted without eviction. With the
   * replacing annotation, its MachineSet creates the replacement at once, one for one, and deletes
   * the machine once the replacement is available or when the deadline is near
   * (--interruption-drain-lead before it), whichever comes first. Written before the notice is
   * acknowledged to the cloud, so that a restart acts on it.
   */
  InterruptionDeadline: 'machine.mcm-ts.io/interruption-deadline',
  /**
   * On a Machine: its provider reported its VM failed (value: the notice's reason, e.g.
   * InstanceStopped, InstanceTerminated, InstanceImpaired). The machine controller marks a joined
   * machine Failed within its deployment's replacement budget (machines over the budget wait), and
   * a machine still being created Failed at once as a failed launch (its class's launches then
   * back off). Its node's drain is forced only when the node is not Ready (or the VM is gone: the
   * interruption deadline).
   */
  VmFailure: 'machine.mcm-ts.io/vm-failure',
  /**
   * On a Machine: the cloud recommended moving off its VM (an EC2 rebalance recommendation), RFC
   * 3339. With --aws-rebalance-as-interruption the MachineDeployment controller replaces such
   * machines surge first, as voluntary disruption: within the deployment's disruption budget, its
   * maxSurge and its autoscaler maximum.
   */
  RebalanceRecommended: 'machine.mcm-ts.io/rebalance-recommended',
} as const;
export type ExtensionAnnotation = ValueOf<typeof ExtensionAnnotation>;

/** Pod annotations that veto voluntary disruption (expiry) of the pod's node. */
export const PodVetoAnnotation = {
  /** Karpenter's: "true" vetoes. */
  DoNotDisrupt: 'karpenter.sh/do-not-disrupt',
  /** cluster-autoscaler's: "false" vetoes. */
  SafeToEvict: 'cluster-autoscaler.kubernetes.io/safe-to-evict',
} as const;

/** Value of the cluster-autoscaler scale-down-disabled annotations. */
export const CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_VALUE = 'true';

export const PreserveValue = {
  /** Preserve the machine now, whatever its phase. */
  Now: 'now',
  /** Preserve the machine while it is Failed. */
  WhenFailed: 'when-failed',
  /** Set by the MachineSet on a Failed machine within autoPreserveFailedMachineMax. */
  AutoPreserved: 'auto-preserved',
  /** Do not preserve (stops a preservation; the MachineSet never auto-preserves it). */
  False: 'false',
} as const;
export type PreserveValue = ValueOf<typeof PreserveValue>;

/** Priority assumed for a machine without (or with an unparsable) priority annotation. */
export const DEFAULT_MACHINE_PRIORITY = 3;

/** Priority the autoscaler and MachineDeployment controller give to machines to remove first. */
export const DELETE_FIRST_MACHINE_PRIORITY = 1;

/** Separator between machine name and timestamp in the trigger-deletion-by-mcm annotation. */
export const TRIGGER_DELETION_ENTRY_SEPARATOR = '~';

// ---------------------------------------------------------------------------------------------
// Finalizers
// ---------------------------------------------------------------------------------------------

export const Finalizer = {
  /** On Machines, MachineClasses, MachineSets and MachineDeployments. */
  MachineControllerManager: 'machine.sapcloud.io/machine-controller-manager',
  /** On Secrets referenced by a MachineClass. */
  MachineControllerSecret: 'machine.sapcloud.io/machine-controller',
  /** On Nodes backed by a Machine. */
  MachineControllerNode: 'node.machine.sapcloud.io/machine-controller',
} as const;
export type Finalizer = ValueOf<typeof Finalizer>;

// ---------------------------------------------------------------------------------------------
// Taints
// ---------------------------------------------------------------------------------------------

export const TaintKey = {
  /** NoSchedule until the node's critical components run; blocks Pending → Running. */
  CriticalComponentsNotReady: 'node.gardener.cloud/critical-components-not-ready',
  /** PreferNoSchedule (value `True`) on nodes of old MachineSets during a rollout. */
  PreferNoSchedule: 'deployment.machine.sapcloud.io/prefer-no-schedule',
  /** NoSchedule on preserved failed nodes (instead of cordoning). */
  Preserved: 'node.machine.sapcloud.io/preserved',
  /**
   * NoSchedule on the node of a machine marked for replacement (value: why, the replacing
   * annotation's value: expired, rebalance-recommended, interrupted), from the moment it is marked,
   * so that no new pod lands on a node that is about to be drained. Removed if the mark is.
   */
  Disrupted: 'machine.mcm-ts.io/disrupted',
} as const;
export type TaintKey = ValueOf<typeof TaintKey>;

export const TaintEffect = {
  NoSchedule: 'NoSchedule',
  PreferNoSchedule: 'PreferNoSchedule',
  NoExecute: 'NoExecute',
} as const;
export type TaintEffect = ValueOf<typeof TaintEffect>;

/** Value of the prefer-no-schedule taint and annotation. */
export const PREFER_NO_SCHEDULE_VALUE = 'True';

// ---------------------------------------------------------------------------------------------
// Node conditions written by the machine controller
// ---------------------------------------------------------------------------------------------

export const NodeConditionType = {
  Terminating: 'Terminating',
  InPlaceUpdate: 'InPlaceUpdate',
  Preserved: 'Preserved',
  /**
   * True while the cloud recommends moving off the node's VM (an EC2 rebalance recommendation: its
   * Spot capacity is at elevated risk of interruption); the reason names the notice.
   */
  RebalanceRecommended: 'RebalanceRecommended',
} as const;
export type NodeConditionType = ValueOf<typeof NodeConditionType>;

/** Reasons of the `Terminating` node condition. */
export const TerminatingReason = {
  Unhealthy: 'Unhealthy',
  ScaleDown: 'ScaleDown',
} as const;
export type TerminatingReason = ValueOf<typeof TerminatingReason>;

/** Reasons of the `InPlaceUpdate` node condition, in protocol order. */
export const InPlaceUpdateReason = {
  CandidateForUpdate: 'CandidateForUpdate',
  SelectedForUpdate: 'SelectedForUpdate',
  DrainSuccessful: 'DrainSuccessful',
  ReadyForUpdate: 'ReadyForUpdate',
  UpdateSuccessful: 'UpdateSuccessful',
  UpdateFailed: 'UpdateFailed',
} as const;
export type InPlaceUpdateReason = ValueOf<typeof InPlaceUpdateReason>;

/** Reasons of the `Preserved` node condition (the trailing dots are part of the wire value). */
export const PreservedReason = {
  ByMCM: 'Preserved by MCM.',
  ByUser: 'Preserved by user.',
  Stopped: 'Preservation stopped.',
} as const;
export type PreservedReason = ValueOf<typeof PreservedReason>;

export const PreservedMessage = {
  DrainSuccessful: 'Preserved node drained successfully.',
  DrainUnsuccessful: 'Preserved node could not be drained.',
} as const;
export type PreservedMessage = ValueOf<typeof PreservedMessage>;

// ---------------------------------------------------------------------------------------------
// MachineSet / MachineDeployment conditions
// ---------------------------------------------------------------------------------------------

export const MachineSetConditionType = {
  ReplicaFailure: 'ReplicaFailure',
  Frozen: 'Frozen',
} as const;
export type MachineSetConditionType = ValueOf<typeof MachineSetConditionType>;

export const MachineDeploymentConditionType = {
  Available: 'Available',
  Progressing: 'Progressing',
  ReplicaFailure: 'ReplicaFailure',
  Frozen: 'Frozen',
  /** Ours: machines older than the expire-after annotation and their replacement (expiry-plan.ts). */
  Expiry: 'Expiry',
} as const;
export type MachineDeploymentConditionType = ValueOf<typeof MachineDeploymentConditionType>;

export const ConditionReason = {
  // ReplicaFailure
  FailedCreate: 'FailedCreate',
  FailedDelete: 'FailedDelete',
  // Progressing
  NewMachineSetCreated: 'NewMachineSetCreated',
  FoundNewMachineSet: 'FoundNewMachineSet',
  MachineSetUpdated: 'MachineSetUpdated',
  NewMachineSetAvailable: 'NewMachineSetAvailable',
  ProgressDeadlineExceeded: 'ProgressDeadlineExceeded',
  MachineSetCreateError: 'MachineSetCreateError',
  DeploymentPaused: 'DeploymentPaused',
  DeploymentResumed: 'DeploymentResumed',
  // Available
  MinimumReplicasAvailable: 'MinimumReplicasAvailable',
  MinimumReplicasUnavailable: 'MinimumReplicasUnavailable',
  // Frozen
  OverShootingReplicaCount: 'OverShootingReplicaCount',
  UnderShootingReplicaCount: 'UnderShootingReplicaCount',
  MachineDeploymentStateSync: 'MachineDeploymentStateSync',
  // Additions of this implementation (not in gardener MCM)
  /** ReplicaFailure: the spec cannot be acted on (it passed admission, e.g. stored before the CRD). */
  InvalidSpec: 'InvalidSpec',
  /**
   * Progressing=False: the InPlaceUpdate strategy cannot run here (no target cluster, so no node
   * to drain or update); machines scale but never roll.
   */
  InPlaceUpdateNotSupported: 'InPlaceUpdateNotSupported',
} as const;
export type ConditionReason = ValueOf<typeof ConditionReason>;

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

export const EventType = {
  Normal: 'Normal',
  Warning: 'Warning',
} as const;
export type EventType = ValueOf<typeof EventType>;

export const EventReason = {
  // MachineSet
  SuccessfulCreate: 'SuccessfulCreate',
  FailedCreate: 'FailedCreate',
  SuccessfulDelete: 'SuccessfulDelete',
  FailedDelete: 'FailedDelete',
  FrozeMachineSet: 'FrozeMachineSet',
  UnfrozeMachineSet: 'UnfrozeMachineSet',
  /** On a machine being replaced that a pod on its node keeps (an addition of this implementation). */
  DisruptionVetoed: 'DisruptionVetoed',
  // MachineDeployment
  ScalingMachineSet: 'ScalingMachineSet',
  MachineSetCreateError: 'MachineSetCreateError',
  SelectingAll: 'SelectingAll',
  DeploymentRollback: 'DeploymentRollback',
  DeploymentRollbackRevisionNotFound: 'DeploymentRollbackRevisionNotFound',
  DeploymentRollbackTemplateUnchanged: 'DeploymentRollbackTemplateUnchanged',
  // MachineDeployment, InPlaceUpdate (additions of this implementation; gardener MCM records none)
  SelectedForUpdate: 'SelectedForUpdate',
  UpdatedInPlace: 'UpdatedInPlace',
  InPlaceUpdateFailed: 'InPlaceUpdateFailed',
} as const;
export type EventReason = ValueOf<typeof EventReason>;

/** Component names events are recorded under. */
export const EventSource = {
  MachineControllerManager: 'machine-controller-manager',
  MachineSetController: 'machineset-controller',
  MachineDeploymentController: 'machinedeployment-controller',
  MachineController: 'machine-controller',
  /** The externalgrpc server: events about autoscaler annotations it refuses. */
  AutoscalerProvider: 'mcm-autoscaler-provider',
} as const;
export type EventSource = ValueOf<typeof EventSource>;

// ---------------------------------------------------------------------------------------------
// MachineDeployment strategy
// ---------------------------------------------------------------------------------------------

export const StrategyType = {
  Recreate: 'Recreate',
  RollingUpdate: 'RollingUpdate',
  InPlaceUpdate: 'InPlaceUpdate',
} as const;
export type StrategyType = ValueOf<typeof StrategyType>;

/**
 * The strategy of a MachineDeployment created without one (a CRD default). gardener MCM documents
 * RollingUpdate as the default type but defaults nothing, so such a deployment fails its
 * validation and is never reconciled there; the bounds are those gardener gives a worker pool
 * (maxSurge 1, maxUnavailable 0): replace one machine at a time, never below the replicas.
 */
export const DEFAULT_DEPLOYMENT_STRATEGY = {
  type: StrategyType.RollingUpdate,
  rollingUpdate: { maxSurge: 1, maxUnavailable: 0 },
} as const;

export const OrchestrationType = {
  Auto: 'Auto',
  Manual: 'Manual',
} as const;
export type OrchestrationType = ValueOf<typeof OrchestrationType>;

/** The only class kind the generic machine controller acts on. */
export const MACHINE_CLASS_KIND = 'MachineClass';
