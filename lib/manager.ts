import type { Registry } from 'prom-client';

import { EventSource } from './api/constants.js';
import { MachineDeploymentResource } from './api/types.js';
import { AutoscalerServer } from './autoscaler/server.js';
import { discoverGroups } from './autoscaler/groups.js';
import type { ManagerConfig } from './config.js';
import { SharedInformers, type ControllerContext } from './controllers/context.js';
import { MachineController } from './controllers/machine/controller.js';
import type { MachineControllerSettings } from './controllers/machine/settings.js';
import { MachineClassController } from './controllers/machineclass/controller.js';
import { MachineDeploymentController } from './controllers/machinedeployment/controller.js';
import { MachineSetController } from './controllers/machineset/controller.js';
import { NodeController } from './controllers/node/controller.js';
import { VmNoticeHandler } from './controllers/notices/handler.js';
import { OvershootSafetyController } from './controllers/safety/overshoot.js';
import { ProviderSafety } from './controllers/safety/provider.js';
import { SecretController } from './controllers/secret/controller.js';
import { loadProviderModules } from './driver/module.js';
import { ProviderRegistry } from './driver/registry.js';
import { KubeClient, type KubeApi } from './kube/client.js';
import { KubeConfig, type KubeConfigSource } from './kube/kubeconfig.js';
import { RealClock, type Clock } from './kube/clock.js';
import { NotFoundError, errorMessage, isTransient } from './kube/errors.js';
import { KubeEventRecorder, type EventRecorder } from './kube/events.js';
import { LeaseFence } from './kube/fence.js';
import { Leadership } from './leadership.js';
import { ObservabilityServer, readiness } from './observability/http.js';
import type { Logger } from './observability/logger.js';
import { newRegistry } from './observability/metrics.js';
import {
  AWS_PROVIDER,
  AWS_PROVIDER_ID_PREFIX,
  awsProvider,
  type AwsInterruptionOptions,
} from './providers/aws/index.js';
import type { InstanceHealthSettings } from './providers/aws/health/poller.js';
import type { PollerHooks } from './providers/aws/interruption/poller.js';
import { VIRTUAL_PROVIDER, VIRTUAL_PROVIDER_ID_PREFIX, virtualProvider } from './providers/virtual/index.js';

/** Test seams of the providers defaultProviders builds; production leaves them unset. */
export interface ProviderSeams {
  /** Called by the AWS interruption queue's reader at its two seams (see PollerHooks). */
  awsInterruptionHooks?: PollerHooks | undefined;
}

/**
 * The providers this build serves: the built-in virtual (simulated) cloud and AWS EC2 (with the
 * interruption queue of the configuration, when it names one, its unavailable-offering TTL and
 * its instance status poll).
 */
export function defaultProviders(config?: ManagerConfig, seams: ProviderSeams = {}): ProviderRegistry {
  const interruption = awsInterruptionOptions(config);
  const hooks = seams.awsInterruptionHooks;
  return new ProviderRegistry()
    .register(VIRTUAL_PROVIDER, virtualProvider(), { providerIDPrefix: VIRTUAL_PROVIDER_ID_PREFIX })
    .register(
      AWS_PROVIDER,
      awsProvider({
        interruption:
          interruption === undefined || hooks === undefined ? interruption : { ...interruption, hooks },
        health: awsHealthSettings(config),
        ...(config === undefined
          ? {}
          : {
              unavailableOfferingTtlMs: config.awsUnavailableOfferingTtlMs,
              unavailableAfterInterruption: config.awsUnavailableAfterInterruption,
            }),
      }),
      { providerIDPrefix: AWS_PROVIDER_ID_PREFIX },
    );
}

/** The AWS instance status poll the configuration asks for (none without a configuration). */
export function awsHealthSettings(config: ManagerConfig | undefined): InstanceHealthSettings | undefined {
  if (config === undefined) return undefined;
  return {
    intervalMs: config.awsInstanceStatusIntervalMs,
    impairedTimeoutMs: config.awsImpairedTimeoutMs,
  };
}

