import { parseGoDuration } from './api/duration.js';
import { parseNodeGroupFlag, type NodeGroupFlag } from './autoscaler/groups.js';
import { DEFAULT_GRPC_LIMITS } from './autoscaler/grpc.js';
import { SPOT_INTERRUPTION_NOTICE_MS } from './providers/aws/interruption/notices.js';
import { queueUrlProblem } from './providers/aws/interruption/queue.js';

/**
 * Command-line configuration of the manager. Flag names and defaults follow gardener MCM's
 * machine-controller-manager where it has the flag; additions are marked.
 */

export const CONTROLLER_NAMES = [
  'machineset',
  'machinedeployment',
  'safety',
  'machine',
  'node',
  'machineclass',
  'secret',
] as const;
export type ControllerName = (typeof CONTROLLER_NAMES)[number];

export interface ManagerConfig {
  /** Kubeconfig of the cluster holding the machine.sapcloud.io objects; '' = in-cluster/default. */
  controlKubeconfig: string;
  /** Kubeconfig of the cluster the nodes join; '' = same as control, 'none' = no target cluster. */
  targetKubeconfig: string;
  namespace: string;
  concurrentSyncs: number;
  minResyncPeriodMs: number;
  kubeApiQps: number;
  kubeApiBurst: number;
  safetyUp: number;
  safetyDown: number;
  machineSafetyOvershootingPeriodMs: number;
  autoscalerScaleDownAnnotationDuringRollout: boolean;
  leaderElect: boolean;
  leaderElectLeaseDurationMs: number;
  leaderElectRenewDeadlineMs: number;
  leaderElectRetryPeriodMs: number;
  leaderElectResourceLock: 'leases';
  /** Lease name (addition; MCM hard-codes it). */
  leaderElectResourceName: string;
  /**
   * The Lease gardener's provider machine-controller campaigns for (its default name). The leader
   * holds it too while it runs the machine controller, so the two never manage Machines at once;
   * '' holds none (addition).
   */
  machineControllerLeaseName: string;
  address: string;
  port: number;
  verbosity: number;
  /** Addition: json (default) or text. */
  logFormat: 'json' | 'text';
  /** Addition: which controllers run. */
  controllers: ControllerName[];
  // ---- machine controller (gardener's provider machine-controller flags) ----
  /** Addition: workers of the machine controller (the provider machine-controller's --concurrent-syncs, 50). */
  machineConcurrentSyncs: number;
  machineCreationTimeoutMs: number;
  machineHealthTimeoutMs: number;
  machineDrainTimeoutMs: number;
  machineInPlaceUpdateTimeoutMs: number;
  machineMaxEvictRetries: number;
  machinePvDetachTimeoutMs: number;
  machinePvReattachTimeoutMs: number;
  machineSafetyOrphanVmsPeriodMs: number;
  machineSafetyApiserverStatuscheckPeriodMs: number;
  machineSafetyApiserverStatuscheckTimeoutMs: number;
  machinePreserveTimeoutMs: number;
  nodeConditions: string[];
  bootstrapTokenAuthExtraGroups: string;
  resourceExhaustedRetryMs: number;
  /** --interruption-drain-lead (addition). */
  interruptionDrainLeadMs: number;
  /** --launch-failure-backoff (addition): the first wait after a failed launch of a class. */
  launchFailureBackoffMs: number;
  /** --launch-failure-max-backoff (addition): the longest. */
  launchFailureMaxBackoffMs: number;
  /** Addition: replacement budget per MachineDeployment, a count or a percentage. */
  maxUnhealthyReplacements: string;
  // ---- cluster-autoscaler externalgrpc server (additions) ----
  /** HOST:PORT of the gRPC server; '' = off. */
  grpcAddress: string;
  grpcTlsCertFile: string;
  grpcTlsKeyFile: string;
  grpcClientCaFile: string;
  /** Client certificate names (subject CN or DNS SAN) allowed to call; empty = any the client CA signed. */
  grpcClientAllowedNames: string[];
  /** Plaintext gRPC; only when asked for explicitly. */
  grpcInsecure: boolean;
  /** The gRPC transport's limits (GrpcServerLimits, whose fields these are). */
  grpcMaxConcurrentStreams: number;
  grpcMaxPendingRequestBytes: number;
  grpcRequestReadTimeoutMs: number;
  grpcKeepaliveMinTimeMs: number;
  grpcKeepalivePermitWithoutStream: boolean;
  grpcMaxConnectionIdleMs: number;
  grpcMaxConnectionAgeMs: number;
  grpcMaxConnectionAgeGraceMs: number;
  /** --nodes entries (gardener's autoscaler form). */
  nodeGroups: NodeGroupFlag[];
  autoscalerGpuLabel: string;
  autoscalerGpuTypes: string[];
  // ---- providers (addition) ----
  /** --provider-module values: out-of-tree provider modules loaded at start, in order. */
  providerModules: string[];
  // ---- AWS interruption notices (additions) ----
  /** The SQS queue URL EventBridge sends EC2 interruption events to; '' = none read. */
  awsInterruptionQueue: string;
  /** How long after a Spot interruption warning a node's drain may take (under two minutes). */
  awsInterruptionDrainTimeoutMs: number;
  /** A rebalance recommendation replaces the machine (surge first) instead of only being reported. */
  awsRebalanceAsInterruption: boolean;
  /** How long an offering stays unavailable after a capacity error (or an interruption, opted in); 0: never. */
  awsUnavailableOfferingTtlMs: number;
  /** A Spot interruption marks its instance's offering unavailable too. */
  awsUnavailableAfterInterruption: boolean;
  // ---- AWS instance health (additions) ----
  /** Between two polls of EC2's instance status checks; 0 = no poll. */
  awsInstanceStatusIntervalMs: number;
  /** How long an instance or system status check may be impaired before the machine is failed. */
  awsImpairedTimeoutMs: number;
}

