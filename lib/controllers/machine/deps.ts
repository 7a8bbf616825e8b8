import type { DisplacedPods } from '../../drain/displaced.js';
import type { Drainer } from '../../drain/drain.js';
import type { DrainMetrics } from '../../drain/metrics.js';
import type { ProviderRegistry } from '../../driver/registry.js';
import type { KubeApi } from '../../kube/client.js';
import type { Clock } from '../../kube/clock.js';
import type { EventRecorder } from '../../kube/events.js';
import type { SharedInformers } from '../context.js';
import type { TokenSecretRef } from './bootstrap.js';
import type { ReplacementBudget } from './budget.js';
import type { DeletionMemo } from './deletion.js';
import type { LaunchBackoff } from './launches.js';
import type { MachineMemory } from './memory.js';
import type { MachineMetrics } from './metrics.js';
import type { MachineControllerSettings } from './settings.js';

/** What the machine controller's flows share. */
export interface MachineDeps {
  client: KubeApi;
  /** Undefined when running without a target cluster. */
  target: KubeApi | undefined;
  informers: SharedInformers;
  clock: Clock;
  recorder: EventRecorder;
  settings: MachineControllerSettings;
  providers: ProviderRegistry;
  metrics: MachineMetrics;
  budget: ReplacementBudget;
  /** Failed launches per class, and the back-off of the next (launches.ts). */
  launches: LaunchBackoff;
  /** Drains nodes before their VMs go; undefined without a target cluster. */
  drainer: Drainer | undefined;
  drainMetrics: DrainMetrics;
  /** Times the successors of the pods an interrupted machine's drain displaces; undefined without a target cluster. */
  displaced: DisplacedPods | undefined;
  /** Deletions this process took past the VM (the cache may not show it yet), by machine UID. */
  deletions: MachineMemory<DeletionMemo>;
  /** The bootstrap token Secret this process made or found for a machine, by machine UID. */
  tokens: MachineMemory<TokenSecretRef>;
}

/** Event reasons of the machine controller (gardener MCM records none on machines). */
export const MachineEventReason = {
  CreateFailed: 'CreateFailed',
  InitializeFailed: 'InitializeFailed',
  MachineFailed: 'MachineFailed',
  ReplacementBudgetExhausted: 'ReplacementBudgetExhausted',
  LaunchFailed: 'LaunchFailed',
  LaunchBackoff: 'LaunchBackoff',
  InterruptedPodsRescheduled: 'InterruptedPodsRescheduled',
  DeleteFailed: 'DeleteFailed',
  StaleNode: 'StaleNode',
  NodeNotOwned: 'NodeNotOwned',
  DrainBlocked: 'DrainBlocked',
  DrainForced: 'DrainForced',
  Preserved: 'Preserved',
  InPlaceUpdating: 'InPlaceUpdating',
  InPlaceUpdateSuccessful: 'InPlaceUpdateSuccessful',
  InPlaceUpdateFailed: 'InPlaceUpdateFailed',
} as const;
