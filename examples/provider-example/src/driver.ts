// The six driver calls for the example cloud. A real provider has the same skeleton: parse the
// class, talk to the cloud, map its answers to the contract's codes, never put the secret in a
// message.

import type {
  CreateMachineRequest,
  CreateMachineResponse,
  DeleteMachineRequest,
  DeleteMachineResponse,
  Driver,
  GetMachineStatusRequest,
  GetMachineStatusResponse,
  GetVolumeIDsRequest,
  GetVolumeIDsResponse,
  InitializeMachineResponse,
  ListMachinesRequest,
  ListMachinesResponse,
  ProviderApi,
} from '../../../lib/driver/index.js';
import { FileCloud, vmIdFor, type VmRecord } from './cloud.js';
import { parseSpec, type ExampleSpec } from './spec.js';

export const PROVIDER_NAME = 'example';
export const PROVIDER_ID_PREFIX = 'example://';
/** The CSI driver whose volumes this cloud owns (GetVolumeIDs). */
export const CSI_DRIVER = 'disk.example.mcm-ts.io';

export function providerIDOf(vm: Pick<VmRecord, 'zone' | 'id'>): string {
  return `${PROVIDER_ID_PREFIX}/${vm.zone}/${vm.id}`;
}

/** The VM id of an example providerID, or undefined when it is not one. */
export function vmIdOf(providerID: string | undefined): string | undefined {
  return /^example:\/\/\/[^/]+\/(ex-[0-9a-f]{16})$/.exec(providerID ?? '')?.[1];
}

/** What happens when a VM is up: in a real cloud its kubelet registers the Node. */
export type OnBoot = (vm: VmRecord, spec: ExampleSpec) => Promise<void>;

export class ExampleDriver implements Driver {
  constructor(
    private readonly api: ProviderApi,
    private readonly onBoot: OnBoot = () => Promise.resolve(),
  ) {}

  async createMachine(req: CreateMachineRequest): Promise<CreateMachineResponse> {
    const spec = parseSpec(this.api, req.machineClass);
    const { namespace = '', name = '', uid = '' } = req.machine.metadata;
    if (uid === '') throw new this.api.MachineError('InvalidArgument', `machine ${name} has no uid`);
    const vm = await new FileCloud(spec.directory).create({
      id: vmIdFor(namespace, name, uid),
      machine: `${namespace}/${name}`,
      machineClass: req.machineClass.metadata.name ?? '',
      machineType: spec.machineType,
      zone: spec.zone,
      createdAt: new Date().toISOString(),
    });
    await this.onBoot(vm, spec);
    return { providerID: providerIDOf(vm), nodeName: vm.id };
  }

  initializeMachine(): Promise<InitializeMachineResponse> {
    return Promise.reject(
      new this.api.MachineError('Unimplemented', 'the example cloud needs no initialisation'),
    );
  }

  async deleteMachine(req: DeleteMachineRequest): Promise<DeleteMachineResponse> {
    const spec = parseSpec(this.api, req.machineClass);
    const id = this.idOf(req);
    // A VM that is already gone is a successful delete.
    if (id !== undefined) await new FileCloud(spec.directory).delete(id);
    return {};
  }

  async getMachineStatus(req: GetMachineStatusRequest): Promise<GetMachineStatusResponse> {
    const spec = parseSpec(this.api, req.machineClass);
    const id = this.idOf(req);
    const vm = id === undefined ? undefined : await new FileCloud(spec.directory).get(id);
    if (vm === undefined) {
      throw new this.api.MachineError('NotFound', `no VM for machine ${req.machine.metadata.name ?? ''}`);
    }
    return { providerID: providerIDOf(vm), nodeName: vm.id };
  }

  async listMachines(req: ListMachinesRequest): Promise<ListMachinesResponse> {
    const spec = parseSpec(this.api, req.machineClass);
    const machineList: Record<string, string> = {};
    for (const vm of await new FileCloud(spec.directory).list()) {
      if (vm.machineClass !== req.machineClass.metadata.name) continue;
      machineList[providerIDOf(vm)] = vm.machine.split('/')[1] ?? '';
    }
    return { machineList };
  }

  getVolumeIDs(req: GetVolumeIDsRequest): Promise<GetVolumeIDsResponse> {
    const volumeIDs = req.pvSpecs.flatMap((pv) =>
      pv.csi?.driver === CSI_DRIVER && pv.csi.volumeHandle !== '' ? [pv.csi.volumeHandle] : [],
    );
    return Promise.resolve({ volumeIDs });
  }

  /** The VM of a request: from the recorded providerID, else derived from the machine. */
  private idOf(req: CreateMachineRequest): string | undefined {
    const fromID = vmIdOf(req.machine.spec?.providerID);
    if (fromID !== undefined) return fromID;
    const { namespace = '', name = '', uid = '' } = req.machine.metadata;
    return uid === '' ? undefined : vmIdFor(namespace, name, uid);
  }
}