export const defaultConfig: ManagerConfig = {
  controlKubeconfig: '',
  targetKubeconfig: '',
  namespace: 'default',
  concurrentSyncs: 10,
  minResyncPeriodMs: 12 * 3600_000,
  kubeApiQps: 20,
  kubeApiBurst: 30,
  safetyUp: 2,
  safetyDown: 1,
  machineSafetyOvershootingPeriodMs: 60_000,
  autoscalerScaleDownAnnotationDuringRollout: true,
  leaderElect: true,
  leaderElectLeaseDurationMs: 15_000,
  leaderElectRenewDeadlineMs: 10_000,
  leaderElectRetryPeriodMs: 2_000,
  leaderElectResourceLock: 'leases',
  leaderElectResourceName: 'machine-controller-manager',
  machineControllerLeaseName: 'machine-controller',
  address: '0.0.0.0',
  port: 10258,
  verbosity: 2,
  logFormat: 'json',
  controllers: [...CONTROLLER_NAMES],
  machineConcurrentSyncs: 50,
  machineCreationTimeoutMs: 20 * 60_000,
  machineHealthTimeoutMs: 10 * 60_000,
  machineDrainTimeoutMs: 2 * 3_600_000,
  machineInPlaceUpdateTimeoutMs: 20 * 60_000,
  machineMaxEvictRetries: 360,
  machinePvDetachTimeoutMs: 2 * 60_000,
  machinePvReattachTimeoutMs: 90_000,
  machineSafetyOrphanVmsPeriodMs: 15 * 60_000,
  machineSafetyApiserverStatuscheckPeriodMs: 60_000,
  machineSafetyApiserverStatuscheckTimeoutMs: 30_000,
  machinePreserveTimeoutMs: 96 * 3_600_000,
  nodeConditions: ['KernelDeadlock', 'ReadonlyFilesystem', 'DiskPressure', 'NetworkUnavailable'],
  bootstrapTokenAuthExtraGroups: '',
  resourceExhaustedRetryMs: 10 * 60_000,
  interruptionDrainLeadMs: 30_000,
  launchFailureBackoffMs: 30_000,
  launchFailureMaxBackoffMs: 5 * 60_000,
  maxUnhealthyReplacements: '1',
  grpcAddress: '',
  grpcTlsCertFile: '',
  grpcTlsKeyFile: '',
  grpcClientCaFile: '',
  grpcClientAllowedNames: [],
  grpcInsecure: false,
  grpcMaxConcurrentStreams: DEFAULT_GRPC_LIMITS.maxConcurrentStreams,
  grpcMaxPendingRequestBytes: DEFAULT_GRPC_LIMITS.maxPendingRequestBytes,
  grpcRequestReadTimeoutMs: DEFAULT_GRPC_LIMITS.requestReadTimeoutMs,
  grpcKeepaliveMinTimeMs: DEFAULT_GRPC_LIMITS.keepaliveMinTimeMs,
  grpcKeepalivePermitWithoutStream: DEFAULT_GRPC_LIMITS.keepalivePermitWithoutStream,
  grpcMaxConnectionIdleMs: DEFAULT_GRPC_LIMITS.maxConnectionIdleMs,
  grpcMaxConnectionAgeMs: DEFAULT_GRPC_LIMITS.maxConnectionAgeMs,
  grpcMaxConnectionAgeGraceMs: DEFAULT_GRPC_LIMITS.maxConnectionAgeGraceMs,
  nodeGroups: [],
  autoscalerGpuLabel: '',
  autoscalerGpuTypes: [],
  providerModules: [],
  awsInterruptionQueue: '',
  awsInterruptionDrainTimeoutMs: 90_000,
  awsRebalanceAsInterruption: false,
  awsUnavailableOfferingTtlMs: 180_000,
  awsUnavailableAfterInterruption: false,
  awsInstanceStatusIntervalMs: 60_000,
  awsImpairedTimeoutMs: 5 * 60_000,
};

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses a Go duration ("90s", "1h30m", "500ms", "0") to milliseconds. */
export function parseDuration(s: string): number {
  let ms: number;
  try {
    ms = parseGoDuration(s);
  } catch (err) {
    throw new ConfigError(err instanceof Error ? err.message : String(err));
  }
  if (ms < 0) throw new ConfigError(`invalid duration "${s}": must not be negative`);
  return ms;
}