/** The AWS interruption queue the configuration asks for, if any. */
export function awsInterruptionOptions(
  config: ManagerConfig | undefined,
): AwsInterruptionOptions | undefined {
  if (config === undefined || config.awsInterruptionQueue === '') return undefined;
  return {
    queueUrl: config.awsInterruptionQueue,
    settings: {
      drainTimeoutMs: config.awsInterruptionDrainTimeoutMs,
      rebalanceAsInterruption: config.awsRebalanceAsInterruption,
    },
  };
}

/**
 * Request limits of the clients providers use for their cloud: the virtual cloud lives in the
 * cluster's API, but its calls stand for a cloud API's and must not eat the controllers'
 * --kube-api-qps budget (a real driver's cloud calls do not either).
 */
const CLOUD_CLIENT_QPS = 1000;
const CLOUD_CLIENT_BURST = 1000;
/** The API-server probes send two requests every few seconds at most. */
const PROBE_CLIENT_QPS = 5;
/**
 * The Lease client: a GET and an update per retry period. Its own budget, so a renewal never
 * waits behind the controllers' requests (a leader must not lose its Lease to its own backlog).
 */
const LEASE_CLIENT_QPS = 5;
const LEASE_CLIENT_BURST = 10;
/** How long the controllers may take to stop once leadership is lost, before the process exits. */
const LOST_LEADERSHIP_STOP_MS = 500;

export interface ManagerDeps {
  logger: Logger;
  registry?: Registry;
  clock?: Clock;
  /** Overrides loading --control-kubeconfig (tests pass the harness's KubeConfig). */
  controlKubeConfig?: KubeConfigSource;
  /**
   * Called when leadership is lost while running; the command exits the process. Without it the
   * replica stands by for good: its caches keep running, its writes stay fenced, it never leads again.
   */
  onLeadershipLost?: () => void;
  /** User agent of API requests. */
  userAgent?: string;
  /**
   * Wraps the client the informers list and watch through. Tests use it to inject network
   * conditions (a lagging watch); production leaves it unset.
   */
  wrapInformerClient?: (client: KubeApi) => KubeApi;
  /** The providers (drivers) served; defaults to the built-in ones (defaultProviders). */
  providers?: ProviderRegistry;
  /**
   * Test seams of the built-in providers (used when `providers` is unset): tests hold a message of
   * the AWS interruption queue at a point where a restart matters; production leaves it unset.
   */
  providerSeams?: ProviderSeams;
}

interface Runnable {
  start(): void;
  stop(): Promise<void>;
}

/** Loads a kubeconfig: a file path, `inClusterConfig`, or (empty) $KUBECONFIG / ~/.kube/config / in-cluster. */
export function loadKubeConfig(path: string): KubeConfigSource {
  const kc =
    path === 'inClusterConfig'
      ? KubeConfig.inCluster()
      : path === ''
        ? KubeConfig.fromDefault()
        : KubeConfig.fromFile(path);
  if (kc.getCurrentCluster() === null)
    throw new Error(`kubeconfig ${path || '(default)'} has no current cluster`);
  return kc;
}

/**
 * The composition root: configuration → clients → informers → controllers → HTTP server, with
 * leader election around the controllers. start() returns once the process serves (and, without
 * leader election, once the controllers run); stop() shuts everything down in reverse order.
 */
