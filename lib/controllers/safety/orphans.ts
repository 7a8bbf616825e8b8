// Orphan VM collection (MCM's safety-net for VMs without machines): every
// --machine-safety-orphan-vms-period, and shortly after a machine is deleted, each MachineClass's
// provider lists its VMs, and a VM whose machine does not exist is deleted. A VM is only deleted
// when its machine is neither in the cache nor in the API server (read live: the cache may lag
// behind a machine just created) and no creation for that machine is running; a VM whose machine
// exists is never deleted. A VM whose machine was deleted just before or while the VMs were listed
// waits for a later pass: the machine's deletion deleted it, and the listing may predate that.
// VMs of a class that is gone cannot be listed through it: the class controller keeps a class
// until a pass over its VMs came out clean (passBeforeRelease), and providers that can list all
// their VMs (listAllMachines) are also asked for those of deleted classes.

import { Counter, type Registry } from 'prom-client';

import { EventSource, MACHINE_CLASS_KIND, MachinePhase } from '../../api/constants.js';
import { API_VERSION, MachineResource, type Machine, type MachineClass } from '../../api/types.js';
import { decodeMachineError } from '../../driver/codes.js';
import type { Driver, MachineRequest } from '../../driver/driver.js';
import type { InventoryVm, ProviderRegistry } from '../../driver/registry.js';
import type { TimerHandle } from '../../kube/clock.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Secret } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import type { ControllerContext } from '../context.js';
import { phaseOf, type AnyMachine } from '../machines.js';
import { resolveMachineClass } from '../machine/resolve.js';

/** Why a VM listed by a provider is kept, or that its machine must be looked up live. */
export type VmVerdict =
  /** Its machine exists and records this VM's providerID. */
  | 'owned'
  /** Its machine exists and has no VM recorded yet, or is still in its creation flow. */
  | 'being-created'
  /**
   * Its machine exists but records another VM: a second VM for one machine. MCM deletes it; we
   * keep it and report it, because a provider reporting providerIDs in another form than it
   * returned on creation would otherwise lose every VM.
   */
  | 'duplicate'
  /** No machine of that name in the cache: an orphan unless the API server knows the machine. */
  | 'no-machine';

const CREATING_PHASES: ReadonlySet<string> = new Set([
  MachinePhase.Creating,
  MachinePhase.Pending,
  MachinePhase.CrashLoopBackOff,
]);

/**
 * Classifies a VM by its machine (undefined: none of that name). A machine whose creation is
 * running right now (creationInFlight) protects its VM even when the machine object is gone.
 */
export function classifyVm(
  providerID: string,
  machine: AnyMachine | undefined,
  creationInFlight: boolean,
): VmVerdict {
  if (machine === undefined) return creationInFlight ? 'being-created' : 'no-machine';
  const recorded = machine.spec?.providerID ?? '';
  if (recorded === providerID) return 'owned';
  if (recorded === '' || creationInFlight || CREATING_PHASES.has(phaseOf(machine))) return 'being-created';
  return 'duplicate';
}

/** What a pass over one class's VMs decided, before any live read or deletion. */
export interface OrphanPlan {
  /** VMs whose machine is not in the cache: to be confirmed with a live read, then deleted. */
  candidates: { providerID: string; machineName: string }[];
  duplicates: { providerID: string; machineName: string; recorded: string }[];
  kept: number;
  /** Of the kept VMs, those without a machine in the cache whose creation is running. */
  creating: number;
  /**
   * Of the kept VMs, those whose machine was deleted just before or while the VM was listed: its
   * deletion deleted the VM, which the listing may predate. A later pass collects it if it stays.
   */
  settling: number;
}