/** A duration that must be above 0. */
function positiveDuration(name: string, v: string): number {
  const ms = parseDuration(v);
  if (ms <= 0) throw new ConfigError(`--${name}: must be above 0, got "${v}"`);
  return ms;
}

function parseBool(name: string, v: string): boolean {
  if (v === 'true' || v === '1' || v === 'True') return true;
  if (v === 'false' || v === '0' || v === 'False') return false;
  throw new ConfigError(`--${name}: expected true or false, got "${v}"`);
}

function parseNumber(name: string, v: string, opts: { min?: number; integer?: boolean } = {}): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n))
    throw new ConfigError(`--${name}: expected a number, got "${v}"`);
  if (opts.integer === true && !Number.isInteger(n))
    throw new ConfigError(`--${name}: expected an integer, got "${v}"`);
  if (opts.min !== undefined && n < opts.min)
    throw new ConfigError(`--${name}: must be >= ${opts.min}, got ${v}`);
  return n;
}

/** A comma-separated list of certificate names: no empty entry, no pattern, no control character. */
function parseAllowedNames(name: string, v: string): string[] {
  if (v.trim() === '') return [];
  const names = v.split(',').map((x) => x.trim());
  for (const n of names) {
    if (n === '') throw new ConfigError(`--${name}: empty name in "${v}" (a comma too many?)`);
    if (n.includes('*'))
      throw new ConfigError(`--${name}: "${n}" is a pattern; names match exactly, list each one`);
    // eslint-disable-next-line no-control-regex
    if (/[\x00-\x1f\x7f]/.test(n))
      throw new ConfigError(`--${name}: ${JSON.stringify(n)} holds a control character`);
  }
  return [...new Set(names)];
}

type Setter = (c: ManagerConfig, v: string, name: string) => void;

