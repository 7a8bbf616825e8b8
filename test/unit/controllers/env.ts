import type { KubeObject } from '../../../lib/kube/types.js';
import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
} from '../../../lib/api/types.js';
import {
  SharedInformers,
  defaultControllerSettings,
  type ControllerContext,
  type ControllerSettings,
} from '../../../lib/controllers/context.js';
import { ProviderRegistry } from '../../../lib/driver/registry.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { FakeEventRecorder } from '../../../lib/kube/events.js';
import { CoreResources, type ResourceType } from '../../../lib/kube/resources.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';
import { virtualProvider } from '../../../lib/providers/virtual/index.js';
import { FakeKube } from '../../fakes/kube.js';
import { eventually } from '../helpers/eventually.js';

/**
 * A controller test environment: the in-memory API, real informers over it, a fake clock, a
 * recording event recorder and a capturing logger. Seed objects, start(), then call a
 * controller's reconcile(key) directly and assert on api.writes() and recorder.events.
 */
export class ControllerTestEnv {
  readonly api = new FakeKube({ now: () => this.clock.now() });
  readonly target = new FakeKube({ now: () => this.clock.now() });
  readonly clock = new FakeClock(Date.UTC(2026, 10, 21, 10, 0, 0));
  readonly recorder = new FakeEventRecorder();
  readonly logger = new CapturingLogger();
  readonly registry = newRegistry();
  readonly informers: SharedInformers;
  readonly ctx: ControllerContext;

  constructor(settings: Partial<ControllerSettings> = {}, opts: { withTarget?: boolean } = {}) {
    const withTarget = opts.withTarget ?? true;
    this.informers = new SharedInformers({
      client: this.api,
      target: withTarget ? this.target : undefined,
      namespace: 'default',
      logger: this.logger,
    });
    this.ctx = {
      client: this.api,
      target: withTarget ? this.target : undefined,
      namespace: 'default',
      informers: this.informers,
      clock: this.clock,
      logger: this.logger,
      registry: this.registry,
      recorderFor: () => this.recorder,
      settings: { ...defaultControllerSettings, ...settings },
    };
  }

  /** The built-in virtual provider over this environment (its VMs are Nodes of `target`). */
  virtualProviders(): ProviderRegistry {
    const providers = new ProviderRegistry().register('virtual', virtualProvider());
    providers.instantiate({
      control: this.api,
      target: this.target,
      namespace: this.ctx.namespace,
      nodes: this.informers.nodes,
      clock: this.clock,
      logger: this.logger,
      registry: this.registry,
    });
    return providers;
  }

  /** Names of the target cluster's Nodes (the virtual provider's VMs), sorted. */
  nodeNames(): string[] {
    return this.target
      .all(CoreResources.nodes)
      .map((n) => n.metadata.name ?? '')
      .sort();
  }

  seed(res: ResourceType, ...objs: KubeObject[]): void {
    (res === CoreResources.nodes ? this.target : this.api).seed(res, ...objs);
  }

  async start(): Promise<void> {
    this.informers.start();
    await this.informers.waitForSync();
  }

  /** Waits until every informer reflects the API's current objects. */
  async settle(): Promise<void> {
    const pairs: [ResourceType, { size(): number; keys(): string[] }, FakeKube][] = [
      [MachineResource, this.informers.machines, this.api],
      [MachineSetResource, this.informers.machineSets, this.api],
      [MachineDeploymentResource, this.informers.machineDeployments, this.api],
      [MachineClassResource, this.informers.machineClasses, this.api],
    ];
    if (this.informers.nodes !== undefined)
      pairs.push([CoreResources.nodes, this.informers.nodes, this.target]);
    await eventually(() => {
      for (const [res, inf, api] of pairs) {
        const want = api
          .all(res)
          .map(
            (o) =>
              `${o.metadata.namespace ?? ''}/${o.metadata.name ?? ''}@${o.metadata.resourceVersion ?? ''}`,
          )
          .sort();
        const have = inf
          .keys()
          .map((k) => {
            const o = (inf as unknown as { getByKey(k: string): KubeObject | undefined }).getByKey(k);
            return `${o?.metadata.namespace ?? ''}/${o?.metadata.name ?? ''}@${o?.metadata.resourceVersion ?? ''}`;
          })
          .sort();
        if (want.join(',') !== have.join(',')) return false;
      }
      return true;
    }, 'informers caught up with the API');
  }

  async stop(): Promise<void> {
    await this.informers.stop();
  }
}