export class Manager {
  readonly registry: Registry;
  readonly client: KubeClient;
  readonly target: KubeClient | undefined;
  /** The autoscaler server's writes: a budget of their own, never queued behind reconciles. */
  private readonly autoscalerClient: KubeClient;
  /** Leader election's Lease reads and writes (the only writes the fence does not guard). */
  private readonly leaseClient: KubeClient;
  /** Closed unless this process holds the leader Lease (undefined without leader election). */
  private readonly fence: LeaseFence | undefined;
  private readonly cloudControl: KubeClient;
  private readonly cloudTarget: KubeClient | undefined;
  private readonly probeControl: KubeClient;
  private readonly probeTarget: KubeClient | undefined;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly server: ObservabilityServer;
  private readonly recorders: KubeEventRecorder[] = [];
  private informers: SharedInformers | undefined;
  private readonly providers: ProviderRegistry;
  private modulesLoaded = false;
  private readonly cloudClients: KubeClient[] = [];
  private controllers: Runnable[] = [];
  /** The leader Lease and gardener's machine-controller Lease (see machineControllerLease()). */
  private leadership: Leadership | undefined;
  private grpc: AutoscalerServer | undefined;
  /** The provider-side safety of this replica (while it runs the controllers). */
  private safety: ProviderSafety | undefined;
  private running = false;
  private synced = false;
  private stopping = false;
  port = 0;
  /** Port of the externalgrpc server (0 when it is off). */
  grpcPort = 0;

  constructor(
    readonly config: ManagerConfig,
    private readonly deps: ManagerDeps,
  ) {
    this.registry = deps.registry ?? newRegistry(true);
    this.clock = deps.clock ?? new RealClock();
    this.log = deps.logger;
    const control = deps.controlKubeConfig ?? loadKubeConfig(config.controlKubeconfig);
    this.fence = config.leaderElect ? new LeaseFence(this.clock) : undefined;
    const clientOpts = {
      fence: this.fence,
      qps: config.kubeApiQps,
      burst: config.kubeApiBurst,
      registry: this.registry,
      clock: this.clock,
      userAgent: deps.userAgent ?? 'machine-controller-manager-ts',
      logger: this.log,
    };
    this.client = new KubeClient({ kubeConfig: control, name: 'control', ...clientOpts });
    const targetConfig =
      config.targetKubeconfig === 'none'
        ? undefined
        : config.targetKubeconfig === ''
          ? control
          : loadKubeConfig(config.targetKubeconfig);
    // The target cluster gets a client of its own even when it is the control cluster: as with
    // gardener MCM's control and target clientsets, each has its own --kube-api-qps budget.
    this.target =
      targetConfig === undefined
        ? undefined
        : new KubeClient({ kubeConfig: targetConfig, name: 'target', ...clientOpts });
    this.autoscalerClient = new KubeClient({ kubeConfig: control, name: 'autoscaler', ...clientOpts });
    this.leaseClient = new KubeClient({
      kubeConfig: control,
      name: 'lease',
      qps: LEASE_CLIENT_QPS,
      burst: LEASE_CLIENT_BURST,
      registry: this.registry,
      clock: this.clock,
      userAgent: `${deps.userAgent ?? 'machine-controller-manager-ts'}/leader-election`,
      logger: this.log,
    });
    this.providers = deps.providers ?? defaultProviders(config, deps.providerSeams);
    const cloudClient = (kubeConfig: KubeConfigSource, side: string): KubeClient => {
      const c = new KubeClient({
        kubeConfig,
        qps: CLOUD_CLIENT_QPS,
        burst: CLOUD_CLIENT_BURST,
        clock: this.clock,
        registry: this.registry,
        userAgent: `${deps.userAgent ?? 'machine-controller-manager-ts'}/provider-${side}`,
        name: `cloud-${side}`,
        logger: this.log,
        // A virtual VM is a write to this API: it must not outlive leadership either.
        fence: this.fence,
      });
      this.cloudClients.push(c);
      return c;
    };
    this.cloudControl = cloudClient(control, 'control');
    this.cloudTarget = targetConfig === undefined ? undefined : cloudClient(targetConfig, 'target');
    // The API-server safety probes get small clients of their own: a probe queued behind the
    // controllers' --kube-api-qps budget must not look like an unreachable API server.
    const probeClient = (kubeConfig: KubeConfigSource, side: string): KubeClient => {
      const c = new KubeClient({
        kubeConfig,
        qps: PROBE_CLIENT_QPS,
        burst: PROBE_CLIENT_QPS,
        clock: this.clock,
        registry: this.registry,
        userAgent: `${deps.userAgent ?? 'machine-controller-manager-ts'}/safety-probe-${side}`,
        // No outage log: the API-server safety check reports what its probes find.
        name: `safety-probe-${side}`,
      });
      this.cloudClients.push(c);
      return c;
    };
    this.probeControl = probeClient(control, 'control');
    this.probeTarget = targetConfig === undefined ? undefined : probeClient(targetConfig, 'target');
    this.server = new ObservabilityServer(
      this.registry,
      {
        healthy: () => !this.stopping,
        ready: () =>
          readiness({
            stopping: this.stopping,
            synced: this.synced,
            running: this.running,
            standby: this.leadership !== undefined && !this.leadership.isLeading(),
          }),
      },
      this.log,
    );
  }