const flags: Record<string, { help: string; set: Setter; boolean?: true }> = {
  'control-kubeconfig': {
    help: 'kubeconfig of the cluster with the Machine objects (default: in-cluster or $KUBECONFIG)',
    set: (c, v) => (c.controlKubeconfig = v),
  },
  'target-kubeconfig': {
    help: "kubeconfig of the cluster nodes join (default: the control cluster; 'none' for no target cluster)",
    set: (c, v) => (c.targetKubeconfig = v),
  },
  namespace: { help: 'namespace of the machine objects to manage', set: (c, v) => (c.namespace = v) },
  'concurrent-syncs': {
    help: 'workers per controller',
    set: (c, v, n) => (c.concurrentSyncs = parseNumber(n, v, { min: 1, integer: true })),
  },
  'min-resync-period': {
    help: 'informer resync period',
    set: (c, v) => (c.minResyncPeriodMs = parseDuration(v)),
  },
  'kube-api-qps': {
    help: 'sustained requests per second per client (machine API, other control-cluster APIs, target cluster)',
    set: (c, v, n) => (c.kubeApiQps = parseNumber(n, v, { min: Number.MIN_VALUE })),
  },
  'kube-api-burst': {
    help: 'request burst per client',
    set: (c, v, n) => (c.kubeApiBurst = parseNumber(n, v, { min: 1, integer: true })),
  },
  'safety-up': {
    help: 'machines over the limit that freeze a MachineSet',
    set: (c, v, n) => (c.safetyUp = parseNumber(n, v, { min: 0, integer: true })),
  },
  'safety-down': {
    help: 'machines under the freeze limit that unfreeze it',
    set: (c, v, n) => (c.safetyDown = parseNumber(n, v, { min: 0, integer: true })),
  },
  'machine-safety-overshooting-period': {
    help: 'how often every MachineSet is checked for overshooting',
    set: (c, v) => (c.machineSafetyOvershootingPeriodMs = parseDuration(v)),
  },
  'autoscaler-scaledown-annotation-during-rollout': {
    help: 'protect nodes from cluster-autoscaler scale-down during rollouts',
    set: (c, v, n) => (c.autoscalerScaleDownAnnotationDuringRollout = parseBool(n, v)),
    boolean: true,
  },
  'leader-elect': {
    help: 'run leader election (needed with more than one replica)',
    set: (c, v, n) => (c.leaderElect = parseBool(n, v)),
    boolean: true,
  },
  'leader-elect-lease-duration': {
    help: 'how long followers wait before taking over a lease',
    set: (c, v) => (c.leaderElectLeaseDurationMs = parseDuration(v)),
  },
  'leader-elect-renew-deadline': {
    help: 'how long the leader retries renewing before giving up',
    set: (c, v) => (c.leaderElectRenewDeadlineMs = parseDuration(v)),
  },
  'leader-elect-retry-period': {
    help: 'time between lease acquire/renew attempts',
    set: (c, v) => (c.leaderElectRetryPeriodMs = parseDuration(v)),
  },
  'leader-elect-resource-lock': {
    help: "lock type; only 'leases' is supported",
    set: (c, v, n) => {
      if (v !== 'leases') throw new ConfigError(`--${n}: only "leases" is supported, got "${v}"`);
      c.leaderElectResourceLock = 'leases';
    },
  },
  'leader-elect-resource-name': {
    help: 'name of the Lease (in --namespace)',
    set: (c, v) => (c.leaderElectResourceName = v),
  },
  'machine-controller-lease-name': {
    help: "with --leader-elect and the machine controller: the leader also holds this Lease (gardener's provider machine-controller's) before its controllers start, so a gardener machine-controller beside it and our machine controller never both run ('' holds none)",
    set: (c, v) => (c.machineControllerLeaseName = v),
  },
  address: { help: 'bind address of the metrics/health HTTP server', set: (c, v) => (c.address = v) },
  port: {
    help: 'port of the metrics/health HTTP server (0: any free port)',
    set: (c, v, n) => (c.port = parseNumber(n, v, { min: 0, integer: true })),
  },
  v: {
    help: 'log verbosity (klog levels: 3 verbose, 4 debug, 5 trace)',
    set: (c, v, n) => (c.verbosity = parseNumber(n, v, { min: 0, integer: true })),
  },
  'log-format': {
    help: 'json or text',
    set: (c, v, n) => {
      if (v !== 'json' && v !== 'text') throw new ConfigError(`--${n}: expected json or text, got "${v}"`);
      c.logFormat = v;
    },
  },
  controllers: {
    help: `comma-separated controllers to run (${CONTROLLER_NAMES.join(', ')}; * for all)`,
    set: (c, v, n) => {
      if (v === '*') {
        c.controllers = [...CONTROLLER_NAMES];
        return;
      }
      const names = v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');
      for (const name of names) {
        if (!(CONTROLLER_NAMES as readonly string[]).includes(name)) {
          throw new ConfigError(
            `--${n}: unknown controller "${name}" (known: ${CONTROLLER_NAMES.join(', ')})`,
          );
        }
      }
      c.controllers = names as ControllerName[];
    },
  },
  'machine-concurrent-syncs': {
    help: 'workers of the machine controller (the provider machine-controller default, 50)',
    set: (c, v, n) => (c.machineConcurrentSyncs = parseNumber(n, v, { min: 1, integer: true })),
  },
  'machine-creation-timeout': {
    help: 'how long a new machine may take to join before it is marked Failed',
    set: (c, v) => (c.machineCreationTimeoutMs = parseDuration(v)),
  },
  'machine-health-timeout': {
    help: 'how long a machine may be unhealthy (Unknown) before it is marked Failed and replaced',
    set: (c, v) => (c.machineHealthTimeoutMs = parseDuration(v)),
  },
  'machine-drain-timeout': {
    help: 'how long a node is drained before its machine is deleted anyway',
    set: (c, v) => (c.machineDrainTimeoutMs = parseDuration(v)),
  },
  'machine-inplace-update-timeout': {
    help: 'how long an in-place update may take',
    set: (c, v) => (c.machineInPlaceUpdateTimeoutMs = parseDuration(v)),
  },
  'machine-max-evict-retries': {
    help: 'eviction attempts of a pod blocked by a PodDisruptionBudget before it is deleted',
    set: (c, v, n) => (c.machineMaxEvictRetries = parseNumber(n, v, { min: 0, integer: true })),
  },
  'machine-pv-detach-timeout': {
    help: 'how long a drained pod’s volumes may take to detach',
    set: (c, v) => (c.machinePvDetachTimeoutMs = parseDuration(v)),
  },
  'machine-pv-reattach-timeout': {
    help: 'how long to wait for a drained pod’s volumes to attach elsewhere',
    set: (c, v) => (c.machinePvReattachTimeoutMs = parseDuration(v)),
  },
  'machine-safety-orphan-vms-period': {
    help: 'how often VMs without machines are collected',
    set: (c, v) => (c.machineSafetyOrphanVmsPeriodMs = parseDuration(v)),
  },
  'machine-safety-apiserver-statuscheck-period': {
    help: 'how often the API servers are probed for the freeze safety check',
    set: (c, v) => (c.machineSafetyApiserverStatuscheckPeriodMs = parseDuration(v)),
  },
  'machine-safety-apiserver-statuscheck-timeout': {
    help: 'how long an API server may be unreachable before machine reconciliation freezes',
    set: (c, v) => (c.machineSafetyApiserverStatuscheckTimeoutMs = parseDuration(v)),
  },
  'machine-preserve-timeout': {
    help: 'how long a preserved machine is kept',
    set: (c, v) => (c.machinePreserveTimeoutMs = parseDuration(v)),
  },
  'node-conditions': {
    help: 'node condition types that make a node unhealthy when not False (comma-separated)',
    set: (c, v) =>
      (c.nodeConditions = v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '')),
  },
  'bootstrap-token-auth-extra-groups': {
    help: 'extra groups of the bootstrap tokens new nodes join with (comma-separated)',
    set: (c, v) => (c.bootstrapTokenAuthExtraGroups = v),
  },
  'resource-exhausted-retry': {
    help: 'retry period of a creation that failed for lack of cloud capacity (0 means 10m)',
    set: (c, v) => (c.resourceExhaustedRetryMs = parseDuration(v)),
  },
  'interruption-drain-lead': {
    help: "an interrupted machine (its VM about to go) is deleted, and its node's drain starts, once its replacement is available, or this long before its interruption deadline if the replacement is not available by then (0: at the deadline)",
    set: (c, v) => (c.interruptionDrainLeadMs = parseDuration(v)),
  },
  'launch-failure-backoff': {
    help: 'after a launch of a class fails (its VM stopped, ended or failed before its node joined), the next launch of that class waits this long, doubling with each failure in a row up to --launch-failure-max-backoff; the machines waiting report a creation error to the autoscaler (0: no back-off)',
    set: (c, v) => (c.launchFailureBackoffMs = parseDuration(v)),
  },
  'launch-failure-max-backoff': {
    help: 'the longest wait between launches of a class whose launches keep failing',
    set: (c, v) => (c.launchFailureMaxBackoffMs = parseDuration(v)),
  },
  'max-unhealthy-replacements': {
    help: 'machines of one MachineDeployment in replacement at once before another unhealthy machine is marked Failed: a count or a percentage of replicas (MCM: always 1); the annotation mcm-ts.io/max-unhealthy-replacements overrides it per deployment',
    set: (c, v, n) => {
      if (!/^\d+%?$/.test(v.trim()))
        throw new ConfigError(`--${n}: expected a count or a percentage such as 2 or 10%, got "${v}"`);
      c.maxUnhealthyReplacements = v.trim();
    },
  },
  'grpc-address': {
    help: 'HOST:PORT of the cluster-autoscaler externalgrpc server (empty: no server); mutual TLS unless --grpc-insecure',
    set: (c, v) => (c.grpcAddress = v.trim()),
  },
  'grpc-tls-cert-file': {
    help: 'PEM certificate of the gRPC server (its SAN must match the host in the autoscaler cloud-config address)',
    set: (c, v) => (c.grpcTlsCertFile = v),
  },
  'grpc-tls-key-file': { help: 'PEM private key of the gRPC server', set: (c, v) => (c.grpcTlsKeyFile = v) },
  'grpc-client-ca-file': {
    help: 'PEM CA bundle that signs the autoscaler client certificates (client certificates are required)',
    set: (c, v) => (c.grpcClientCaFile = v),
  },
  'grpc-client-allowed-names': {
    help: 'comma-separated names a client certificate must carry, as its subject common name or a DNS subject alternative name (exact match), to call the CloudProvider service; others get PERMISSION_DENIED (empty: any certificate the client CA signed)',
    set: (c, v, n) => (c.grpcClientAllowedNames = parseAllowedNames(n, v)),
  },
  'grpc-insecure': {
    help: 'serve gRPC in plaintext without client authentication (local development only)',
    set: (c, v, n) => (c.grpcInsecure = parseBool(n, v)),
    boolean: true,
  },
  'grpc-max-concurrent-streams': {
    help: 'streams one gRPC connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with REFUSED_STREAM',
    set: (c, v, n) => (c.grpcMaxConcurrentStreams = parseNumber(n, v, { min: 1, integer: true })),
  },
  'grpc-max-pending-request-bytes': {
    help: 'bytes all gRPC requests not yet complete may hold together, each open stream counted as 10 KiB besides its bytes; a request that would go beyond is answered RESOURCE_EXHAUSTED, unless its connection holds less than its share (the cap over the connections, at most 64 KiB); each request is also capped at 4 MiB',
    set: (c, v, n) =>
      (c.grpcMaxPendingRequestBytes = parseNumber(n, v, { min: 4 * 1024 * 1024 + 5, integer: true })),
  },
  'grpc-request-read-timeout': {
    help: 'how long a gRPC request without grpc-timeout may take from its headers to its last byte before it is answered DEADLINE_EXCEEDED (a request with grpc-timeout has its deadline counted from its headers)',
    set: (c, v, n) => (c.grpcRequestReadTimeoutMs = positiveDuration(n, v)),
  },
  'grpc-keepalive-min-time': {
    help: "keepalive enforcement: a client ping sooner than this after its last one, with no answer sent between, is a strike; the third closes the connection with GOAWAY ENHANCE_YOUR_CALM (grpc-go's default)",
    set: (c, v) => (c.grpcKeepaliveMinTimeMs = parseDuration(v)),
  },
  'grpc-keepalive-permit-without-stream': {
    help: 'allow client keepalive pings on a connection without calls (else they must be 2 hours apart, as grpc-go)',
    set: (c, v, n) => (c.grpcKeepalivePermitWithoutStream = parseBool(n, v)),
    boolean: true,
  },
  'grpc-max-connection-idle': {
    help: 'a gRPC connection without calls for this long is told to go away (GOAWAY); 0: never',
    set: (c, v) => (c.grpcMaxConnectionIdleMs = parseDuration(v)),
  },
  'grpc-max-connection-age': {
    help: 'a gRPC connection this old (±10 %) is told to go away, so clients reconnect (and pick up a rotated certificate); 0: never',
    set: (c, v) => (c.grpcMaxConnectionAgeMs = parseDuration(v)),
  },
  'grpc-max-connection-age-grace': {
    help: 'after --grpc-max-connection-age, how long the calls under way may finish before the connection is closed',
    set: (c, v) => (c.grpcMaxConnectionAgeGraceMs = parseDuration(v)),
  },
  nodes: {
    help: 'a node group, MIN:MAX:NAMESPACE.NAME of a MachineDeployment (repeatable); the annotations autoscaler.mcm-ts.io/min-size and max-size also make a deployment a group and override these limits',
    set: (c, v, n) => {
      try {
        c.nodeGroups.push(parseNodeGroupFlag(v.trim()));
      } catch (err) {
        throw new ConfigError(`--${n}: ${err instanceof Error ? err.message : String(err)}`);
      }
    },
  },
  'provider-module': {
    help: 'an out-of-tree provider module to load (an npm package installed beside the manager, or a path to a file or package directory; repeatable): it registers drivers by MachineClass.provider name (docs/writing-a-provider.md)',
    set: (c, v, n) => {
      if (v.trim() === '') throw new ConfigError(`--${n} needs a module name or path`);
      c.providerModules.push(v.trim());
    },
  },
  'aws-interruption-queue': {
    help: 'URL of the SQS queue EventBridge sends EC2 interruption events to (Spot interruption warnings, rebalance recommendations, instance state changes, AWS Health scheduled changes); the leader reads it and replaces the machines concerned (docs/spot-interruptions.md). Empty: none',
    set: (c, v, n) => {
      const url = v.trim();
      const problem = url === '' ? undefined : queueUrlProblem(url);
      if (problem !== undefined) throw new ConfigError(`--${n}: ${problem}`);
      c.awsInterruptionQueue = url;
    },
  },
  'aws-interruption-drain-timeout': {
    help: "how long after a Spot interruption warning the node's drain may take; pods still there are then deleted without eviction, and the rest of EC2's two minutes is for deleting the instance (a scheduled change's drain ends as long before its start)",
    set: (c, v, n) => {
      const ms = parseDuration(v);
      if (ms <= 0 || ms >= SPOT_INTERRUPTION_NOTICE_MS)
        throw new ConfigError(`--${n}: must be more than 0 and less than 2m (EC2's notice), got "${v}"`);
      c.awsInterruptionDrainTimeoutMs = ms;
    },
  },
  'aws-rebalance-as-interruption': {
    help: 'an EC2 rebalance recommendation replaces the machine, surge first (without it: a RebalanceRecommended node condition and an event only)',
    set: (c, v, n) => (c.awsRebalanceAsInterruption = parseBool(n, v)),
    boolean: true,
  },
  'aws-unavailable-offering-ttl': {
    help: 'how long an offering (market, instance type, subnet) is unavailable after RunInstances answered a capacity error for it (InsufficientInstanceCapacity, the Spot capacity codes): its launches fail with ResourceExhausted without calling EC2, retried when the mark ends, and the autoscaler backs the group off and scales another (0: never marked; docs/spot-interruptions.md)',
    set: (c, v) => {
      c.awsUnavailableOfferingTtlMs = parseDuration(v);
    },
  },
  'aws-unavailable-after-interruption': {
    help: "a Spot interruption warning also marks its instance's offering unavailable for --aws-unavailable-offering-ttl, so the replacement is not launched into the pool being reclaimed (it waits for the mark to end, or the autoscaler scales another group); without it the replacement is launched at once and only EC2's capacity answer marks the offering",
    set: (c, v, n) => (c.awsUnavailableAfterInterruption = parseBool(n, v)),
    boolean: true,
  },
  'aws-instance-status-interval': {
    help: "how often the leader polls EC2's instance status checks (DescribeInstanceStatus) of the regions and credentials of its AWS classes, with or without an interruption queue; 0 turns the poll off (docs/spot-interruptions.md)",
    set: (c, v) => (c.awsInstanceStatusIntervalMs = parseDuration(v)),
  },
  'aws-impaired-timeout': {
    help: "how long an instance's EC2 instance or system status check may be impaired (since EC2's ImpairedSince, else since the poll first saw it) before its machine is marked Failed and replaced",
    set: (c, v, n) => {
      const ms = parseDuration(v);
      if (ms <= 0) throw new ConfigError(`--${n}: must be more than 0, got "${v}"`);
      c.awsImpairedTimeoutMs = ms;
    },
  },
  'autoscaler-gpu-label': {
    help: 'node label the autoscaler treats as the GPU type label (GPULabel; empty: none)',
    set: (c, v) => (c.autoscalerGpuLabel = v.trim()),
  },
  'autoscaler-gpu-types': {
    help: 'GPU types reported by GetAvailableGPUTypes (comma-separated)',
    set: (c, v) =>
      (c.autoscalerGpuTypes = v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '')),
  },
};

