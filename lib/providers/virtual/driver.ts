import type { MachineClass } from '../../api/types.js';
import { MachineError } from '../../driver/codes.js';
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
  InitializeMachineRequest,
  InitializeMachineResponse,
  ListMachinesRequest,
  ListMachinesResponse,
  MachineRequest,
} from '../../driver/driver.js';
import type { InventoryVm } from '../../driver/registry.js';
import type { Clock } from '../../kube/clock.js';
import { objectKey } from '../../kube/informer.js';
import { parseProviderSpec, vmShapeOf, type VirtualProviderSpec, type VirtualVmShape } from './spec.js';
import type { VmRecord, VmStore } from './store.js';
import { VIRTUAL_CSI_DRIVER, vmNameOfProviderID } from './vm.js';

export interface VirtualDriverOptions {
  store: VmStore;
  clock: Clock;
  /** Source of randomness for injected errors (tests pass a deterministic one). */
  random?: () => number;
}

/**
 * The driver of the built-in simulated cloud. Every VM is named after its machine, so creation is
 * idempotent per machine (a second create finds the first VM); a class's providerSpec adds API
 * latency, injected errors, per-zone capacity and failure modes (see spec.ts).
 */
export class VirtualDriver implements Driver {
  private readonly store: VmStore;
  private readonly clock: Clock;
  private readonly random: () => number;
  /**
   * VMs per zone created (or being created) by this driver that the cache may not show yet, so
   * that concurrent creates cannot overrun a zone's capacity. A name leaves the set once the cache
   * shows its VM (it is counted there from then on), or when its creation fails.
   */
  private readonly pending = new Map<string, Set<string>>();

  constructor(opts: VirtualDriverOptions) {
    this.store = opts.store;
    this.clock = opts.clock;
    this.random = opts.random ?? Math.random;
  }

  private config(cls: MachineClass): { spec: VirtualProviderSpec; shape: VirtualVmShape } {
    const parsed = parseProviderSpec(cls.providerSpec);
    if (!parsed.ok) {
      throw new MachineError(
        'InvalidArgument',
        `invalid providerSpec of MachineClass ${cls.metadata.name ?? ''}: ${parsed.problems.join('; ')}`,
      );
    }
    return { spec: parsed.spec, shape: vmShapeOf(cls) };
  }

  /** Latency, then an injected error with the class's error rate (nothing is done then). */
  private async enter(spec: VirtualProviderSpec, call: string, signal?: AbortSignal): Promise<void> {
    await this.store.waitForSync(signal);
    if (spec.apiLatencyMs > 0) await this.clock.sleep(spec.apiLatencyMs, signal);
    if (spec.errorRate > 0 && this.random() < spec.errorRate) {
      throw new MachineError(
        'Unavailable',
        `virtual cloud: injected ${call} error (errorRate ${spec.errorRate})`,
      );
    }
  }

  private vmName(req: MachineRequest): string {
    return vmNameOfProviderID(req.machine.spec?.providerID ?? '') ?? req.machine.metadata.name ?? '';
  }

  /** The live VM of the machine, if any: by the name in its providerID, else by its own name. */
  private vmOf(req: MachineRequest): VmRecord | undefined {
    return this.ownVm(req, this.store.get(this.vmName(req)));
  }

  private ownVm(req: MachineRequest, rec: VmRecord | undefined): VmRecord | undefined {
    if (rec === undefined || rec.terminating) return undefined;
    return rec.machine === objectKey(req.machine) ? rec : undefined;
  }

  private notFound(req: MachineRequest): MachineError {
    return new MachineError('NotFound', `no VM for machine ${objectKey(req.machine)}`);
  }

  private checkCapacity(spec: VirtualProviderSpec, zone: string, name: string): void {
    const limit = spec.zoneCapacity[zone];
    if (limit === undefined) return;
    const pending = this.pending.get(zone) ?? new Set<string>();
    for (const n of [...pending]) if (this.store.get(n) !== undefined) pending.delete(n);
    const used = this.store.countInZone(zone) + [...pending].filter((n) => n !== name).length;
    if (used >= limit) {
      throw new MachineError(
        'ResourceExhausted',
        `zone ${zone} has no capacity left: ${used} of ${limit} VMs in use`,
      );
    }
  }