  /** Fails with a clear message when the machine.sapcloud.io CRDs are not installed. */
  private async preflight(): Promise<void> {
    const deadline = this.clock.now() + 60_000;
    for (;;) {
      try {
        await this.client.list(MachineDeploymentResource, { namespace: this.config.namespace, limit: 1 });
        return;
      } catch (err) {
        if (err instanceof NotFoundError) {
          throw new Error(
            'the machine.sapcloud.io/v1alpha1 CRDs are not installed in the control cluster ' +
              '(apply charts/machine-controller-manager/crds/ or install the Helm chart)',
            { cause: err },
          );
        }
        if (!isTransient(err) || this.clock.now() > deadline) {
          throw new Error(`cannot reach the control cluster API: ${errorMessage(err)}`, { cause: err });
        }
        this.log.warn('control cluster API not reachable yet, retrying', { err });
        await this.clock.sleep(2000);
      }
    }
  }

  async start(): Promise<void> {
    // Provider modules first: a module that cannot be loaded stops the start before anything runs.
    if (!this.modulesLoaded) {
      this.modulesLoaded = true;
      await loadProviderModules(this.config.providerModules, this.providers, this.log);
    }
    await this.preflight();
    this.port = await this.server.listen(this.config.address, this.config.port);
    // Caches run on every replica (warm standby, as controller-runtime does): a new leader starts
    // at once, and read-only servers can answer from them on every replica.
    await this.startInformers();
    if (this.stopping) return;
    if (!this.config.leaderElect) {
      await this.startGrpc();
      if (this.isStopping()) return;
      this.runControllers();
      return;
    }
    this.leadership = new Leadership({
      lease: {
        client: this.leaseClient,
        namespace: this.config.namespace,
        leaseDurationMs: this.config.leaderElectLeaseDurationMs,
        renewDeadlineMs: this.config.leaderElectRenewDeadlineMs,
        retryPeriodMs: this.config.leaderElectRetryPeriodMs,
        logger: this.log,
        registry: this.registry,
        recorder: this.recorderFor(EventSource.MachineControllerManager),
      },
      clock: this.clock,
      leaseName: this.config.leaderElectResourceName,
      guardLeaseName: this.machineControllerLease(),
      fence: this.fence,
      isStopping: () => this.stopping,
      onLead: () => {
        this.lead();
      },
      onLost: (why) => {
        this.loseLeadership(why);
      },
    });
    this.leadership.start();
  }

  /**
   * The second Lease the leader holds before its controllers run: gardener's provider
   * machine-controller's, when this manager runs the machine controller (--machine-controller-lease-name).
   */
  private machineControllerLease(): string | undefined {
    const name = this.config.machineControllerLeaseName;
    if (name === '' || !this.config.controllers.includes('machine')) return undefined;
    return name;
  }