/** Flags accepted for compatibility with gardener MCM deployments; they have no effect here. */
const ignoredFlags = new Set([
  'kube-api-content-type',
  'profiling',
  'contention-profiling',
  'cloud-provider',
  'controller-start-interval',
]);

/** --help sections, in order; a flag not listed here appears under "Other". */
const FLAG_GROUPS: [string, string[]][] = [
  ['Clusters', ['control-kubeconfig', 'target-kubeconfig', 'namespace', 'kube-api-qps', 'kube-api-burst']],
  [
    'Controllers',
    ['controllers', 'concurrent-syncs', 'machine-concurrent-syncs', 'min-resync-period', 'provider-module'],
  ],
  [
    'Leader election (needed with more than one replica)',
    [
      'leader-elect',
      'leader-elect-lease-duration',
      'leader-elect-renew-deadline',
      'leader-elect-retry-period',
      'leader-elect-resource-lock',
      'leader-elect-resource-name',
      'machine-controller-lease-name',
    ],
  ],
  [
    'MachineSets and MachineDeployments',
    [
      'safety-up',
      'safety-down',
      'machine-safety-overshooting-period',
      'autoscaler-scaledown-annotation-during-rollout',
    ],
  ],
  [
    'Machines (a machine spec overrides the timeouts)',
    [
      'machine-creation-timeout',
      'machine-health-timeout',
      'max-unhealthy-replacements',
      'node-conditions',
      'resource-exhausted-retry',
      'launch-failure-backoff',
      'launch-failure-max-backoff',
      'interruption-drain-lead',
      'bootstrap-token-auth-extra-groups',
      'machine-inplace-update-timeout',
      'machine-preserve-timeout',
    ],
  ],
  [
    'Drain',
    [
      'machine-drain-timeout',
      'machine-max-evict-retries',
      'machine-pv-detach-timeout',
      'machine-pv-reattach-timeout',
    ],
  ],
  [
    'Provider-side safety',
    [
      'machine-safety-orphan-vms-period',
      'machine-safety-apiserver-statuscheck-period',
      'machine-safety-apiserver-statuscheck-timeout',
    ],
  ],
  [
    'cluster-autoscaler externalgrpc server',
    [
      'grpc-address',
      'grpc-tls-cert-file',
      'grpc-tls-key-file',
      'grpc-client-ca-file',
      'grpc-client-allowed-names',
      'grpc-insecure',
      'grpc-max-concurrent-streams',
      'grpc-max-pending-request-bytes',
      'grpc-request-read-timeout',
      'grpc-keepalive-min-time',
      'grpc-keepalive-permit-without-stream',
      'grpc-max-connection-idle',
      'grpc-max-connection-age',
      'grpc-max-connection-age-grace',
      'nodes',
      'autoscaler-gpu-label',
      'autoscaler-gpu-types',
    ],
  ],
  [
    'AWS interruption notices and capacity',
    [
      'aws-interruption-queue',
      'aws-interruption-drain-timeout',
      'aws-rebalance-as-interruption',
      'aws-unavailable-offering-ttl',
      'aws-unavailable-after-interruption',
    ],
  ],
  ['AWS instance health', ['aws-instance-status-interval', 'aws-impaired-timeout']],
  ['Metrics, health and logs', ['address', 'port', 'v', 'log-format']],
];

