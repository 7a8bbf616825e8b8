import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
} from '../../../lib/api/types.js';
import type { Machine, MachineClass, MachineDeployment, NodeTemplate } from '../../../lib/api/types.js';
import { defaultConfig, type ManagerConfig } from '../../../lib/config.js';
import { KubeClient } from '../../../lib/kube/client.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { Node } from '../../../lib/kube/types.js';
import { Manager, type ManagerDeps } from '../../../lib/manager.js';
import { createLogger, nullLogger, type Logger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';
import {
  startControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from '../../harness/controlplane.js';

export const NS = 'default';

/** Set MCM_TEST_LOG=1 (or a --v number) to see the manager's logs while a test runs. */
export function testLogger(): Logger {
  const v = process.env.MCM_TEST_LOG;
  if (v === undefined || v === '' || v === '0') return nullLogger;
  return createLogger({ verbosity: v === '1' ? 4 : Number(v), format: 'text' });
}

/**
 * A real control plane with the CRDs and the whole manager (machine controller and the built-in
 * virtual provider included) running in-process against it: the environment in which machines
 * really become VMs and Nodes.
 */
export class LifecycleEnv {
  manager: Manager | undefined;
  readonly client: KubeClient;

  private constructor(readonly cp: ControlPlane) {
    this.client = new KubeClient({
      kubeConfig: cp.kubeConfig,
      qps: 500,
      burst: 500,
      userAgent: 'integration-test',
    });
  }

  static async start(opts: ControlPlaneOptions = {}): Promise<LifecycleEnv> {
    return new LifecycleEnv(await startControlPlane({ installCRDs: true, ...opts }));
  }

  config(overrides: Partial<ManagerConfig> = {}): ManagerConfig {
    return {
      ...defaultConfig,
      namespace: NS,
      leaderElect: false,
      address: '127.0.0.1',
      port: 0,
      concurrentSyncs: 5,
      kubeApiQps: 200,
      kubeApiBurst: 400,
      machineSafetyOvershootingPeriodMs: 5_000,
      ...overrides,
    };
  }

  /** deps.registry: default a registry without the Node.js process metrics. */
  async startManager(
    overrides: Partial<ManagerConfig> = {},
    deps: Pick<ManagerDeps, 'wrapInformerClient' | 'registry' | 'providers' | 'providerSeams'> &
      Partial<Pick<ManagerDeps, 'logger'>> = {},
  ): Promise<Manager> {
    const manager = new Manager(this.config(overrides), {
      logger: testLogger().child({ component: 'manager' }),
      controlKubeConfig: this.cp.kubeConfig,
      registry: newRegistry(),
      ...deps,
    });
    await manager.start();
    this.manager = manager;
    return manager;
  }

  async stopManager(): Promise<void> {
    await this.manager?.stop();
    this.manager = undefined;
  }

  async stop(): Promise<void> {
    await this.stopManager();
    this.client.close();
    await this.cp.stop();
  }

  async createClass(
    name: string,
    providerSpec: Record<string, unknown> = {},
    extra: Partial<
      Pick<MachineClass, 'nodeTemplate' | 'secretRef' | 'credentialsSecretRef' | 'provider'>
    > = {},
  ): Promise<MachineClass> {
    return this.client.create<MachineClass>(MachineClassResource, {
      apiVersion: API_VERSION,
      kind: 'MachineClass',
      metadata: { name, namespace: NS },
      provider: 'virtual',
      providerSpec,
      ...extra,
    });
  }

  async createDeployment(
    name: string,
    replicas: number,
    className: string,
    spec: Partial<NonNullable<MachineDeployment['spec']>> = {},
    machineSpec: Record<string, unknown> = {},
  ): Promise<MachineDeployment> {
    const labels = { app: name };
    return this.client.create<MachineDeployment>(MachineDeploymentResource, {
      apiVersion: API_VERSION,
      kind: 'MachineDeployment',
      metadata: { name, namespace: NS },
      spec: {
        replicas,
        selector: { matchLabels: labels },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
        template: {
          metadata: { labels },
          spec: { class: { kind: 'MachineClass', name: className }, ...machineSpec },
        },
        ...spec,
      },
    });
  }

  async machines(app?: string): Promise<Machine[]> {
    const list = await this.client.list<Machine>(MachineResource, {
      namespace: NS,
      ...(app === undefined ? {} : { labelSelector: `app=${app}` }),
    });
    return list.items;
  }

  async nodes(): Promise<Node[]> {
    return (await this.client.list<Node>(CoreResources.nodes)).items;
  }

  async scale(name: string, replicas: number): Promise<void> {
    await this.client.scale(MachineDeploymentResource, name, NS, replicas);
  }
}

export const phaseOf = (m: Machine): string => m.status?.currentStatus?.phase ?? '';

export function nodeTemplate(over: Partial<NodeTemplate> = {}): NodeTemplate {
  return {
    capacity: { cpu: '4', memory: '8Gi', pods: '50' },
    instanceType: 'v-medium',
    region: 'eu-virtual',
    zone: 'eu-virtual-a',
    ...over,
  };
}
