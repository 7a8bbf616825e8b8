// The public provider contract, for providers written outside this repository (--provider-module).
// Import types from here; take runtime values (the error class) from the ProviderApi your
// registerProviders receives, so a module does not depend on where the manager is installed.

export type {
  CreateMachineRequest,
  CreateMachineResponse,
  DeleteMachineRequest,
  DeleteMachineResponse,
  Driver,
  GetMachineStatusRequest,
  GetMachineStatusResponse,
  GetVolumeIDsRequest,
  GetVolumeIDsResponse,
  InitializeMachineRequest,
  InitializeMachineResponse,
  ListMachinesRequest,
  ListMachinesResponse,
  MachineRequest,
} from './driver.js';
export { MachineError, decodeMachineError } from './codes.js';
export type { MachineErrorCodeName } from '../api/constants.js';
export type { ControlCaches, InventoryVm, Provider, ProviderContext, ProviderFactory } from './registry.js';
export { PROVIDER_API_VERSION, type ProviderApi, type ProviderModule } from './module.js';
export type { KubeApi } from '../kube/client.js';
export type { ResourceType } from '../kube/resources.js';
export type { Node, PersistentVolumeSpec, Secret } from '../kube/types.js';
export type { Machine, MachineClass } from '../api/types.js';
export type { Logger } from '../observability/logger.js';