export function usage(): string {
  const lines = ['Usage: machine-controller-manager [flags]'];
  const listed = new Set<string>();
  const section = (title: string, names: string[]): void => {
    const present = names.filter((n) => flags[n] !== undefined);
    if (present.length === 0) return;
    lines.push('', `${title}:`);
    for (const name of present) {
      const f = flags[name];
      if (f === undefined) continue;
      listed.add(name);
      lines.push(`  --${name}${f.boolean === true ? '[=true|false]' : '=value'}\n      ${f.help}`);
    }
  };
  for (const [title, names] of FLAG_GROUPS) section(title, names);
  section(
    'Other',
    Object.keys(flags).filter((n) => !listed.has(n)),
  );
  lines.push(
    '',
    `Accepted and ignored for MCM compatibility: ${[...ignoredFlags].map((f) => `--${f}`).join(', ')}`,
    'Durations use Go syntax (90s, 10m, 1h30m). Bad values stop the start with a message naming the flag.',
  );
  return lines.join('\n');
}

/** Parses argv (without node and script) into a validated configuration. */
export function parseArgs(argv: readonly string[]): ManagerConfig | 'help' {
  const c: ManagerConfig = {
    ...defaultConfig,
    controllers: [...defaultConfig.controllers],
    nodeGroups: [],
    autoscalerGpuTypes: [],
    grpcClientAllowedNames: [],
    providerModules: [],
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--help' || arg === '-h') return 'help';
    if (!arg.startsWith('-')) throw new ConfigError(`unexpected argument "${arg}"`);
    const body = arg.replace(/^--?/, '');
    const eq = body.indexOf('=');
    const name = eq >= 0 ? body.slice(0, eq) : body;
    let value = eq >= 0 ? body.slice(eq + 1) : undefined;
    const spec = flags[name];
    if (spec === undefined) {
      if (ignoredFlags.has(name)) {
        if (value === undefined && argv[i + 1] !== undefined && !(argv[i + 1] ?? '').startsWith('-')) i++;
        continue;
      }
      throw new ConfigError(`unknown flag --${name} (see --help)`);
    }
    if (value === undefined) {
      if (spec.boolean === true) value = 'true';
      else {
        const next = argv[i + 1];
        if (next === undefined) throw new ConfigError(`flag --${name} needs a value`);
        value = next;
        i++;
      }
    }
    spec.set(c, value, name);
  }
  validate(c);
  return c;
}

