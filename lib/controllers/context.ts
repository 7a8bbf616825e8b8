import type { Registry } from 'prom-client';

import { Label } from '../api/constants.js';
import type {
  Node,
  PersistentVolume,
  PersistentVolumeClaim,
  Pod,
  PodDisruptionBudget,
  Secret,
  VolumeAttachment,
} from '../kube/types.js';
import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
  type MachineSet,
} from '../api/types.js';
import type { KubeApi } from '../kube/client.js';
import type { Clock } from '../kube/clock.js';
import type { EventRecorder } from '../kube/events.js';
import { ATTACHMENT_NODE_INDEX, ATTACHMENT_PV_INDEX, POD_NODE_INDEX, trimPod } from '../drain/caches.js';
import { Informer, labelIndex, type DeepReadonly } from '../kube/informer.js';
import { CoreResources } from '../kube/resources.js';
import { MachineAccounting } from './accounting.js';
import { vmKey } from './machines.js';
import type { Logger } from '../observability/logger.js';

/** Machines by their `node` label (the name of their Node). */
export const MACHINE_NODE_INDEX = 'machineNode';
/** Machines by the name of their class. */
export const MACHINE_CLASS_INDEX = 'machineClass';
/** MachineClasses by the names of the secrets they reference. */
export const CLASS_SECRET_INDEX = 'classSecret';
/** Nodes by their `node.gardener.cloud/machine-name` label. */
export const NODE_MACHINE_INDEX = 'nodeMachine';
/**
 * Machines by the VM their providerID names (vmKey): a kubelet may register another form of it than
 * the driver recorded on the machine (AWS: the zone where the machine has the region), and a
 * cloud's notice names the VM alone.
 */
export const MACHINE_PROVIDER_ID_INDEX = 'machineProviderID';
/** The informers shared by every controller of one manager (one cache per resource). */
export class SharedInformers {
  readonly machines: Informer<Machine>;
  /** Machine counts per owner, kept from the machine events (what reconciles read instead of scanning). */
  readonly machineCounts: MachineAccounting;
  readonly machineSets: Informer<MachineSet>;
  readonly machineDeployments: Informer<MachineDeployment>;
  readonly machineClasses: Informer<MachineClass>;
  /** Secrets of the control namespace (class credentials and user data). */
  readonly secrets: Informer<Secret>;
  /** Nodes of the target cluster; undefined without a target cluster. */
  readonly nodes: Informer<Node> | undefined;
  /** What the drain reads in the target cluster; undefined without a target cluster. */
  readonly drain:
    | {
        pods: Informer<Pod>;
        podDisruptionBudgets: Informer<PodDisruptionBudget>;
        persistentVolumeClaims: Informer<PersistentVolumeClaim>;
        persistentVolumes: Informer<PersistentVolume>;
        volumeAttachments: Informer<VolumeAttachment>;
      }
    | undefined;

  constructor(opts: {
    client: KubeApi;
    target: KubeApi | undefined;
    namespace: string;
    logger: Logger;
    registry?: Registry;
    clock?: Clock;
    resyncPeriodMs?: number;
  }) {
    const common = {
      namespace: opts.namespace,
      logger: opts.logger,
      ...(opts.registry === undefined ? {} : { registry: opts.registry }),
      ...(opts.clock === undefined ? {} : { clock: opts.clock }),
      ...(opts.resyncPeriodMs === undefined ? {} : { resyncPeriodMs: opts.resyncPeriodMs }),
    };
    this.machines = new Informer<Machine>({
      client: opts.client,
      resource: MachineResource,
      name: 'machines',
      ...common,
    });
    this.machineSets = new Informer<MachineSet>({
      client: opts.client,
      resource: MachineSetResource,
      name: 'machinesets',
      ...common,
    });
    this.machineDeployments = new Informer<MachineDeployment>({
      client: opts.client,
      resource: MachineDeploymentResource,
      name: 'machinedeployments',
      ...common,
    });
    this.machineClasses = new Informer<MachineClass>({
      client: opts.client,
      resource: MachineClassResource,
      name: 'machineclasses',
      ...common,
    });
    this.secrets = new Informer<Secret>({
      client: opts.client,
      resource: CoreResources.secrets,
      name: 'secrets',
      ...common,
    });
    this.machineCounts = new MachineAccounting(this.machines);
    this.machineSets.addHandler({
      onDelete: (ms) => {
        this.machineCounts.forgetOwner(ms.metadata.uid ?? '');
      },
    });
    this.machines.addIndexer(MACHINE_NODE_INDEX, labelIndex(Label.Node));
    this.machines.addIndexer(MACHINE_PROVIDER_ID_INDEX, (m) =>
      m.spec?.providerID === undefined || m.spec.providerID === '' ? [] : [vmKey(m.spec.providerID)],
    );
    this.machines.addIndexer(MACHINE_CLASS_INDEX, (m) =>
      m.spec?.class?.name === undefined ? [] : [m.spec.class.name],
    );
    this.machineClasses.addIndexer(CLASS_SECRET_INDEX, (c) =>
      [c.secretRef?.name, c.credentialsSecretRef?.name].filter(
        (n): n is string => n !== undefined && n !== '',
      ),
    );
    if (opts.target !== undefined) {
      const { namespace: _ns, ...clusterWide } = common;
      this.nodes = new Informer<Node>({
        client: opts.target,
        resource: CoreResources.nodes,
        name: 'nodes',
        ...clusterWide,
      });
      this.nodes.addIndexer(NODE_MACHINE_INDEX, labelIndex(Label.NodeMachineName));
      const pods = new Informer<Pod>({
        client: opts.target,
        resource: CoreResources.pods,
        name: 'pods',
        transform: trimPod,
        ...clusterWide,
      });
      pods.addIndexer(POD_NODE_INDEX, (p) => (p.spec?.nodeName === undefined ? [] : [p.spec.nodeName]));
      const volumeAttachments = new Informer<VolumeAttachment>({
        client: opts.target,
        resource: CoreResources.volumeAttachments,
        name: 'volumeattachments',
        ...clusterWide,
      });
      volumeAttachments.addIndexer(ATTACHMENT_NODE_INDEX, (v) =>
        v.spec?.nodeName === undefined ? [] : [v.spec.nodeName],
      );
      volumeAttachments.addIndexer(ATTACHMENT_PV_INDEX, (v) =>
        v.spec?.source?.persistentVolumeName === undefined ? [] : [v.spec.source.persistentVolumeName],
      );
      this.drain = {
        pods,
        podDisruptionBudgets: new Informer<PodDisruptionBudget>({
          client: opts.target,
          resource: CoreResources.podDisruptionBudgets,
          name: 'poddisruptionbudgets',
          ...clusterWide,
        }),
        persistentVolumeClaims: new Informer<PersistentVolumeClaim>({
          client: opts.target,
          resource: CoreResources.persistentVolumeClaims,
          name: 'persistentvolumeclaims',
          ...clusterWide,
        }),
        persistentVolumes: new Informer<PersistentVolume>({
          client: opts.target,
          resource: CoreResources.persistentVolumes,
          name: 'persistentvolumes',
          ...clusterWide,
        }),
        volumeAttachments,
      };
    }
  }