  /** With every Lease held: the controllers, then the autoscaler's server. */
  private lead(): void {
    try {
      this.runControllers();
    } catch (err) {
      this.log.error('starting controllers failed', { err });
      this.giveUpLeading('starting controllers failed');
      return;
    }
    // Only the leader serves the autoscaler: a standby's view may be stale and its writes are
    // fenced, so it does not listen at all and the autoscaler's connection lands on the leader.
    this.startGrpc().catch((err: unknown) => {
      this.log.error('starting the externalgrpc server failed', { err });
      this.giveUpLeading('starting the externalgrpc server failed');
    });
  }

  /**
   * The leader cannot run what it leads: with leader election it resigns (fence closed, both Leases
   * released, then exit or stand by as on a loss), so another replica leads instead of this one
   * renewing while nothing runs; without it the process is told to exit.
   */
  private giveUpLeading(why: string): void {
    if (this.leadership !== undefined) this.leadership.resign(why);
    else this.deps.onLeadershipLost?.();
  }

  /**
   * Losing a Lease means another process may already act. No write leaves any more (the leader's
   * fence is revoked for good and both elections have ended, see Leadership); give the controllers
   * a moment to wind down, then let the process exit (as MCM does) so it restarts as a clean
   * candidate, or, without onLeadershipLost, stand by.
   */
  private loseLeadership(why: string): void {
    this.log.error(`${why}, stopping controllers`);
    const stopped = Promise.all([this.grpc?.stop(0), this.stopControllers()]);
    void Promise.race([stopped, this.clock.sleep(LOST_LEADERSHIP_STOP_MS)])
      .catch((err: unknown) => {
        this.log.warn('stopping after the loss of leadership failed', { err });
      })
      .finally(() => this.deps.onLeadershipLost?.());
  }

  private isStopping(): boolean {
    return this.stopping;
  }

  /**
   * Whether this manager runs the controllers: without leader election always, with it once it
   * holds its Lease (and gardener's machine-controller Lease, see machineControllerLease()).
   */
  isLeading(): boolean {
    return this.config.leaderElect ? this.leadership?.isLeading() === true && this.running : this.running;
  }

  recorderFor(component: string): EventRecorder {
    const r = new KubeEventRecorder({
      client: this.client,
      component,
      logger: this.log,
      registry: this.registry,
      clock: this.clock,
    });
    this.recorders.push(r);
    return r;
  }

  /** The caches every component reads, and the providers' drivers over them. */
  private async startInformers(): Promise<void> {
    const wrap = this.deps.wrapInformerClient ?? ((c: KubeApi) => c);
    const informers = new SharedInformers({
      client: wrap(this.client),
      target: this.target === undefined ? undefined : wrap(this.target),
      namespace: this.config.namespace,
      logger: this.log,
      registry: this.registry,
      clock: this.clock,
      resyncPeriodMs: this.config.minResyncPeriodMs,
    });
    this.informers = informers;
    // Notices about VMs (a provider's interruption queue) are recorded on the machines; only the
    // leader's providers read them, and the clients' fence guards every write.
    const notices = new VmNoticeHandler({
      client: this.client,
      target: this.target,
      machines: informers.machines,
      nodes: informers.nodes,
      recorder: this.recorderFor(EventSource.MachineController),
      clock: this.clock,
      logger: this.log,
    });
    this.providers.instantiate({
      control: this.cloudControl,
      target: this.cloudTarget,
      namespace: this.config.namespace,
      nodes: informers.nodes,
      informers,
      clock: this.clock,
      logger: this.log,
      registry: this.registry,
      fence: this.fence,
      notices,
    });
    informers.start();
    await informers.waitForSync();
    this.synced = true;
    this.log.info('caches synced', { namespace: this.config.namespace });
  }