export function validate(c: ManagerConfig): void {
  if (c.port > 65535) throw new ConfigError(`--port must be 0..65535, got ${c.port}`);
  if (c.targetKubeconfig === 'none' && c.controlKubeconfig === '') {
    throw new ConfigError('--control-kubeconfig is required when --target-kubeconfig=none');
  }
  if (c.leaderElect) {
    if (c.leaderElectLeaseDurationMs <= c.leaderElectRenewDeadlineMs) {
      throw new ConfigError(
        '--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline',
      );
    }
    if (c.leaderElectRenewDeadlineMs <= c.leaderElectRetryPeriodMs * 1.2) {
      throw new ConfigError(
        '--leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period',
      );
    }
  }
  if (c.controllers.length === 0) throw new ConfigError('--controllers: at least one controller must run');
  if (c.machineSafetyApiserverStatuscheckPeriodMs < c.machineSafetyApiserverStatuscheckTimeoutMs) {
    throw new ConfigError(
      '--machine-safety-apiserver-statuscheck-period must be at least --machine-safety-apiserver-statuscheck-timeout',
    );
  }
  if (
    c.targetKubeconfig === 'none' &&
    c.controllers.includes('node') &&
    c.controllers.length !== CONTROLLER_NAMES.length
  ) {
    throw new ConfigError(
      '--controllers: the node controller needs a target cluster (--target-kubeconfig is none)',
    );
  }
  validateGrpc(c);
}

