// The provider driver contract, in the shape of gardener MCM's Driver interface
// (pkg/util/provider/driver): six calls, each taking a request and returning a response or
// throwing a MachineError. The controller owns retries, timeouts and bookkeeping; a driver only
// talks to its cloud.

import type { Machine, MachineClass, NodeAddress } from '../api/types.js';
import type { PersistentVolumeSpec, Secret } from '../kube/types.js';

/** What every machine call gets: the machine, its class and the merged secret of the class. */
export interface MachineRequest {
  /**
   * The machine. For deleting a VM whose machine object is gone (orphan collection), a synthetic
   * machine holding only name, namespace and spec.providerID.
   */
  machine: Machine;
  machineClass: MachineClass;
  /**
   * secretRef's data merged with credentialsSecretRef's (credentials win), with the
   * placeholders in `userData` already substituted.
   */
  secret: Secret;
}

export type CreateMachineRequest = MachineRequest;
export type InitializeMachineRequest = MachineRequest;
export type DeleteMachineRequest = MachineRequest;
export type GetMachineStatusRequest = MachineRequest;

export interface CreateMachineResponse {
  providerID: string;
  nodeName: string;
  lastKnownState?: string;
  /** Only used when running without a target cluster. */
  addresses?: NodeAddress[];
}

export interface InitializeMachineResponse {
  providerID: string;
  nodeName: string;
  addresses?: NodeAddress[];
}

export interface DeleteMachineResponse {
  lastKnownState?: string;
}

export interface GetMachineStatusResponse {
  providerID: string;
  nodeName: string;
  addresses?: NodeAddress[];
}

export interface ListMachinesRequest {
  machineClass: MachineClass;
  secret: Secret;
}

export interface ListMachinesResponse {
  /** providerID → machine name, for every VM of the class. */
  machineList: Record<string, string>;
}

export interface GetVolumeIDsRequest {
  pvSpecs: PersistentVolumeSpec[];
}

export interface GetVolumeIDsResponse {
  /** Cloud volume IDs of the specs this driver knows; foreign volumes are left out. */
  volumeIDs: string[];
}

/**
 * A cloud provider driver. Every call may throw a MachineError (see codes.ts) and should honour
 * the signal. CreateMachine must be idempotent per machine name: calling it again for a machine
 * whose VM exists returns that VM.
 */
export interface Driver {
  createMachine(req: CreateMachineRequest, signal?: AbortSignal): Promise<CreateMachineResponse>;
  /** Unimplemented means "nothing to initialise"; Uninitialized that initialisation failed. */
  initializeMachine(req: InitializeMachineRequest, signal?: AbortSignal): Promise<InitializeMachineResponse>;
  /** NotFound means the VM is already gone. Should return once the VM is really gone. */
  deleteMachine(req: DeleteMachineRequest, signal?: AbortSignal): Promise<DeleteMachineResponse>;
  /** NotFound when no VM exists; Uninitialized when it exists but is not initialised. */
  getMachineStatus(req: GetMachineStatusRequest, signal?: AbortSignal): Promise<GetMachineStatusResponse>;
  listMachines(req: ListMachinesRequest, signal?: AbortSignal): Promise<ListMachinesResponse>;
  getVolumeIDs(req: GetVolumeIDsRequest, signal?: AbortSignal): Promise<GetVolumeIDsResponse>;
}

/** The driver calls, as metric label values (MCM's operation names). */
export const DriverOperation = {
  CreateMachine: 'create_machine',
  InitializeMachine: 'initialize_machine',
  DeleteMachine: 'delete_machine',
  GetMachineStatus: 'get_machine_status',
  ListMachines: 'list_machines',
  GetVolumeIDs: 'get_volume_ids',
} as const;
export type DriverOperation = (typeof DriverOperation)[keyof typeof DriverOperation];