  private async startGrpc(): Promise<void> {
    const c = this.config;
    if (c.grpcAddress === '' || this.informers === undefined || this.grpc !== undefined || this.stopping)
      return;
    this.grpc = new AutoscalerServer({
      address: c.grpcAddress,
      tls: c.grpcInsecure
        ? undefined
        : {
            certFile: c.grpcTlsCertFile,
            keyFile: c.grpcTlsKeyFile,
            clientCAFile: c.grpcClientCaFile,
            allowedClientNames: c.grpcClientAllowedNames,
          },
      groups: c.nodeGroups,
      gpuLabel: c.autoscalerGpuLabel,
      gpuTypes: c.autoscalerGpuTypes,
      namespace: c.namespace,
      client: this.autoscalerClient,
      fence: this.fence,
      informers: this.informers,
      clock: this.clock,
      logger: this.log,
      registry: this.registry,
      providerPrice: (provider, req) => this.providers.nodePrice(provider, req),
      recorder: this.recorderFor(EventSource.AutoscalerProvider),
      limits: {
        maxConcurrentStreams: c.grpcMaxConcurrentStreams,
        maxPendingRequestBytes: c.grpcMaxPendingRequestBytes,
        requestReadTimeoutMs: c.grpcRequestReadTimeoutMs,
        keepaliveMinTimeMs: c.grpcKeepaliveMinTimeMs,
        keepalivePermitWithoutStream: c.grpcKeepalivePermitWithoutStream,
        maxConnectionIdleMs: c.grpcMaxConnectionIdleMs,
        maxConnectionAgeMs: c.grpcMaxConnectionAgeMs,
        maxConnectionAgeGraceMs: c.grpcMaxConnectionAgeGraceMs,
      },
      unhealthy: () => {
        if (!this.synced) return 'caches are not synced';
        if (this.fence?.allowed() === false) return 'this replica does not hold the leader Lease';
        if (this.safety?.isFrozen() === true) {
          return 'machine reconciliation is frozen: an API server has been unreachable longer than --machine-safety-apiserver-statuscheck-timeout';
        }
        return undefined;
      },
    });
    await this.grpc.start();
    this.grpcPort = this.grpc.port;
  }

  private machineSettings(): MachineControllerSettings {
    const c = this.config;
    return {
      creationTimeoutMs: c.machineCreationTimeoutMs,
      healthTimeoutMs: c.machineHealthTimeoutMs,
      drainTimeoutMs: c.machineDrainTimeoutMs,
      inPlaceUpdateTimeoutMs: c.machineInPlaceUpdateTimeoutMs,
      maxEvictRetries: c.machineMaxEvictRetries,
      pvDetachTimeoutMs: c.machinePvDetachTimeoutMs,
      pvReattachTimeoutMs: c.machinePvReattachTimeoutMs,
      preserveTimeoutMs: c.machinePreserveTimeoutMs,
      nodeConditions: c.nodeConditions,
      bootstrapTokenAuthExtraGroups: c.bootstrapTokenAuthExtraGroups,
      resourceExhaustedRetryMs: c.resourceExhaustedRetryMs,
      launchFailureBackoffMs: c.launchFailureBackoffMs,
      launchFailureMaxBackoffMs: c.launchFailureMaxBackoffMs,
      maxUnhealthyReplacements: c.maxUnhealthyReplacements,
    };
  }