const HOST_PORT = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/;

function validateGrpc(c: ManagerConfig): void {
  if (c.grpcAddress === '') {
    if (c.nodeGroups.length > 0)
      throw new ConfigError('--nodes needs --grpc-address (the node groups are served over gRPC)');
    return;
  }
  const m = HOST_PORT.exec(c.grpcAddress);
  if (m === null || Number(m[2]) > 65535) {
    throw new ConfigError(
      `--grpc-address: expected HOST:PORT such as 0.0.0.0:8086 or [::1]:8086, got "${c.grpcAddress}"`,
    );
  }
  const tls = {
    'grpc-tls-cert-file': c.grpcTlsCertFile,
    'grpc-tls-key-file': c.grpcTlsKeyFile,
    'grpc-client-ca-file': c.grpcClientCaFile,
  };
  const given = Object.entries(tls).filter(([, v]) => v !== '');
  if (c.grpcInsecure && c.grpcClientAllowedNames.length > 0) {
    throw new ConfigError(
      '--grpc-client-allowed-names needs mutual TLS (it matches client certificates): drop --grpc-insecure',
    );
  }
  if (c.grpcInsecure && given.length > 0) {
    throw new ConfigError(
      `--grpc-insecure contradicts ${given.map(([k]) => `--${k}`).join(', ')}: drop --grpc-insecure to serve mutual TLS`,
    );
  }
  if (!c.grpcInsecure && given.length < 3) {
    const missing = Object.entries(tls)
      .filter(([, v]) => v === '')
      .map(([k]) => `--${k}`);
    throw new ConfigError(
      `--grpc-address serves mutual TLS and needs ${missing.join(', ')} (or --grpc-insecure for plaintext in local development)`,
    );
  }
  if (c.targetKubeconfig === 'none') {
    throw new ConfigError(
      '--grpc-address needs a target cluster: the autoscaler works on its Nodes (--target-kubeconfig is none)',
    );
  }
  const seen = new Set<string>();
  for (const g of c.nodeGroups) {
    const id = `${g.namespace}/${g.name}`;
    if (g.namespace !== c.namespace) {
      throw new ConfigError(
        `--nodes ${g.min}:${g.max}:${g.namespace}.${g.name}: namespace ${g.namespace} is not --namespace (${c.namespace})`,
      );
    }
    if (seen.has(id)) throw new ConfigError(`--nodes: ${id} is given twice`);
    seen.add(id);
  }
}