/** Sorts a provider's VM listing (providerID → machine name) into kept VMs and candidates. */
export function planOrphans(
  listing: Readonly<Record<string, string>>,
  machineOf: (name: string) => AnyMachine | undefined,
  creationInFlight: (name: string) => boolean,
  alreadySeen: ReadonlySet<string> = new Set(),
  justDeleted: (name: string) => boolean = () => false,
): OrphanPlan {
  const plan: OrphanPlan = { candidates: [], duplicates: [], kept: 0, creating: 0, settling: 0 };
  for (const [providerID, machineName] of Object.entries(listing).sort(([a], [b]) => a.localeCompare(b))) {
    if (alreadySeen.has(providerID)) continue;
    const m = machineOf(machineName);
    switch (classifyVm(providerID, m, creationInFlight(machineName))) {
      case 'no-machine':
        if (justDeleted(machineName)) {
          plan.settling++;
          plan.kept++;
        } else plan.candidates.push({ providerID, machineName });
        break;
      case 'duplicate':
        plan.duplicates.push({ providerID, machineName, recorded: m?.spec?.providerID ?? '' });
        plan.kept++;
        break;
      case 'being-created':
        if (m === undefined) plan.creating++;
        plan.kept++;
        break;
      case 'owned':
        plan.kept++;
    }
  }
  return plan;
}

/** What a pass over some VMs came to. */
interface PassOutcome {
  collected: number;
  /** Failed listings, live reads and deletions (retried). */
  failures: number;
  /** VMs kept for now: their machine exists beyond the cache or is being created. */
  waiting: number;
}

/**
 * Whether a class no machine refers to may lose its finalizer (go, when it is being deleted); if
 * not, whether to look again soon (a creation or a freeze to wait out) or after a backoff (a
 * listing or deletion failed).
 */
export type ReleaseVerdict =
  { release: true; collected: number } | { release: false; reason: string; retry: 'soon' | 'backoff' };

/** How the VMs of one class are reached: driver, credentials, the class (or a bare one). */
interface ClassCall {
  driver: Driver;
  secret: Secret;
  provider: string;
  machineClass: MachineClass;
  namespace: string;
  /** Whether events go to the class (it exists). */
  events: boolean;
}

/** How soon after a machine deletion the extra pass runs (deletions in a burst share it). */
export const AFTER_DELETION_DELAY_MS = 5_000;
/**
 * A machine deleted less than this before a listing began, or after, leaves its VM to a later
 * pass: its deletion flow deleted the VM, which a listing taken around then may still show (a
 * cloud's listing may also lag its deletions a little). Shorter than AFTER_DELETION_DELAY_MS, so
 * the pass a deletion triggers collects a VM the deletion left behind.
 */
export const DELETION_SETTLE_MS = 2_000;
/** How long a machine's deletion time is remembered for passes that listed before it. */
const DELETION_MEMORY_MS = 60_000;

/** Event reasons (on the MachineClass, or the machine of a duplicate VM). */
export const OrphanEventReason = {
  OrphanVMDeleted: 'OrphanVMDeleted',
  OrphanVMDeleteFailed: 'OrphanVMDeleteFailed',
  DuplicateVM: 'DuplicateVM',
} as const;

const PASS_KEY = 'orphan-vms';

export interface OrphanCollectorOptions {
  providers: ProviderRegistry;
  /** --machine-safety-orphan-vms-period */
  periodMs: number;
  /** While true (API-server freeze) no pass runs. */
  frozen?: () => boolean;
  /** Whether the machine controller is running the creation flow of `namespace/name`. */
  creationInFlight?: (key: string) => boolean;
}

class OrphanMetrics {
  readonly collected: Counter<'provider'>;
  readonly failed: Counter<'provider'>;
  readonly duplicates: Counter<'provider'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.collected = new Counter({
      name: 'mcm_machine_safety_orphan_vms_collected_total',
      help: 'VMs deleted by the orphan collection because their machine did not exist.',
      labelNames: ['provider'],
      registers,
    });
    this.failed = new Counter({
      name: 'mcm_machine_safety_orphan_vm_deletions_failed_total',
      help: 'Failed deletions of orphan VMs (retried on the next pass).',
      labelNames: ['provider'],
      registers,
    });
    this.duplicates = new Counter({
      name: 'mcm_machine_safety_duplicate_vms_total',
      help: 'VMs found (per pass) whose machine records another VM; they are kept and reported.',
      labelNames: ['provider'],
      registers,
    });
  }
}

/** The orphan VM collection: one pass at a time, on a period and after machine deletions. */
export class OrphanVmCollector {
  readonly controller: Controller;
  private readonly recorder: EventRecorder;
  private readonly metrics: OrphanMetrics;
  private periodic: TimerHandle | undefined;
  /** When each machine's delete event arrived (name → ms), for passes listing around then. */
  private readonly deletedAt = new Map<string, number>();

