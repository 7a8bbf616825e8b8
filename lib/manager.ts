import { KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';

import { EventSource } from './api/constants.js';
import { MachineDeploymentResource } from './api/types.js';
import type { ManagerConfig } from './config.js';
import { SharedInformers, type ControllerContext } from './controllers/context.js';
import { MachineDeploymentController } from './controllers/machinedeployment/controller.js';
import { MachineSetController } from './controllers/machineset/controller.js';
import { OvershootSafetyController } from './controllers/safety/overshoot.js';
import { KubeClient, type KubeApi } from './kube/client.js';
import { RealClock, type Clock } from './kube/clock.js';
import { NotFoundError, errorMessage, isTransient } from './kube/errors.js';
import { KubeEventRecorder, type EventRecorder } from './kube/events.js';
import { LeaderElector } from './kube/leaderelection.js';
import { ObservabilityServer } from './observability/http.js';
import type { Logger } from './observability/logger.js';
import { newRegistry } from './observability/metrics.js';

export interface ManagerDeps {
  logger: Logger;
  registry?: Registry;
  clock?: Clock;
  /** Overrides loading --control-kubeconfig (tests pass the harness's KubeConfig). */
  controlKubeConfig?: KubeConfig;
  /** Called when leadership is lost while running; the command exits the process. */
  onLeadershipLost?: () => void;
  /** User agent of API requests. */
  userAgent?: string;
  /**
   * Wraps the client the informers list and watch through. Tests use it to inject network
   * conditions (a lagging watch); production leaves it unset.
   */
  wrapInformerClient?: (client: KubeApi) => KubeApi;
}

interface Runnable {
  start(): void;
  stop(): Promise<void>;
}

/** Loads a kubeconfig: a file path, or (empty) in-cluster / $KUBECONFIG / ~/.kube/config. */
export function loadKubeConfig(path: string): KubeConfig {
  const kc = new KubeConfig();
  if (path === '' || path === 'inClusterConfig') {
    if (path === 'inClusterConfig') kc.loadFromCluster();
    else kc.loadFromDefault();
  } else {
    kc.loadFromFile(path);
  }
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
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly server: ObservabilityServer;
  private readonly recorders: KubeEventRecorder[] = [];
  private informers: SharedInformers | undefined;
  private controllers: Runnable[] = [];
  private electionAbort: AbortController | undefined;
  private election: Promise<void> | undefined;
  private running = false;
  private synced = false;
  private stopping = false;
  private leading = false;
  port = 0;

  constructor(
    readonly config: ManagerConfig,
    private readonly deps: ManagerDeps,
  ) {
    this.registry = deps.registry ?? newRegistry(true);
    this.clock = deps.clock ?? new RealClock();
    this.log = deps.logger;
    const control = deps.controlKubeConfig ?? loadKubeConfig(config.controlKubeconfig);
    const clientOpts = {
      qps: config.kubeApiQps,
      burst: config.kubeApiBurst,
      registry: this.registry,
      clock: this.clock,
      userAgent: deps.userAgent ?? 'machine-controller-manager-ts',
    };
    this.client = new KubeClient({ kubeConfig: control, ...clientOpts });
    if (config.targetKubeconfig === 'none') this.target = undefined;
    else if (config.targetKubeconfig === '') this.target = this.client;
    else this.target = new KubeClient({ kubeConfig: loadKubeConfig(config.targetKubeconfig), ...clientOpts });
    this.server = new ObservabilityServer(
      this.registry,
      {
        healthy: () => !this.stopping,
        ready: () => {
          if (this.stopping) return { ready: false, reason: 'shutting down' };
          if (this.config.leaderElect && !this.leading) return { ready: true, reason: '' };
          return this.synced
            ? { ready: true, reason: '' }
            : { ready: false, reason: 'caches not synced yet' };
        },
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
    await this.preflight();
    this.port = await this.server.listen(this.config.address, this.config.port);
    if (!this.config.leaderElect) {
      await this.runControllers();
      return;
    }
    this.electionAbort = new AbortController();
    const recorder = this.recorderFor(EventSource.MachineControllerManager);
    const elector = new LeaderElector({
      client: this.client,
      namespace: this.config.namespace,
      name: this.config.leaderElectResourceName,
      leaseDurationMs: this.config.leaderElectLeaseDurationMs,
      renewDeadlineMs: this.config.leaderElectRenewDeadlineMs,
      retryPeriodMs: this.config.leaderElectRetryPeriodMs,
      clock: this.clock,
      logger: this.log,
      registry: this.registry,
      recorder,
      onStartedLeading: () => {
        this.leading = true;
        this.runControllers().catch((err: unknown) => {
          this.log.error('starting controllers failed', { err });
          this.deps.onLeadershipLost?.();
        });
      },
      onStoppedLeading: () => {
        this.leading = false;
        if (this.stopping) return;
        // Losing the lease means another replica may already act: stop at once, then let the
        // process exit (as MCM does) so it restarts as a clean candidate.
        this.log.error('leadership lost, stopping controllers');
        void this.stopControllers().finally(() => this.deps.onLeadershipLost?.());
      },
    });
    this.election = elector.run(this.electionAbort.signal);
  }

  /** Whether this manager runs the controllers (always, without leader election). */
  isLeading(): boolean {
    return this.config.leaderElect ? this.leading : this.running;
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

  /** Builds the informers and controllers, waits for the caches, then starts the controllers. */
  private async runControllers(): Promise<void> {
    if (this.running) return;
    this.running = true;
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
    const recorders = new Map<string, EventRecorder>();
    const ctx: ControllerContext = {
      client: this.client,
      target: this.target,
      namespace: this.config.namespace,
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
      },
    };
    const workers = this.config.concurrentSyncs;
    const enabled = new Set(this.config.controllers);
    if (enabled.has('machineset')) this.controllers.push(new MachineSetController(ctx, workers));
    if (enabled.has('machinedeployment'))
      this.controllers.push(new MachineDeploymentController(ctx, workers));
    if (enabled.has('safety')) this.controllers.push(new OvershootSafetyController(ctx));
    informers.start();
    await informers.waitForSync();
    this.synced = true;
    if (this.stopping) return;
    for (const c of this.controllers) c.start();
    this.log.info('controllers started', { controllers: [...enabled], namespace: this.config.namespace });
  }

  private async stopControllers(): Promise<void> {
    const controllers = this.controllers;
    this.controllers = [];
    await Promise.all(controllers.map((c) => c.stop()));
    await this.informers?.stop();
    this.informers = undefined;
    this.running = false;
    this.synced = false;
  }

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.log.info('shutting down');
    await this.stopControllers();
    // Releases the Lease (releaseOnCancel) so a standby replica takes over at once.
    this.electionAbort?.abort();
    await this.election;
    await Promise.all(this.recorders.map((r) => r.stop()));
    await this.server.close();
    this.client.close();
    if (this.target !== undefined && this.target !== this.client) this.target.close();
  }
}
