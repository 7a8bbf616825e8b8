import {
  Annotation,
  EventReason,
  EventSource,
  ExtensionAnnotation,
  Finalizer,
  Label,
  LabelValue,
  MachineDeploymentConditionType,
  StrategyType,
} from '../../api/constants.js';
import { replicasOf } from '../../api/replicas.js';
import {
  MachineDeploymentResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../api/types.js';
import { formatValidationErrors, validateMachineDeployment } from '../../api/validation.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { jsonEqual } from '../../kube/equal.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import { clone, objectKey, type DeepReadonly } from '../../kube/informer.js';
import { isEmptySelector } from '../../kube/labels.js';
import type { Node, Pod } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { findCondition, removeCondition, setCondition } from '../conditions.js';
import { MACHINE_NODE_INDEX, type ControllerContext } from '../context.js';
import { controllerRefOf, isAvailable, isFailed, isTerminating, phaseOf } from '../machines.js';
import { addFinalizer, cachedController, removeFinalizer, selectingOwners } from '../ownership.js';
import { processTriggerDeletion, propagateScalerTime } from './autoscaler.js';
import { ExpiryMetrics, expireMachines, StartedReplacements } from './expire.js';
import { podVeto } from '../vetoes.js';
import { claimMachineSets } from './claim.js';
import { inPlaceReason, rolloutInPlace } from './inplace.js';
import { findNewMachineSet } from './newset.js';
import {
  deploymentTypeMeta,
  initialState,
  PassContext,
  withCondition,
  type DeploymentState,
  type PassDeps,
  type StepResult,
} from './pass.js';
import { ExtraProgressingReason, INVALID_SPEC_REASON, syncStatus, withPauseCondition } from './progress.js';
import { rolloutRecreate } from './recreate.js';
import { rollback } from './rollback.js';
import { rolloutRolling } from './rolling.js';
import { isScalingEvent, syncScaling } from './scale.js';

/** MCM re-syncs every MachineDeployment this often even without events. */
export const MACHINEDEPLOYMENT_RESYNC_MS = 10 * 60 * 1000;
/** How long machine events wait to wake their deployment, so that a burst of them shares a pass. */
export const MACHINE_EVENT_BATCH_MS = 200;

/** How soon to look again after (un)marking machines for the autoscaler, should no event arrive. */
const MARK_SETTLE_MS = 1000;

type CachedDeployment = DeepReadonly<MachineDeployment>;
type CachedMachineSet = DeepReadonly<MachineSet>;
type CachedMachine = DeepReadonly<Machine>;
type CachedNode = DeepReadonly<Node>;

/**
 * What a MachineDeployment pass reads from one machine: its set (controller reference), whether it
 * is going, available or failed (set sizes, rollout steps, the autoscaler protocol), its node
 * (taints and scale-down protection), its preservation (scale-down protection stays), the
 * autoscaler's deletion marks (the pass waits for the cache to show them) and where an in-place
 * update stands (phase, mirrored InPlaceUpdate condition, hand-over label).
 */
function deploymentView(m: CachedMachine): string {
  const annotations = m.metadata.annotations ?? {};
  return JSON.stringify([
    controllerRefOf(m)?.uid,
    isTerminating(m),
    isAvailable(m),
    isFailed(m),
    phaseOf(m),
    m.metadata.labels?.[Label.Node],
    m.metadata.labels?.[Label.UpdateResult],
    inPlaceReason(m.status?.conditions),
    m.status?.currentStatus?.preserveExpiryTime,
    annotations[Annotation.MachinePriority],
    annotations[Annotation.MarkedForDeletionTime],
    annotations[ExtensionAnnotation.Replacing],
    // A rebalance recommendation (opted in) starts a voluntary replacement in the pass.
    annotations[ExtensionAnnotation.RebalanceRecommended],
  ]);
}

/** What an in-place update reads from a node: the protocol's labels and the InPlaceUpdate condition. */
function inPlaceNodeView(n: CachedNode): string {
  const labels = n.metadata.labels ?? {};
  return JSON.stringify([
    labels[Label.CandidateForUpdate],
    labels[Label.SelectedForUpdate],
    labels[Label.UpdateResult],
    inPlaceReason(n.status?.conditions),
  ]);
}

/** Whether a node change can move an in-place update on (only in-place deployments care). */
export function nodeUpdateMatters(old: CachedNode, n: CachedNode): boolean {
  return inPlaceNodeView(old) !== inPlaceNodeView(n);
}

/**
 * Whether a machine update can change a MachineDeployment's decision; most updates (heartbeats of
 * lastOperation, conditions, node sync) cannot and do not enqueue it.
 */
export function machineUpdateMatters(old: CachedMachine, m: CachedMachine): boolean {
  return deploymentView(old) !== deploymentView(m);
}

const IN_PLACE_UNSUPPORTED_MESSAGE =
  'The InPlaceUpdate strategy needs a target cluster (its nodes are drained and updated in place), and this ' +
  'machine-controller-manager runs without one (--target-kubeconfig=none): the machine deployment is scaled, ' +
  'but template changes are not rolled out. Use RollingUpdate or Recreate, or run with a target cluster.';

/**
 * Rolls MachineDeployments out over MachineSets (gardener MCM semantics): claims its sets, keeps
 * one "new" set per template with revision bookkeeping, scales sets when replicas change
 * (proportionally during a rollout), replaces machines by RollingUpdate or Recreate within the
 * surge and availability limits, rolls back on spec.rollbackTo, pauses, cleans up old sets,
 * reports status and progress, marks the machines the autoscaler asked to delete, and keeps nodes
 * tainted and protected from autoscaler scale-down during rollouts. InPlaceUpdate deployments keep
 * their machines: nodes are selected, drained and updated in place, and updated machines move to
 * the new set (inplace.ts). Without a target cluster that strategy cannot run: such deployments
 * are scaled but never rolled, and Progressing=False (InPlaceUpdateNotSupported) plus a Warning
 * event say so.
 */
export class MachineDeploymentController {
  readonly controller: Controller;
  private readonly recorder: EventRecorder;
  private readonly expiry: { metrics: ExpiryMetrics; started: StartedReplacements };

  constructor(
    private readonly ctx: ControllerContext,
    workers = 5,
  ) {
    this.recorder = ctx.recorderFor(EventSource.MachineDeploymentController);
    this.expiry = { metrics: new ExpiryMetrics(ctx.registry), started: new StartedReplacements() };
    this.controller = new Controller({
      name: 'machinedeployment',
      workers,
      reconciler: { reconcile: (key, rctx) => this.reconcile(key, rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
    });
    this.wire();
  }

  start(): void {
    this.controller.start();
  }

  async stop(): Promise<void> {
    await this.controller.stop();
  }

  // ---- event wiring ----

  private enqueue(mcd: CachedDeployment): void {
    this.controller.enqueue(objectKey(mcd));
  }

  private deploymentOf(ms: CachedMachineSet): CachedDeployment | undefined {
    return cachedController(this.ctx.informers.machineDeployments, ms, MachineDeploymentResource.kind);
  }

  /** Deployments whose selector matches an orphaned set: one of them may adopt it. */
  private enqueueSelecting(ms: CachedMachineSet): void {
    for (const mcd of selectingOwners<MachineDeployment>(this.ctx.informers.machineDeployments, ms))
      this.enqueue(mcd);
  }

  private enqueueForSet(ms: CachedMachineSet): void {
    const owner = this.deploymentOf(ms);
    if (owner !== undefined) this.enqueue(owner);
    else if (controllerRefOf(ms) === undefined) this.enqueueSelecting(ms);
  }

  /**
   * The deployment owning a machine's set: machine changes drive Recreate, rollout steps and
   * status. They come in bursts (a scale-down changes each machine several times), so they wake
   * the deployment MACHINE_EVENT_BATCH_MS later: one pass for the burst, not one per event. An
   * enqueue for any other reason still runs at once.
   */
  private enqueueForMachine(m: CachedMachine): void {
    const ref = controllerRefOf(m);
    if (ref?.kind !== MachineSetResource.kind) return;
    const ms = this.ctx.informers.machineSets.get(m.metadata.namespace, ref.name);
    if (ms?.metadata.uid !== ref.uid) return;
    const mcd = this.deploymentOf(ms);
    if (mcd !== undefined) this.controller.enqueueAfter(objectKey(mcd), MACHINE_EVENT_BATCH_MS);
  }

  private wire(): void {
    const { machineDeployments, machineSets, machines } = this.ctx.informers;
    machineDeployments.addHandler({
      onAdd: (mcd) => {
        this.enqueue(mcd);
      },
      onUpdate: (_old, mcd) => {
        this.enqueue(mcd);
      },
      onDelete: (mcd) => {
        this.expiry.metrics.forget(mcd.metadata.namespace ?? '', mcd.metadata.name ?? '');
        this.expiry.started.forget(objectKey(mcd));
        this.enqueue(mcd);
      },
    });
    machineSets.addHandler({
      onAdd: (ms) => {
        this.enqueueForSet(ms);
      },
      onUpdate: (old, ms) => {
        if (old.metadata.resourceVersion === ms.metadata.resourceVersion) return;
        const oldOwner = this.deploymentOf(old);
        if (oldOwner !== undefined && oldOwner.metadata.uid !== this.deploymentOf(ms)?.metadata.uid)
          this.enqueue(oldOwner);
        this.enqueueForSet(ms);
      },
      onDelete: (ms) => {
        const owner = this.deploymentOf(ms);
        if (owner !== undefined) this.enqueue(owner);
      },
    });
    machines.addHandler({
      onAdd: (m) => {
        this.enqueueForMachine(m);
      },
      onUpdate: (old, m) => {
        if (!machineUpdateMatters(old, m)) return;
        // A machine moved to another set: both deployments' counts change.
        if (controllerRefOf(old)?.uid !== controllerRefOf(m)?.uid) this.enqueueForMachine(old);
        this.enqueueForMachine(m);
      },
      onDelete: (m) => {
        this.enqueueForMachine(m);
      },
    });
    // Expiry waits for pods that veto disruption of their node: their change or end wakes it.
    const vetoChanged = (p: DeepReadonly<Pod>): void => {
      const node = p.spec?.nodeName;
      if (node === undefined || node === '') return;
      for (const m of machines.byIndex(MACHINE_NODE_INDEX, node)) this.enqueueForMachine(m);
    };
    this.ctx.informers.drain?.pods.addHandler({
      onUpdate: (old, p) => {
        if ((podVeto(old) === undefined) !== (podVeto(p) === undefined)) vetoChanged(p);
      },
      onDelete: (p) => {
        if (podVeto(p) !== undefined) vetoChanged(p);
      },
    });
    // In-place updates move on when a node's update labels or InPlaceUpdate condition change.
    this.ctx.informers.nodes?.addHandler({
      onUpdate: (old, n) => {
        if (!nodeUpdateMatters(old, n)) return;
        for (const m of machines.byIndex(MACHINE_NODE_INDEX, n.metadata.name ?? ''))
          this.enqueueForMachine(m);
      },
    });
  }

  // ---- reconcile ----

  async reconcile(key: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const cached = this.ctx.informers.machineDeployments.getByKey(key);
    if (cached === undefined) return {};
    let mcd = clone<MachineDeployment>(cached);
    const deleting = mcd.metadata.deletionTimestamp !== undefined;
    if (mcd.metadata.labels?.[Label.Freeze] === LabelValue.True && !deleting) {
      log.verbose(
        'machine deployment is frozen by the safety controller; its sets do not scale up, but it is still reconciled',
      );
    }

    const problems = validateMachineDeployment(mcd);
    if (problems.length > 0) {
      await this.reportInvalidSpec(mcd, formatValidationErrors(problems), log);
      return {};
    }

    if (!deleting && !(mcd.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) {
      mcd = await addFinalizer(
        this.ctx.client,
        MachineDeploymentResource,
        mcd,
        Finalizer.MachineControllerManager,
      );
    }

    if (isEmptySelector(mcd.spec?.selector)) {
      this.recorder.event(
        mcd,
        'Warning',
        EventReason.SelectingAll,
        'This deployment is selecting all machines. A non-empty selector is required.',
      );
      const generation = mcd.metadata.generation ?? 0;
      if ((mcd.status?.observedGeneration ?? 0) < generation) {
        await this.ctx.client.updateStatus(MachineDeploymentResource, {
          ...deploymentTypeMeta(mcd),
          status: { ...(mcd.status ?? {}), observedGeneration: generation },
        });
      }
      return {};
    }

    const sets = await claimMachineSets(this.ctx.client, this.ctx.informers, mcd, deleting);
    const ctx = new PassContext(this.deps(), log);
    const state = initialState(mcd, sets);
    if (deleting) {
      await this.terminate(ctx, state);
      return {};
    }
    const result = await this.sync(ctx, state);
    ctx.throwDeferred(result.state.mcd);
    return { requeueAfter: result.requeueAfter };
  }

  private deps(): PassDeps {
    return {
      client: this.ctx.client,
      target: this.ctx.target,
      informers: this.ctx.informers,
      clock: this.ctx.clock,
      recorder: this.recorder,
      settings: this.ctx.settings,
      ...(this.ctx.groupMaxOf === undefined ? {} : { groupMaxOf: this.ctx.groupMaxOf }),
    };
  }

  /**
   * The work of a live deployment, in MCM's order: conditions, the autoscaler's deletion protocol,
   * the strategy's step, the scaler time. Each step takes the state and returns the next one; the
   * pass asks to be requeued at the earliest time a step asked for (at most the resync period).
   */
  private async sync(ctx: PassContext, initial: DeploymentState): Promise<StepResult> {
    let state = this.withStrategyConditions(ctx, initial);

    const trigger = await processTriggerDeletion(ctx, state);
    state = trigger.state;
    if (trigger.machinesChanged) {
      state = await syncStatus(ctx, state, findNewMachineSet(state.mcd, state.sets)?.metadata.uid);
      return { state, requeueAfter: MARK_SETTLE_MS };
    }

    const expiry = await expireMachines(ctx, state, this.expiry);
    state = expiry.state;

    const step = await this.strategyStep(ctx, state);
    if (step.done === true) return step;
    state = await propagateScalerTime(ctx, step.state);
    return {
      state,
      requeueAfter: Math.min(
        step.requeueAfter ?? MACHINEDEPLOYMENT_RESYNC_MS,
        expiry.recheckAfter ?? MACHINEDEPLOYMENT_RESYNC_MS,
        MACHINEDEPLOYMENT_RESYNC_MS,
      ),
    };
  }

  /**
   * The Progressing condition for pause, before any step; a condition about the unsupported
   * InPlaceUpdate strategy is forgotten once the strategy changed or a target cluster is there,
   * so no deadline runs from it.
   */
  private withStrategyConditions(ctx: PassContext, state: DeploymentState): DeploymentState {
    const spec = state.mcd.spec;
    let conditions = withPauseCondition(state.status.conditions, spec?.paused === true, ctx.now);
    const progressing = findCondition(conditions, MachineDeploymentConditionType.Progressing);
    if (
      (spec?.strategy?.type !== StrategyType.InPlaceUpdate || this.ctx.target !== undefined) &&
      progressing?.reason === ExtraProgressingReason.InPlaceUpdateNotSupported
    ) {
      conditions = removeCondition(conditions, MachineDeploymentConditionType.Progressing);
    }
    return { ...state, status: { ...state.status, conditions } };
  }

  /** Progressing=False (InPlaceUpdateNotSupported) and a Warning event, once. */
  private withInPlaceUnsupported(ctx: PassContext, state: DeploymentState): DeploymentState {
    const cond = findCondition(state.status.conditions, MachineDeploymentConditionType.Progressing);
    if (cond?.reason === ExtraProgressingReason.InPlaceUpdateNotSupported) return state;
    ctx.event(
      state.mcd,
      'Warning',
      ExtraProgressingReason.InPlaceUpdateNotSupported,
      IN_PLACE_UNSUPPORTED_MESSAGE,
    );
    return withCondition(
      state,
      ctx.now,
      MachineDeploymentConditionType.Progressing,
      'False',
      ExtraProgressingReason.InPlaceUpdateNotSupported,
      IN_PLACE_UNSUPPORTED_MESSAGE,
    );
  }

  /** What the spec asks for now: scale only, roll back, or take one rollout step. */
  private async strategyStep(
    ctx: PassContext,
    state: DeploymentState,
  ): Promise<StepResult & { done?: boolean }> {
    const spec = state.mcd.spec;
    const strategy = spec?.strategy?.type;
    const scaleOnly = async (from: DeploymentState, createIfMissing: boolean): Promise<StepResult> => {
      const scaled = await syncScaling(ctx, from, { createIfMissing });
      return { state: await syncStatus(ctx, scaled.state, scaled.newSetUID) };
    };
    if (spec?.paused === true) return scaleOnly(state, false);
    if (spec?.rollbackTo !== undefined) {
      // The spec update re-enqueues the deployment; the rollout follows on the next pass.
      return { state: await rollback(ctx, state), requeueAfter: MACHINEDEPLOYMENT_RESYNC_MS, done: true };
    }
    if (strategy === StrategyType.InPlaceUpdate) {
      // Creating the first set is no rollout: such a deployment still gets its machines.
      if (this.ctx.target === undefined)
        return scaleOnly(this.withInPlaceUnsupported(ctx, state), state.sets.length === 0);
      // With old sets still holding machines, the in-place step sizes the sets itself.
      const active = state.sets.filter((s) => replicasOf(s) > 0).length;
      if (active <= 1 && this.scalingEvent(ctx, state)) return scaleOnly(state, false);
      return rolloutInPlace(ctx, state);
    }
    if (this.scalingEvent(ctx, state)) {
      ctx.log.verbose('scaling event', { replicas: replicasOf(state.mcd) });
      return scaleOnly(state, false);
    }
    if (strategy === StrategyType.Recreate) return rolloutRecreate(ctx, state);
    return rolloutRolling(ctx, state);
  }

  private scalingEvent(ctx: PassContext, state: DeploymentState): boolean {
    const newSet = findNewMachineSet(state.mcd, state.sets);
    return isScalingEvent({
      replicas: replicasOf(state.mcd),
      newSet: newSet === undefined ? undefined : ctx.stateOf(newSet),
      allSets: state.sets.map((s) => ctx.stateOf(s)),
    });
  }

  /** Warning event and ReplicaFailure=True (InvalidSpec) with the validation errors; nothing else. */
  private async reportInvalidSpec(mcd: MachineDeployment, message: string, log: Logger): Promise<void> {
    log.info('invalid MachineDeployment, not reconciling it', { problems: message });
    this.recorder.event(mcd, 'Warning', INVALID_SPEC_REASON, message);
    const conditions = setCondition(
      mcd.status?.conditions,
      {
        type: MachineDeploymentConditionType.ReplicaFailure,
        status: 'True',
        reason: INVALID_SPEC_REASON,
        message,
      },
      this.ctx.clock.now(),
      { withUpdateTime: true },
    );
    if (jsonEqual(conditions, mcd.status?.conditions ?? [])) return;
    await this.ctx.client.updateStatus(MachineDeploymentResource, {
      ...deploymentTypeMeta(mcd),
      status: { ...(mcd.status ?? {}), conditions },
    });
  }

  /** Deleting: delete every set (their machines go with them), then let the deployment go. */
  private async terminate(ctx: PassContext, state: DeploymentState): Promise<void> {
    const mcd = state.mcd;
    if (!(mcd.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) return;
    if (state.sets.length === 0) {
      await removeFinalizer(
        this.ctx.client,
        MachineDeploymentResource,
        mcd,
        Finalizer.MachineControllerManager,
      );
      return;
    }
    for (const ms of state.sets) {
      if (ms.metadata.deletionTimestamp !== undefined) continue;
      try {
        await this.ctx.client.delete(MachineSetResource, ms.metadata.name ?? '', {
          namespace: ms.metadata.namespace ?? '',
          preconditions: { uid: ms.metadata.uid ?? '' },
        });
        ctx.log.info('deleted machine set of a deleted machine deployment', {
          machineSet: ms.metadata.name,
        });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    await syncStatus(ctx, state, findNewMachineSet(mcd, state.sets)?.metadata.uid);
  }
}