  /** Builds the controllers over the synced caches and starts them with the providers. */
  private runControllers(): void {
    const informers = this.informers;
    if (this.running || informers === undefined || this.stopping) return;
    this.running = true;
    const recorders = new Map<string, EventRecorder>();
    const nodeGroups = this.config.nodeGroups;
    const ctx: ControllerContext = {
      client: this.client,
      target: this.target,
      namespace: this.config.namespace,
      groupMaxOf: (mcd) => discoverGroups([mcd], nodeGroups).groups[0]?.max,
      informers,
      clock: this.clock,
      logger: this.log,
      registry: this.registry,
      recorderFor: (component) => {
        let r = recorders.get(component);
        if (r === undefined) {
          r = this.recorderFor(component);
          recorders.set(component, r);
        }
        return r;
      },
      settings: {
        safetyUp: this.config.safetyUp,
        safetyDown: this.config.safetyDown,
        overshootingPeriodMs: this.config.machineSafetyOvershootingPeriodMs,
        autoscalerScaleDownAnnotationDuringRollout: this.config.autoscalerScaleDownAnnotationDuringRollout,
        burstReplicas: 100,
        finalizeNewMachines: this.config.controllers.includes('machine'),
        interruptionDrainLeadMs: this.config.interruptionDrainLeadMs,
      },
    };
    const workers = this.config.concurrentSyncs;
    const enabled = new Set(this.config.controllers);
    if (enabled.has('machineset')) this.controllers.push(new MachineSetController(ctx, workers));
    if (enabled.has('machinedeployment'))
      this.controllers.push(new MachineDeploymentController(ctx, workers));
    if (enabled.has('safety')) this.controllers.push(new OvershootSafetyController(ctx));
    if (enabled.has('machine')) {
      // The safety and the machine controller need each other: the freeze flag one way, the
      // creations in flight and the re-enqueue after an unfreeze the other.
      const late: { machines?: MachineController } = {};
      const safety = new ProviderSafety(ctx, {
        providers: this.providers,
        orphanVmsPeriodMs: this.config.machineSafetyOrphanVmsPeriodMs,
        statusCheckPeriodMs: this.config.machineSafetyApiserverStatuscheckPeriodMs,
        statusCheckTimeoutMs: this.config.machineSafetyApiserverStatuscheckTimeoutMs,
        creationTimeoutMs: this.config.machineCreationTimeoutMs,
        probeClients: { control: this.probeControl, target: this.probeTarget },
        creationInFlight: (key) => late.machines?.isCreating(key) ?? false,
        onUnfreeze: () => late.machines?.enqueueAll(),
      });
      const machines = new MachineController(ctx, {
        settings: this.machineSettings(),
        providers: this.providers,
        workers: this.config.machineConcurrentSyncs,
        frozen: () => safety.isFrozen(),
      });
      late.machines = machines;
      this.safety = safety;
      this.controllers.push(machines, safety);
    }
    if (enabled.has('node') && this.target !== undefined) this.controllers.push(new NodeController(ctx));
    if (enabled.has('machineclass')) {
      const orphans = this.safety?.orphans;
      this.controllers.push(
        new MachineClassController(ctx, {
          beforeRelease:
            orphans === undefined ? undefined : (cls, log) => orphans.passBeforeRelease(cls, log),
        }),
      );
    }
    if (enabled.has('secret')) this.controllers.push(new SecretController(ctx));
    // Providers' background work (the virtual cloud's hypervisor) serves the machine controller;
    // without it (a gardener provider sidecar runs the machines) the cloud is not ours to drive.
    if (enabled.has('machine')) this.providers.start();
    for (const c of this.controllers) c.start();
    this.log.info('controllers started', { controllers: [...enabled], namespace: this.config.namespace });
  }

  private async stopControllers(): Promise<void> {
    const controllers = this.controllers;
    this.controllers = [];
    this.safety = undefined;
    await Promise.all(controllers.map((c) => c.stop()));
    if (this.running) await this.providers.stop();
    this.running = false;
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.log.info('shutting down');
    await this.grpc?.stop();
    await this.stopControllers();
    // Events still queued are sent while this process may write.
    await Promise.all(this.recorders.map((r) => r.stop()));
    // Releases the Lease (releaseOnCancel) so a standby replica takes over at once.
    await this.leadership?.stop();
    this.fence?.revoke('the manager stopped');
    await this.informers?.stop();
    this.informers = undefined;
    this.synced = false;
    await this.server.close();
    this.client.close();
    this.target?.close();
    this.autoscalerClient.close();
    this.leaseClient.close();
    for (const c of this.cloudClients) c.close();
  }
}