  private all(): Informer<never>[] {
    return [
      this.machines,
      this.machineSets,
      this.machineDeployments,
      this.machineClasses,
      this.secrets,
      this.nodes,
      this.drain?.pods,
      this.drain?.podDisruptionBudgets,
      this.drain?.persistentVolumeClaims,
      this.drain?.persistentVolumes,
      this.drain?.volumeAttachments,
    ].filter((i) => i !== undefined) as unknown as Informer<never>[];
  }

  start(): void {
    for (const i of this.all()) i.start();
  }

  /** Every informer waiting out a backoff retries at once (after an API-server outage). */
  retryNow(): void {
    for (const i of this.all()) i.retryNow();
  }

  async waitForSync(signal?: AbortSignal): Promise<void> {
    await Promise.all(this.all().map((i) => i.waitForSync(signal)));
  }

  async stop(): Promise<void> {
    await Promise.all(this.all().map((i) => i.stop()));
  }
}

/** Settings of the MachineSet/MachineDeployment/safety controllers (gardener MCM flag names). */
export interface ControllerSettings {
  /** --safety-up */
  safetyUp: number;
  /** --safety-down */
  safetyDown: number;
  /** --machine-safety-overshooting-period, ms */
  overshootingPeriodMs: number;
  /** --autoscaler-scaledown-annotation-during-rollout */
  autoscalerScaleDownAnnotationDuringRollout: boolean;
  /** Machines created or deleted by one MachineSet sync at most (MCM's burst of 100). */
  burstReplicas: number;
  /**
   * Whether the MachineSet controller creates machines with the machine finalizer already set (the
   * machine controller runs in this process, or another one honours the finalizer): it saves the
   * machine controller a write per machine. Off when nothing would remove the finalizer.
   */
  finalizeNewMachines: boolean;
  /**
   * --interruption-drain-lead: how long before its interruption deadline an interrupted machine is
   * deleted (its node's drain starts) when its replacement is not available by then.
   */
  interruptionDrainLeadMs: number;
}

export const defaultControllerSettings: ControllerSettings = {
  safetyUp: 2,
  safetyDown: 1,
  overshootingPeriodMs: 60_000,
  autoscalerScaleDownAnnotationDuringRollout: true,
  burstReplicas: 100,
  finalizeNewMachines: false,
  interruptionDrainLeadMs: 30_000,
};

/** Everything a controller needs, injected by the manager (or a test). */
export interface ControllerContext {
  /** Control cluster: the machine.sapcloud.io objects. */
  client: KubeApi;
  /** Target cluster: Nodes; undefined when running without one (--target-kubeconfig=none). */
  target: KubeApi | undefined;
  namespace: string;
  informers: SharedInformers;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  recorderFor(component: string): EventRecorder;
  settings: ControllerSettings;
  /**
   * The MachineDeployment's autoscaler maximum when it is a node group (annotations or --nodes),
   * else undefined: voluntary replacements (expiry, rebalance) never surge above it.
   */
  groupMaxOf?: (mcd: DeepReadonly<MachineDeployment> | MachineDeployment) => number | undefined;
}