  async createMachine(req: CreateMachineRequest, signal?: AbortSignal): Promise<CreateMachineResponse> {
    const { spec, shape } = this.config(req.machineClass);
    await this.enter(spec, 'CreateMachine', signal);
    const name = req.machine.metadata.name ?? '';
    const existing = this.vmOf(req);
    if (existing !== undefined) {
      return { providerID: existing.providerID, nodeName: existing.name, addresses: existing.addresses };
    }
    this.checkCapacity(spec, shape.zone, name);
    const zoneSet = this.pending.get(shape.zone) ?? new Set<string>();
    this.pending.set(shape.zone, zoneSet);
    zoneSet.add(name);
    try {
      const now = this.clock.now();
      const rec = await this.store.create(
        {
          name,
          machine: objectKey(req.machine),
          machineClass: req.machineClass.metadata.name ?? '',
          shape,
          bootAt: now + spec.bootDelayMs,
          notReadyAt:
            spec.failure.notReadyAfterMs === undefined
              ? undefined
              : now + spec.bootDelayMs + spec.failure.notReadyAfterMs,
          bootNeverCompletes: spec.failure.bootNeverCompletes,
          nodeLabels: req.machine.spec?.nodeTemplate?.metadata?.labels,
          nodeTaints: req.machine.spec?.nodeTemplate?.spec?.taints,
        },
        now,
        signal,
      );
      return { providerID: rec.providerID, nodeName: rec.name, addresses: rec.addresses };
    } catch (err) {
      zoneSet.delete(name);
      throw err;
    }
  }

  async initializeMachine(
    req: InitializeMachineRequest,
    signal?: AbortSignal,
  ): Promise<InitializeMachineResponse> {
    const { spec } = this.config(req.machineClass);
    await this.enter(spec, 'InitializeMachine', signal);
    // Called right after CreateMachine: the VM may not be in the cache yet, but a cloud's API
    // knows a VM it has just started.
    const vm = this.ownVm(req, await this.store.getFresh(this.vmName(req), signal));
    if (vm === undefined) throw this.notFound(req);
    if (vm.bootNeverCompletes) {
      throw new MachineError('Uninitialized', `VM ${vm.name} did not finish booting`);
    }
    return { providerID: vm.providerID, nodeName: vm.name, addresses: vm.addresses };
  }

  async getMachineStatus(
    req: GetMachineStatusRequest,
    signal?: AbortSignal,
  ): Promise<GetMachineStatusResponse> {
    const { spec } = this.config(req.machineClass);
    await this.enter(spec, 'GetMachineStatus', signal);
    const vm = this.vmOf(req);
    if (vm === undefined) throw this.notFound(req);
    if (vm.bootNeverCompletes) {
      throw new MachineError('Uninitialized', `VM ${vm.name} exists but has not finished booting`);
    }
    return { providerID: vm.providerID, nodeName: vm.name, addresses: vm.addresses };
  }

  async deleteMachine(req: DeleteMachineRequest, signal?: AbortSignal): Promise<DeleteMachineResponse> {
    // A class that became invalid must not keep a VM alive: deletion ignores the options but
    // latency and errors, and those only when they parse.
    const parsed = parseProviderSpec(req.machineClass.providerSpec);
    if (parsed.ok) await this.enter(parsed.spec, 'DeleteMachine', signal);
    else await this.store.waitForSync(signal);
    const vm = this.ownVm(req, await this.store.getFresh(this.vmName(req), signal));
    if (vm !== undefined) this.pending.get(vm.zone)?.delete(vm.name);
    if (vm === undefined || !(await this.store.delete(vm, signal))) throw this.notFound(req);
    return {};
  }

  async listMachines(req: ListMachinesRequest, signal?: AbortSignal): Promise<ListMachinesResponse> {
    await this.store.waitForSync(signal);
    const cls = req.machineClass;
    const machineList: Record<string, string> = {};
    const prefix = `${cls.metadata.namespace ?? ''}/`;
    for (const vm of this.store.list()) {
      if (vm.terminating || vm.machineClass !== (cls.metadata.name ?? '') || !vm.machine.startsWith(prefix))
        continue;
      machineList[vm.providerID] = vm.machine.slice(prefix.length);
    }
    return { machineList };
  }

  /** Every live VM, whatever its class (the orphan collection's view of VMs of deleted classes). */
  async listAllMachines(signal?: AbortSignal): Promise<InventoryVm[]> {
    await this.store.waitForSync(signal);
    const out: InventoryVm[] = [];
    for (const vm of this.store.list()) {
      const slash = vm.machine.indexOf('/');
      if (vm.terminating || slash < 0) continue;
      out.push({
        providerID: vm.providerID,
        machineNamespace: vm.machine.slice(0, slash),
        machineName: vm.machine.slice(slash + 1),
        machineClass: vm.machineClass,
      });
    }
    return out;
  }

  /** The virtual cloud's volumes are those of its CSI driver; other volumes are not its own. */
  getVolumeIDs(req: GetVolumeIDsRequest): Promise<GetVolumeIDsResponse> {
    const volumeIDs = req.pvSpecs.flatMap((pv) =>
      pv.csi?.driver === VIRTUAL_CSI_DRIVER ? [pv.csi.volumeHandle] : [],
    );
    return Promise.resolve({ volumeIDs });
  }
}
