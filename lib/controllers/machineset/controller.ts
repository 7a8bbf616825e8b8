import { registerMachineSetMetrics } from './metrics.js';
import {
  Annotation,
  EventReason,
  EventSource,
  Finalizer,
  MachineOperationType,
  MachinePhase,
  MachineState,
  PreserveValue,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import {
  API_VERSION,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineSet,
  type MachineSetStatus,
} from '../../api/types.js';
import { formatValidationErrors, validateMachineSet } from '../../api/validation.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { jsonEqual } from '../../kube/equal.js';
import { errorMessage, isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import { CONTROLLER_UID_INDEX, clone, objectKey, type DeepReadonly } from '../../kube/informer.js';
import type { Pod } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import type { MachineCounts } from '../accounting.js';
import { MACHINE_NODE_INDEX, type ControllerContext } from '../context.js';
import { Expectations } from '../expectations.js';
import { controllerRefOf, isReplacing, phaseOf, type AnyMachine } from '../machines.js';
import { machineVeto, podVeto } from '../vetoes.js';
import {
  addFinalizer,
  cachedController,
  claim,
  controllerReference,
  planClaim,
  removeFinalizer,
  type Owner,
  selectingOwners,
} from '../ownership.js';
import { planAutoPreservation, propagationPatch } from './propagate.js';
import { planReplicas, planReplicasFromCounts, slowStartBatch, type ReplicaPlan } from './replicas.js';
import {
  ReplicaFailureReason,
  calculateStatus,
  calculateStatusFromCounts,
  statusWriteDelay,
} from './status.js';

/** MCM re-syncs every MachineSet this often even without events. */
export const MACHINESET_RESYNC_MS = 10 * 60 * 1000;
/** Least time between two status writes of a set that change only its machine counts. */
export const MACHINESET_COUNTS_STATUS_INTERVAL_MS = 1000;

type CachedMachine = DeepReadonly<Machine>;
type CachedMachineSet = DeepReadonly<MachineSet>;

/** A pass the set's counts decide (see fromCounts). */
interface QuickPass {
  /** What to do: a plan, 'pick' (planReplicas over the set's own machines), or nothing yet. */
  plan: ReplicaPlan<never> | 'pick' | undefined;
  counts: MachineCounts;
}

/** What went wrong creating or deleting machines: reported in status, rethrown for backoff. */
interface ReplicaFailure {
  reason: string;
  message: string;
  /** The error itself, kept as the cause of the rethrown one. */
  error: unknown;
}

/**
 * Keeps each MachineSet's machines at its replica count: adopts and releases machines by
 * selector and controller reference, creates missing machines in slow-start batches, deletes
 * surplus, marked and failed machines in MCM's order, keeps node templates and machine
 * configuration in step, and reports status. Expectations gate every create/delete decision, so a
 * cache that lags behind the controller's own writes never causes a second round of them.
 */
export class MachineSetController {
  readonly controller: Controller;
  readonly expectations: Expectations;
  private readonly recorder: EventRecorder;
  /** When this process last wrote each set's status (by key), for statusWriteDelay. */
  private readonly statusWrittenAt = new Map<string, number>();
  private readonly log: Logger;

  constructor(
    private readonly ctx: ControllerContext,
    workers = 5,
  ) {
    this.expectations = new Expectations(ctx.clock);
    this.recorder = ctx.recorderFor(EventSource.MachineSetController);
    this.log = ctx.logger.child({ controller: 'machineset' });
    registerMachineSetMetrics(ctx.registry, ctx.informers.machineSets);
    this.controller = new Controller({
      name: 'machineset',
      workers,
      reconciler: { reconcile: (key, rctx) => this.reconcile(key, rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
    });
    this.wire();
  }

  private enqueue(ms: CachedMachineSet | MachineSet): void {
    this.controller.enqueue(objectKey(ms));
  }

  private ownerOf(m: CachedMachine): CachedMachineSet | undefined {
    return cachedController(this.ctx.informers.machineSets, m, MachineSetResource.kind);
  }

  private enqueueSelecting(m: CachedMachine): void {
    for (const ms of selectingOwners<MachineSet>(this.ctx.informers.machineSets, m)) this.enqueue(ms);
  }

  private wire(): void {
    const { machineSets, machines } = this.ctx.informers;
    machineSets.addHandler({
      onAdd: (ms) => {
        this.enqueue(ms);
      },
      onUpdate: (_old, ms) => {
        this.enqueue(ms);
      },
      onDelete: (ms) => {
        this.expectations.delete(objectKey(ms));
        this.enqueue(ms);
      },
    });
    machines.addHandler({
      onAdd: (m) => {
        const owner = this.ownerOf(m);
        if (owner !== undefined) {
          const key = objectKey(owner);
          if (m.metadata.deletionTimestamp !== undefined)
            this.expectations.deletionObserved(key, m.metadata.uid ?? '');
          else this.expectations.creationObserved(key);
          this.enqueue(owner);
        } else if (controllerRefOf(m) === undefined) {
          this.enqueueSelecting(m);
        }
      },
      onUpdate: (old, m) => {
        const owner = this.ownerOf(m);
        if (
          owner !== undefined &&
          old.metadata.deletionTimestamp === undefined &&
          m.metadata.deletionTimestamp !== undefined
        ) {
          this.expectations.deletionObserved(objectKey(owner), m.metadata.uid ?? '');
        }
        const oldOwner = this.ownerOf(old);
        if (oldOwner !== undefined && oldOwner.metadata.uid !== owner?.metadata.uid) this.enqueue(oldOwner);
        if (owner !== undefined) this.enqueue(owner);
        else if (controllerRefOf(m) === undefined) this.enqueueSelecting(m);
      },
      onDelete: (m) => {
        const owner = this.ownerOf(m);
        if (owner !== undefined) {
          this.expectations.deletionObserved(objectKey(owner), m.metadata.uid ?? '');
          this.enqueue(owner);
        }
      },
    });
    // A replaced machine waits for the pod vetoing disruption of its node: its end wakes the set.
    const vetoEnded = (p: DeepReadonly<Pod>): void => {
      const node = p.spec?.nodeName;
      if (node === undefined || node === '') return;
      for (const m of machines.byIndex(MACHINE_NODE_INDEX, node)) {
        if (!isReplacing(m)) continue;
        const owner = this.ownerOf(m);
        if (owner !== undefined) this.enqueue(owner);
      }
    };
    this.ctx.informers.drain?.pods.addHandler({
      onUpdate: (old, p) => {
        if (podVeto(old) !== undefined && podVeto(p) === undefined) vetoEnded(p);
      },
      onDelete: (p) => {
        if (podVeto(p) !== undefined) vetoEnded(p);
      },
    });
  }

  start(): void {
    this.controller.start();
  }

  async stop(): Promise<void> {
    await this.controller.stop();
  }

  async reconcile(key: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const cached = this.ctx.informers.machineSets.getByKey(key);
    if (cached === undefined) {
      this.expectations.delete(key);
      this.statusWrittenAt.delete(key);
      return {};
    }
    let ms = clone<MachineSet>(cached);
    const now = this.ctx.clock.now();

    const problems = validateMachineSet(ms);
    if (problems.length > 0) {
      const message = formatValidationErrors(problems);
      this.recorder.event(ms, 'Warning', ReplicaFailureReason.InvalidSpec, message);
      const wait = await this.writeStatus(
        ms,
        calculateStatus({
          ms,
          machines: [],
          now,
          replicaFailure: { reason: ReplicaFailureReason.InvalidSpec, message },
        }),
        now,
      );
      log.info('invalid MachineSet, not reconciling it', { problems: message });
      return wait === undefined ? {} : { requeueAfter: wait };
    }

    const deleting = ms.metadata.deletionTimestamp !== undefined;
    if (!deleting && !(ms.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) {
      ms = await addFinalizer(this.ctx.client, MachineSetResource, ms, Finalizer.MachineControllerManager);
    }

    if (!deleting) {
      const counts = this.ctx.informers.machineCounts.countsOf(cached);
      const quick = this.fromCounts(ms, counts, this.expectations.satisfied(key));
      if (quick !== undefined) return this.reconcileFromCounts(ms, quick, now, log);
    }

    let machines = await this.claimMachines(ms, deleting);
    await this.propagateTemplate(ms, machines);
    machines = await this.manageAutoPreservation(ms, machines);

    let failure: ReplicaFailure | undefined;
    let recheckAfter: number | undefined;
    if (!deleting) {
      if (this.expectations.satisfied(key)) {
        const managed = await this.manageReplicas(ms, machines, log);
        failure = managed.failure;
        recheckAfter = managed.recheckAfter;
      } else {
        log.debug(
          'waiting for earlier creations/deletions to show up in the cache',
          this.expectations.pending(key),
        );
      }
    } else if (machines.length === 0) {
      // Machines created a moment ago may not be in the cache yet: the set must not go before
      // they show up (and are deleted), or they would be left without an owner.
      if (!this.expectations.satisfied(key)) {
        log.debug(
          'deleted, but waiting for its own creations to show up in the cache',
          this.expectations.pending(key),
        );
        return { requeueAfter: Math.max(1000, this.expectations.expiresIn(key) + 1) };
      }
      if ((ms.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) {
        await removeFinalizer(this.ctx.client, MachineSetResource, ms, Finalizer.MachineControllerManager);
      }
      return {};
    } else {
      // Deleting: a machine that cannot be deleted is a failure like any other (status, backoff).
      failure = await this.terminate(
        ms,
        machines.filter((m) => m.metadata.deletionTimestamp === undefined),
        log,
      );
    }

    const status = calculateStatus({
      ms,
      machines,
      now,
      replicaFailure:
        failure === undefined ? undefined : { reason: failure.reason, message: failure.message },
    });
    const wait = await this.writeStatus(ms, status, now);
    if (failure !== undefined) {
      throw new Error(`MachineSet ${key}: ${failure.message}`, { cause: failure.error });
    }
    return { requeueAfter: Math.min(wait ?? MACHINESET_RESYNC_MS, recheckAfter ?? Infinity) };
  }

  /**
   * What a pass would do, from the set's machine counts alone, when they prove that it has
   * nothing to adopt, release, propagate or auto-preserve and no failed machine: the plan (none
   * while the expectations do not let it act), or 'pick' when machines must be picked for
   * deletion, which needs only the set's own machines in hand. Undefined when the pass must look
   * at every machine.
   */
  private fromCounts(ms: MachineSet, counts: MachineCounts, satisfied: boolean): QuickPass | undefined {
    if (counts.releasable > 0 || counts.selectedNeedingPropagation > 0) return undefined;
    if (counts.selectedAutoPreserved > (ms.spec?.autoPreserveFailedMachineMax ?? 0)) return undefined;
    const orphans = this.ctx.informers.machineCounts.orphans(ms.metadata.namespace);
    if (orphans.length > 0 && planClaim(this.owner(ms, false), ms.spec?.selector, orphans).adopt.length > 0)
      return undefined;
    let plan: QuickPass['plan'];
    if (satisfied) plan = planReplicasFromCounts(ms, counts, this.ctx.settings.burstReplicas) ?? 'pick';
    // calculateStatusFromCounts needs no failed machine (checked again there).
    if (counts.selectedFailed > 0 || counts.selectedFailedOperation > 0) return undefined;
    return { plan, counts };
  }

  /**
   * A pass decided from the counts (fromCounts): create machines if the plan says so, or delete
   * the ones planReplicas picks among the set's own machines; then status from the counts.
   */
  private async reconcileFromCounts(
    ms: MachineSet,
    quick: QuickPass,
    now: number,
    log: Logger,
  ): Promise<ReconcileResult> {
    const key = objectKey(ms);
    let failure: ReplicaFailure | undefined;
    let recheckAfter: number | undefined;
    if (quick.plan === undefined) {
      log.debug(
        'waiting for earlier creations/deletions to show up in the cache',
        this.expectations.pending(key),
      );
    } else if (quick.plan === 'pick') {
      // The machines claim would return, without its selector check: the counts proved that
      // nothing is to be adopted or released, so every machine the set controls and that is not
      // being deleted matches its selector, and planReplicas looks at no other.
      const own = this.ctx.informers.machines
        .byIndex(CONTROLLER_UID_INDEX, ms.metadata.uid ?? '')
        .filter((m) => m.metadata.namespace === ms.metadata.namespace);
      const managed = await this.manageReplicas(ms, own, log);
      failure = managed.failure;
      recheckAfter = managed.recheckAfter;
    } else {
      failure = await this.executePlan(ms, quick.plan, log);
    }
    const status = calculateStatusFromCounts({
      ms,
      counts: quick.counts,
      now,
      replicaFailure:
        failure === undefined ? undefined : { reason: failure.reason, message: failure.message },
    });
    if (status === undefined) throw new Error(`MachineSet ${key}: status from counts with failed machines`);
    const wait = await this.writeStatus(ms, status, now);
    if (failure !== undefined) {
      throw new Error(`MachineSet ${key}: ${failure.message}`, { cause: failure.error });
    }
    return { requeueAfter: Math.min(wait ?? MACHINESET_RESYNC_MS, recheckAfter ?? Infinity) };
  }

  /**
   * Writes the status when it changed, or puts off a write of counts alone (statusWriteDelay):
   * then returns how long, for the caller to requeue the set after it.
   */
  private async writeStatus(
    ms: MachineSet,
    status: MachineSetStatus,
    now: number,
  ): Promise<number | undefined> {
    if (jsonEqual(ms.status ?? {}, status)) return undefined;
    const key = objectKey(ms);
    const wait = statusWriteDelay(
      ms.status,
      status,
      this.statusWrittenAt.get(key),
      now,
      MACHINESET_COUNTS_STATUS_INTERVAL_MS,
    );
    if (wait > 0) return wait;
    await this.ctx.client.updateStatus(MachineSetResource, { ...ms, status });
    this.statusWrittenAt.set(key, now);
    return undefined;
  }

  /** Machines this set controls after adopting orphans and releasing the ones it no longer selects. */
  private claimMachines(ms: MachineSet, deleting: boolean): Promise<AnyMachine[]> {
    return claim({
      client: this.ctx.client,
      ownerRes: MachineSetResource,
      childRes: MachineResource,
      children: this.ctx.informers.machines,
      owner: this.owner(ms, deleting),
      namespace: ms.metadata.namespace,
      selector: ms.spec?.selector,
    });
  }

  private owner(ms: MachineSet, deleting: boolean): Owner {
    return {
      apiVersion: API_VERSION,
      kind: MachineSetResource.kind,
      name: ms.metadata.name ?? '',
      uid: ms.metadata.uid ?? '',
      deleting,
    };
  }

  private async propagateTemplate(ms: MachineSet, machines: readonly AnyMachine[]): Promise<void> {
    for (const m of machines) {
      const patch = propagationPatch(ms, m);
      if (patch === undefined) continue;
      try {
        await this.ctx.client.patch(MachineResource, m.metadata.name ?? '', patch, {
          type: 'merge',
          namespace: m.metadata.namespace ?? '',
        });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }

  /**
   * Whether the set's deployment is rolling: another set of the same deployment still has
   * replicas or machines (a rolling or an in-place update under way).
   */
  private deploymentRolls(ms: MachineSet): boolean {
    const owner = controllerRefOf(ms)?.uid;
    if (owner === undefined) return false;
    return this.ctx.informers.machineSets
      .byIndex(CONTROLLER_UID_INDEX, owner)
      .some(
        (s) =>
          s.metadata.uid !== ms.metadata.uid &&
          s.metadata.namespace === ms.metadata.namespace &&
          (replicasOf(s) > 0 || (s.status?.replicas ?? 0) > 0),
      );
  }

  private async manageAutoPreservation(ms: MachineSet, machines: AnyMachine[]): Promise<AnyMachine[]> {
    const rolling = (ms.spec?.autoPreserveFailedMachineMax ?? 0) > 0 && this.deploymentRolls(ms);
    const plan = planAutoPreservation(ms, machines, { rolling });
    if (plan.preserve.length === 0 && plan.unpreserve.length === 0) return machines;
    const updated = new Map<string, AnyMachine>();
    const annotate = async (m: AnyMachine, value: string | null): Promise<void> => {
      try {
        const res = await this.ctx.client.patch<Machine>(
          MachineResource,
          m.metadata.name ?? '',
          { metadata: { annotations: { [Annotation.Preserve]: value } } },
          { type: 'merge', namespace: m.metadata.namespace ?? '' },
        );
        updated.set(m.metadata.uid ?? '', res);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    };
    for (const m of plan.preserve) await annotate(m, PreserveValue.AutoPreserved);
    for (const m of plan.unpreserve) await annotate(m, null);
    return machines.map((m) => updated.get(m.metadata.uid ?? '') ?? m);
  }

  /**
   * Creates or deletes machines per planReplicas; returns the failure to report, if any, and when
   * the set must be looked at again without an event (an interrupted machine kept for now).
   */
  private async manageReplicas(
    ms: MachineSet,
    machines: readonly AnyMachine[],
    log: Logger,
  ): Promise<{ failure: ReplicaFailure | undefined; recheckAfter?: number }> {
    const now = this.ctx.clock.now();
    const pods = this.ctx.informers.drain?.pods;
    const plan = planReplicas(ms, machines, now, this.ctx.settings.burstReplicas, {
      interruptionDrainLeadMs: this.ctx.settings.interruptionDrainLeadMs,
      vetoOf: (m) => {
        const v = machineVeto(pods, m);
        return v === undefined ? undefined : `${v.pod} (${v.by})`;
      },
    });
    for (const h of plan.held ?? []) {
      log.verbose('replaced machine kept: a pod on its node vetoes disruption', {
        machine: h.machine.metadata.name,
        veto: h.veto,
      });
      this.recorder.event(
        h.machine,
        'Normal',
        EventReason.DisruptionVetoed,
        `Machine is replaced, but pod ${h.veto} on its node vetoes disruption: it is deleted once that pod is gone (its node takes no new pods)`,
      );
    }
    const failure = await this.executePlan(ms, plan, log);
    return plan.recheckAt === undefined
      ? { failure }
      : { failure, recheckAfter: Math.max(1000, plan.recheckAt - now) };
  }

  /** Creates or deletes machines as planned; returns the failure to report, if any. */
  private async executePlan(
    ms: MachineSet,
    plan: ReplicaPlan<AnyMachine>,
    log: Logger,
  ): Promise<ReplicaFailure | undefined> {
    const key = objectKey(ms);
    let failure: ReplicaFailure | undefined;
    if (plan.scaleUpBlocked !== undefined) {
      log.verbose('not creating machines', { reason: plan.scaleUpBlocked });
    } else if (plan.create > 0) {
      log.info('creating machines', { count: plan.create, replicas: replicasOf(ms) });
      this.expectations.expectCreations(key, plan.create);
      const result = await slowStartBatch(plan.create, async () => {
        const created = await this.ctx.client.create<Machine>(MachineResource, this.newMachine(ms));
        this.recorder.event(
          ms,
          'Normal',
          EventReason.SuccessfulCreate,
          `Created Machine: ${created.metadata.name ?? ''}`,
        );
      });
      const skipped = plan.create - result.succeeded;
      // Creations that failed or were never attempted will not show up in the cache.
      if (skipped > 0) this.expectations.creationObserved(key, skipped);
      if (result.error !== undefined) {
        const message = errorMessage(result.error);
        this.recorder.event(ms, 'Warning', EventReason.FailedCreate, `Error creating: ${message}`);
        failure = { reason: ReplicaFailureReason.FailedCreate, message, error: result.error };
      }
    }
    // A plan deletes beside creating only machines whose VM is about to go (planReplicas): they
    // go even when their replacement cannot be created.
    if (plan.delete.length > 0) {
      log.info('deleting machines', {
        count: plan.delete.length,
        replicas: replicasOf(ms),
        machines: plan.delete.map((d) => `${d.machine.metadata.name ?? ''} (${d.reason})`),
      });
      const deleteFailure = await this.terminate(
        ms,
        plan.delete.map((d) => d.machine),
        log,
      );
      failure ??= deleteFailure;
    }
    return failure;
  }

  /** Deletes machines (in parallel) and marks them Terminating. */
  private async terminate(
    ms: MachineSet,
    machines: readonly AnyMachine[],
    log: Logger,
  ): Promise<ReplicaFailure | undefined> {
    const key = objectKey(ms);
    const targets = machines.filter((m) => m.metadata.deletionTimestamp === undefined);
    this.expectations.expectDeletions(
      key,
      targets.map((m) => m.metadata.uid ?? ''),
    );
    let failure: ReplicaFailure | undefined;
    await Promise.all(
      targets.map(async (m) => {
        const name = m.metadata.name ?? '';
        const namespace = m.metadata.namespace ?? '';
        let deleted: unknown;
        try {
          deleted = await this.ctx.client.delete(MachineResource, name, {
            namespace,
            preconditions: { uid: m.metadata.uid ?? '' },
          });
        } catch (err) {
          this.expectations.deletionObserved(key, m.metadata.uid ?? '');
          if (isNotFound(err)) return;
          const message = errorMessage(err);
          this.recorder.event(ms, 'Warning', EventReason.FailedDelete, `Error deleting: ${message}`);
          failure ??= { reason: ReplicaFailureReason.FailedDelete, message, error: err };
          return;
        }
        this.recorder.event(ms, 'Normal', EventReason.SuccessfulDelete, `Deleted machine: ${name}`);
        const mark = this.terminatingMark(deleted);
        if (mark !== undefined) await this.markTerminating(mark, log);
      }),
    );
    return failure;
  }

  /**
   * The machine to mark Terminating after its DELETE, as MCM's MachineSet does, or undefined when
   * there is none to mark: the machine controller runs in this process (its deletion flow marks
   * the machine itself, with its step), the DELETE removed the machine at once (no finalizer), or
   * the machine controller has marked it already.
   */
  private terminatingMark(deleted: unknown): Machine | undefined {
    if (this.ctx.settings.finalizeNewMachines) return undefined;
    const m = deleted as Partial<Machine> | undefined;
    if (m?.kind !== MachineResource.kind || m.metadata?.deletionTimestamp === undefined) return undefined;
    if ((m.metadata.finalizers ?? []).length === 0) return undefined;
    const machine = m as Machine;
    if (phaseOf(machine) === MachinePhase.Terminating || (m.status?.deletionStep ?? '') !== '')
      return undefined;
    return machine;
  }

  /**
   * Marks a machine Terminating, conditional on the resourceVersion its DELETE returned: a
   * conflict means the machine controller wrote its own deletion status first, which must win.
   */
  private async markTerminating(m: Machine, log: Logger): Promise<void> {
    const name = m.metadata.name ?? '';
    const now = rfc3339(this.ctx.clock.now());
    try {
      await this.ctx.client.patch(
        MachineResource,
        name,
        {
          metadata: { resourceVersion: m.metadata.resourceVersion },
          status: {
            currentStatus: { phase: MachinePhase.Terminating, lastUpdateTime: now },
            lastOperation: {
              description: 'Deleting machine from cloud provider',
              state: MachineState.Processing,
              type: MachineOperationType.Delete,
              lastUpdateTime: now,
            },
          },
        },
        { type: 'merge', namespace: m.metadata.namespace ?? '', subresource: 'status' },
      );
    } catch (err) {
      if (isConflict(err)) log.debug('machine controller marked the machine first', { machine: name });
      // Gone already (its finalizer was removed): nothing to mark.
      else if (!isNotFound(err)) log.warn('could not mark machine Terminating', { machine: name, err });
    }
  }

  private newMachine(ms: MachineSet): Machine {
    const tmpl = ms.spec?.template ?? {};
    const annotations: Record<string, string> = { ...(tmpl.metadata?.annotations ?? {}) };
    const spec = structuredClone(tmpl.spec ?? {});
    const effectiveTimeout = ms.metadata.annotations?.[Annotation.EffectiveCreationTimeout];
    if (effectiveTimeout !== undefined) {
      annotations[Annotation.EffectiveCreationTimeout] = effectiveTimeout;
      spec.creationTimeout = effectiveTimeout;
    }
    const metadata: Machine['metadata'] = {
      generateName: `${ms.metadata.name ?? ''}-`,
      namespace: ms.metadata.namespace ?? '',
      ownerReferences: [
        controllerReference({
          apiVersion: API_VERSION,
          kind: MachineSetResource.kind,
          name: ms.metadata.name ?? '',
          uid: ms.metadata.uid ?? '',
        }),
      ],
    };
    if (tmpl.metadata?.labels !== undefined) metadata.labels = { ...tmpl.metadata.labels };
    if (Object.keys(annotations).length > 0) metadata.annotations = annotations;
    const finalizers = [...(tmpl.metadata?.finalizers ?? [])];
    if (this.ctx.settings.finalizeNewMachines && !finalizers.includes(Finalizer.MachineControllerManager))
      finalizers.push(Finalizer.MachineControllerManager);
    if (finalizers.length > 0) metadata.finalizers = finalizers;
    return { apiVersion: API_VERSION, kind: MachineResource.kind, metadata, spec };
  }
}