  constructor(
    private readonly ctx: ControllerContext,
    private readonly opts: OrphanCollectorOptions,
  ) {
    this.recorder = ctx.recorderFor(EventSource.MachineController);
    this.metrics = new OrphanMetrics(ctx.registry);
    this.controller = new Controller({
      name: 'safety-orphan-vms',
      workers: 1,
      reconciler: { reconcile: (_key, rctx) => this.reconcile(rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
    });
    ctx.informers.machines.addHandler({
      onDelete: (m) => {
        this.deletedAt.set(m.metadata.name ?? '', this.ctx.clock.now());
        this.controller.enqueueAfter(PASS_KEY, AFTER_DELETION_DELAY_MS);
      },
      onUpdate: (old, m) => {
        // A provider that finds several VMs for one machine answers OutOfRange: look for the rest.
        if (
          old.status?.lastOperation?.errorCode !== 'OutOfRange' &&
          m.status?.lastOperation?.errorCode === 'OutOfRange'
        )
          this.controller.enqueue(PASS_KEY);
      },
    });
  }

  /** Runs a pass soon (tests, and anything that knows VMs may have leaked). */
  trigger(): void {
    this.controller.enqueue(PASS_KEY);
  }

  start(): void {
    this.controller.start();
    this.controller.enqueue(PASS_KEY);
    this.schedulePeriodic();
  }

  async stop(): Promise<void> {
    this.periodic?.cancel();
    await this.controller.stop();
  }

  private schedulePeriodic(): void {
    this.periodic = this.ctx.clock.setTimeout(
      () => {
        this.controller.enqueue(PASS_KEY);
        this.schedulePeriodic();
      },
      Math.max(1000, this.opts.periodMs),
    );
  }

  private creationInFlight(name: string): boolean {
    return this.opts.creationInFlight?.(`${this.ctx.namespace}/${name}`) ?? false;
  }

  async reconcile({ log }: ReconcileContext): Promise<ReconcileResult> {
    if (this.opts.frozen?.() === true) {
      log.info('orphan VM collection skipped: the machine controller is frozen');
      return {};
    }
    const now = this.ctx.clock.now();
    for (const [name, at] of this.deletedAt) if (now - at > DELETION_MEMORY_MS) this.deletedAt.delete(name);
    const seen = new Set<string>();
    const total: PassOutcome = { collected: 0, failures: 0, waiting: 0 };
    const add = (r: PassOutcome): void => {
      total.collected += r.collected;
      total.failures += r.failures;
    };
    for (const cls of this.ctx.informers.machineClasses.list(this.ctx.namespace)) {
      add(await this.collectClass(cls, seen, log));
    }
    for (const inventory of this.opts.providers.inventories()) {
      add(await this.collectOfDeletedClasses(inventory, seen, log));
    }
    log.verbose('orphan VM pass done', {
      vms: seen.size,
      collected: total.collected,
      failures: total.failures,
    });
    // Failed listings or deletions are retried within a minute rather than a whole period.
    return total.failures > 0 ? { requeueAfter: Math.min(60_000, Math.max(1000, this.opts.periodMs)) } : {};
  }

  /**
   * Runs a pass over one class's VMs now, for the class controller before it lets the class go
   * (once no machine refers to it): the class may go when no VM of it is left whose machine does
   * not exist. Not while frozen, not while such a VM cannot be deleted or its listing fails, and
   * not while a VM's machine is being created or exists beyond the cache.
   */
  async passBeforeRelease(cls: DeepReadonly<MachineClass>, log: Logger): Promise<ReleaseVerdict> {
    if (this.opts.frozen?.() === true) {
      return { release: false, reason: 'the machine controller is frozen', retry: 'soon' };
    }
    const r = await this.collectClass(cls, new Set(), log);
    if (r.failures > 0) {
      return {
        release: false,
        reason: `${r.failures} listing or deletion of its VMs failed`,
        retry: 'backoff',
      };
    }
    if (r.waiting > 0) {
      return {
        release: false,
        reason: `${r.waiting} of its VMs belong to machines that exist or are being created`,
        retry: 'soon',
      };
    }
    return { release: true, collected: r.collected };
  }

  /** The class's driver and (merged) secret, or undefined when it cannot be called. */
  private resolve(
    cls: DeepReadonly<MachineClass>,
    log: Logger,
  ): { driver: Driver; secret: Secret; provider: string } | undefined {
    const probe: Machine = {
      apiVersion: API_VERSION,
      kind: 'Machine',
      metadata: { namespace: cls.metadata.namespace ?? this.ctx.namespace },
      spec: { class: { kind: MACHINE_CLASS_KIND, name: cls.metadata.name ?? '' } },
    };
    const r = resolveMachineClass(
      {
        machineClasses: this.ctx.informers.machineClasses,
        secrets: this.ctx.informers.secrets,
        providers: this.opts.providers,
      },
      probe,
      { requireFinalizer: false },
    );
    if (!r.ok) {
      log.verbose('class skipped by the orphan VM collection', {
        machineClass: cls.metadata.name,
        reason: r.problem,
        message: r.message,
      });
      return undefined;
    }
    return { driver: r.driver, secret: r.secret, provider: r.provider };
  }

  private async collectClass(
    cls: DeepReadonly<MachineClass>,
    seen: Set<string>,
    log: Logger,
  ): Promise<PassOutcome> {
    const none: PassOutcome = { collected: 0, failures: 0, waiting: 0 };
    const call = this.resolve(cls, log);
    if (call === undefined) return none;
    const namespace = cls.metadata.namespace ?? this.ctx.namespace;
    const className = cls.metadata.name ?? '';
    const machineClass = structuredClone(cls) as MachineClass;
    const listedFrom = this.ctx.clock.now();
    let listing: Record<string, string>;
    try {
      listing = (await call.driver.listMachines({ machineClass, secret: call.secret })).machineList;
    } catch (err) {
      const e = decodeMachineError(err);
      if (e.ok && e.code === 'Unimplemented') {
        log.verbose('provider cannot list VMs; no orphan collection for this class', {
          machineClass: className,
          provider: call.provider,
        });
        return none;
      }
      log.warn('listing the VMs of a class failed', {
        machineClass: className,
        provider: call.provider,
        err,
      });
      return { ...none, failures: 1 };
    }
    return this.collectListed(
      listing,
      { ...call, machineClass, namespace, events: true },
      seen,
      listedFrom,
      log,
    );
  }

  /**
   * The VMs a provider's inventory holds for machines of this namespace whose class does not
   * exist: deleted through the provider with a bare class of that name (no providerSpec, no
   * credentials), which is all a provider that can list without a class needs.
   */
  private async collectOfDeletedClasses(
    inventory: ReturnType<ProviderRegistry['inventories']>[number],
    seen: Set<string>,
    log: Logger,
  ): Promise<PassOutcome> {
    const none: PassOutcome = { collected: 0, failures: 0, waiting: 0 };
    const driver = this.opts.providers.driverFor(inventory.provider);
    if (driver === undefined) return none;
    const listedFrom = this.ctx.clock.now();
    let vms: InventoryVm[];
    try {
      vms = await inventory.listAllMachines();
    } catch (err) {
      log.warn('listing all VMs of a provider failed', { provider: inventory.provider, err });
      return { ...none, failures: 1 };
    }
    const namespace = this.ctx.namespace;
    const byClass = new Map<string, Record<string, string>>();
    for (const vm of vms) {
      if (vm.machineNamespace !== namespace || seen.has(vm.providerID)) continue;
      if (this.ctx.informers.machineClasses.get(namespace, vm.machineClass) !== undefined) continue;
      const listing = byClass.get(vm.machineClass) ?? {};
      listing[vm.providerID] = vm.machineName;
      byClass.set(vm.machineClass, listing);
    }
    const total = { ...none };
    for (const [className, listing] of byClass) {
      const machineClass: MachineClass = {
        apiVersion: API_VERSION,
        kind: 'MachineClass',
        metadata: { name: className, namespace },
        provider: inventory.provider,
        providerSpec: {},
      };
      const secret: Secret = { apiVersion: 'v1', kind: 'Secret', metadata: { namespace }, data: {} };
      const call = { driver, secret, provider: inventory.provider, machineClass, namespace, events: false };
      const r = await this.collectListed(listing, call, seen, listedFrom, log);
      total.collected += r.collected;
      total.failures += r.failures;
      total.waiting += r.waiting;
    }
    return total;
  }

  /** Sorts a listing into kept VMs, duplicates and candidates, and collects the candidates. */
  private async collectListed(
    listing: Record<string, string>,
    call: ClassCall,
    seen: Set<string>,
    listedFrom: number,
    log: Logger,
  ): Promise<PassOutcome> {
    const machines = this.ctx.informers.machines;
    const plan = planOrphans(
      listing,
      (name) => machines.get(call.namespace, name),
      (name) => this.creationInFlight(name),
      seen,
      (name) => (this.deletedAt.get(name) ?? -Infinity) >= listedFrom - DELETION_SETTLE_MS,
    );
    for (const id of Object.keys(listing)) seen.add(id);
    for (const d of plan.duplicates) {
      this.metrics.duplicates.inc({ provider: call.provider });
      const m = machines.get(call.namespace, d.machineName);
      log.warn('a machine has a second VM; it is kept (delete it at the provider if it is not needed)', {
        machine: d.machineName,
        vm: d.providerID,
        recorded: d.recorded,
      });
      if (m !== undefined) {
        this.recorder.event(
          m,
          'Warning',
          OrphanEventReason.DuplicateVM,
          `Provider ${call.provider} lists VM ${d.providerID} for this machine, which records VM ${d.recorded}; the extra VM is not deleted automatically`,
        );
      }
    }
    if (plan.settling > 0)
      log.verbose('VMs of machines deleted around the listing are left to the next pass', {
        vms: plan.settling,
      });
    const outcome: PassOutcome = { collected: 0, failures: 0, waiting: plan.creating + plan.settling };
    for (const c of plan.candidates) {
      const r = await this.collectVm(call, c, log);
      if (r === 'deleted') outcome.collected++;
      if (r === 'failed') outcome.failures++;
      if (r === 'waiting') outcome.waiting++;
    }
    return outcome;
  }

  /**
   * Confirms that the VM's machine does not exist (live), then deletes the VM: 'waiting' when the
   * machine does exist or is being created, 'gone' when the VM went meanwhile.
   */
  private async collectVm(
    call: ClassCall,
    vm: { providerID: string; machineName: string },
    log: Logger,
  ): Promise<'deleted' | 'waiting' | 'gone' | 'failed'> {
    const { machineClass, namespace } = call;
    const fields = { machine: vm.machineName, vm: vm.providerID, machineClass: machineClass.metadata.name };
    let live: Machine | undefined;
    try {
      live = await this.ctx.client.get<Machine>(MachineResource, vm.machineName, namespace);
    } catch (err) {
      if (!isNotFound(err)) {
        log.warn('cannot read the machine of a VM; the VM is kept for now', { ...fields, err });
        return 'failed';
      }
    }
    if (live !== undefined || this.creationInFlight(vm.machineName)) {
      log.verbose('the machine of a VM exists (the cache is behind); the VM is kept', fields);
      return 'waiting';
    }
    const req: MachineRequest = {
      machine: {
        apiVersion: API_VERSION,
        kind: 'Machine',
        metadata: { name: vm.machineName, namespace },
        spec: {
          class: { kind: MACHINE_CLASS_KIND, name: machineClass.metadata.name ?? '' },
          providerID: vm.providerID,
        },
      },
      machineClass,
      secret: call.secret,
    };
    try {
      await call.driver.deleteMachine(req);
    } catch (err) {
      const e = decodeMachineError(err);
      if (e.ok && e.code === 'NotFound') return 'gone';
      this.metrics.failed.inc({ provider: call.provider });
      log.warn('deleting an orphan VM failed; retried on the next pass', { ...fields, err });
      if (call.events) {
        this.recorder.event(
          machineClass,
          'Warning',
          OrphanEventReason.OrphanVMDeleteFailed,
          `Deleting orphan VM ${vm.providerID} (of machine ${vm.machineName}, which does not exist) failed: ${e.message}`,
        );
      }
      return 'failed';
    }
    this.metrics.collected.inc({ provider: call.provider });
    log.info('deleted an orphan VM: its machine does not exist', fields);
    if (call.events) {
      this.recorder.event(
        machineClass,
        'Normal',
        OrphanEventReason.OrphanVMDeleted,
        `Deleted orphan VM ${vm.providerID}: its machine ${vm.machineName} does not exist`,
      );
    }
    return 'deleted';
  }
}
