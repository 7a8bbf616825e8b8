import {
  Annotation,
  ConditionReason,
  EventReason,
  EventSource,
  Label,
  LabelValue,
  MachineDeploymentConditionType,
  MachineSetConditionType,
} from '../../api/constants.js';
import {
  MachineDeploymentResource,
  MachineSetResource,
  type MachineDeployment,
  type MachineSet,
} from '../../api/types.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import { CONTROLLER_UID_INDEX, objectKey, type DeepReadonly } from '../../kube/informer.js';
import type { TimerHandle } from '../../kube/clock.js';
import type { ResourceType } from '../../kube/resources.js';
import { findCondition, removeCondition, setCondition } from '../conditions.js';
import type { ControllerContext } from '../context.js';
import { machinesGoing } from '../machinedeployment/marks.js';
import { controllerRefOf, isTerminating } from '../machines.js';
import { cachedController } from '../ownership.js';
import { LoweredLimits, decideOvershoot, overshootCount, overshootThresholds } from './overshoot-plan.js';

type CachedMachineSet = DeepReadonly<MachineSet>;
type CachedMachineDeployment = DeepReadonly<MachineDeployment>;

function isFrozenSet(ms: CachedMachineSet): boolean {
  return (
    ms.metadata.labels?.[Label.Freeze] === LabelValue.True ||
    findCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen) !== undefined
  );
}

/** Both marks of a freeze are on the deployment: the label and the Frozen condition. */
function isFullyFrozenDeployment(mcd: CachedMachineDeployment): boolean {
  return (
    mcd.metadata.labels?.[Label.Freeze] === LabelValue.True &&
    findCondition(mcd.status?.conditions, MachineDeploymentConditionType.Frozen) !== undefined
  );
}

function isFrozenDeployment(mcd: CachedMachineDeployment): boolean {
  return (
    mcd.metadata.labels?.[Label.Freeze] === LabelValue.True ||
    findCondition(mcd.status?.conditions, MachineDeploymentConditionType.Frozen) !== undefined
  );
}

/**
 * The overshoot part of MCM's safety controller. A MachineSet whose machines that stay reach the
 * high threshold is frozen — label freeze=True and condition Frozen on the set and its
 * MachineDeployment — which stops it from creating machines; it is unfrozen automatically once the
 * count falls to the low threshold, or manually with the annotation
 * safety.machine.sapcloud.io/unfreeze. A scale-down never freezes a set (overshoot-plan.ts):
 * machines being deleted or marked by the autoscaler do not count, and a lowered limit is held
 * down with the machines as they go, however long that takes; it applies once the set caught up,
 * or once no machine went for an overshooting period. Unlike gardener MCM, every set is checked on
 * every pass (not only the first that needs action), and a deployment is only unfrozen when none
 * of its sets is frozen.
 */
export class OvershootSafetyController {
  /** One queue per key kind: MachineSet keys here, MachineDeployment keys in `deployments`. */
  readonly sets: Controller;
  readonly deployments: Controller;
  private readonly recorder: EventRecorder;
  private readonly lowered: LoweredLimits;
  private periodic: TimerHandle | undefined;

  constructor(
    private readonly ctx: ControllerContext,
    workers = 2,
  ) {
    this.recorder = ctx.recorderFor(EventSource.MachineControllerManager);
    this.lowered = new LoweredLimits({
      safetyUp: ctx.settings.safetyUp,
      periodMs: ctx.settings.overshootingPeriodMs,
    });
    const queue = (
      name: string,
      reconcile: (key: string, rctx: ReconcileContext) => Promise<ReconcileResult>,
    ) =>
      new Controller({
        name,
        workers,
        reconciler: { reconcile },
        clock: ctx.clock,
        logger: ctx.logger,
        registry: ctx.registry,
        isRequeueError: isConflict,
      });
    this.sets = queue('safety-overshoot-machineset', (key, rctx) => this.reconcileSet(key, rctx));
    this.deployments = queue('safety-overshoot-machinedeployment', async (key, rctx) => {
      await this.reconcileDeployment(key, rctx);
      return {};
    });
    const { machines, machineSets, machineDeployments } = ctx.informers;
    machines.addHandler({
      onAdd: (m) => {
        const ref = controllerRefOf(m);
        if (ref?.kind === MachineSetResource.kind)
          this.enqueueSet(`${m.metadata.namespace ?? ''}/${ref.name}`);
      },
      onUpdate: (old, m) => {
        // Leaving "terminating" never happens; entering it lowers the count (maybe below low), and
        // moves the limit a scale-down holds down with it.
        if (isTerminating(m) === isTerminating(old)) return;
        const ref = controllerRefOf(m);
        if (ref?.kind === MachineSetResource.kind)
          this.enqueueSet(`${m.metadata.namespace ?? ''}/${ref.name}`);
      },
      onDelete: (m) => {
        const ref = controllerRefOf(m);
        if (ref?.kind === MachineSetResource.kind)
          this.enqueueSet(`${m.metadata.namespace ?? ''}/${ref.name}`);
      },
    });
    machineSets.addHandler({
      onAdd: (ms) => {
        this.enqueueSet(objectKey(ms));
      },
      onUpdate: (old, ms) => {
        // A standalone set's limit follows its own replicas.
        this.noteLimit(ms, this.highOf(old, this.deploymentOf(old)), this.highOf(ms, this.deploymentOf(ms)));
        this.enqueueSet(objectKey(ms));
      },
      onDelete: (ms) => {
        this.lowered.forget(objectKey(ms));
      },
    });
    machineDeployments.addHandler({
      onAdd: (mcd) => {
        this.enqueueDeployment(objectKey(mcd));
      },
      onUpdate: (old, mcd) => {
        // Its sets' limits follow its replicas and surge; its marks say which machines are going.
        const marksChanged =
          old.metadata.annotations?.[Annotation.TriggerDeletionByMCM] !==
          mcd.metadata.annotations?.[Annotation.TriggerDeletionByMCM];
        for (const ms of this.setsOf(mcd)) {
          const before = this.highOf(ms, old);
          const after = this.highOf(ms, mcd);
          this.noteLimit(ms, before, after);
          if (before !== after || marksChanged) this.enqueueSet(objectKey(ms));
        }
        this.enqueueDeployment(objectKey(mcd));
      },
    });
  }

  private highOf(ms: CachedMachineSet, mcd: CachedMachineDeployment | undefined): number {
    return overshootThresholds(ms, mcd, this.ctx.settings.safetyUp, this.ctx.settings.safetyDown).high;
  }

  /** A set's limit went from `before` to `after`: a lowered one is held while the scale-down runs. */
  private noteLimit(ms: CachedMachineSet, before: number, after: number): void {
    this.lowered.lowered(objectKey(ms), before, after, this.ctx.clock.now());
  }

  private setsOf(mcd: CachedMachineDeployment): readonly CachedMachineSet[] {
    return this.ctx.informers.machineSets.byIndex(CONTROLLER_UID_INDEX, mcd.metadata.uid ?? '');
  }

  private enqueueSet(key: string): void {
    this.sets.enqueue(key);
  }

  private enqueueDeployment(key: string): void {
    this.deployments.enqueue(key);
  }

  /** Every set and deployment, every --machine-safety-overshooting-period. */
  private schedulePeriodic(): void {
    this.periodic = this.ctx.clock.setTimeout(() => {
      for (const ms of this.ctx.informers.machineSets.list()) this.enqueueSet(objectKey(ms));
      for (const mcd of this.ctx.informers.machineDeployments.list()) this.enqueueDeployment(objectKey(mcd));
      this.schedulePeriodic();
    }, this.ctx.settings.overshootingPeriodMs);
  }

  start(): void {
    // What was lowered before this start is unknown: each set is held at what it last reported.
    const now = this.ctx.clock.now();
    for (const ms of this.ctx.informers.machineSets.list()) {
      this.lowered.heldAtStart(objectKey(ms), ms.status?.replicas ?? 0, now);
    }
    this.sets.start();
    this.deployments.start();
    this.schedulePeriodic();
  }

  async stop(): Promise<void> {
    this.periodic?.cancel();
    await Promise.all([this.sets.stop(), this.deployments.stop()]);
  }

  /** The MachineDeployment controlling a set, if it is in the cache. */
  private deploymentOf(ms: CachedMachineSet): CachedMachineDeployment | undefined {
    return cachedController(this.ctx.informers.machineDeployments, ms, MachineDeploymentResource.kind);
  }

  /**
   * Machines that count toward a set's overshoot: owned, carrying the template labels, staying.
   * Without standing autoscaler marks that is a number the accounting keeps; with them, the
   * deployment's machines are looked at to find the marked ones.
   */
  countMachines(ms: CachedMachineSet, mcd: CachedMachineDeployment | undefined): number {
    if (mcd?.metadata.annotations?.[Annotation.TriggerDeletionByMCM] === undefined)
      return this.ctx.informers.machineCounts.countsOf(ms).stayingTemplated;
    const machines = this.ctx.informers.machines;
    const owned = machines.byIndex(CONTROLLER_UID_INDEX, ms.metadata.uid ?? '');
    const sets = this.setsOf(mcd);
    const going = machinesGoing({
      mcd,
      sets,
      machines: sets.flatMap((s) => machines.byIndex(CONTROLLER_UID_INDEX, s.metadata.uid ?? '')),
      now: this.ctx.clock.now(),
    });
    return overshootCount(ms, owned, going);
  }

  /** Freezes or unfreezes one MachineSet (key namespace/name) and, with it, its deployment. */
  async reconcileSet(key: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const ms = this.ctx.informers.machineSets.getByKey(key);
    if (ms === undefined) return {};
    const mcd = this.deploymentOf(ms);
    if (ms.metadata.annotations?.[Annotation.SafetyUnfreeze] !== undefined) {
      log.info('unfreezing MachineSet on request (unfreeze annotation)');
      await this.unfreezeSet(ms);
      if (mcd !== undefined) this.enqueueDeployment(objectKey(mcd));
      return {};
    }
    const count = this.countMachines(ms, mcd);
    const now = this.ctx.clock.now();
    const { high: limit, low } = overshootThresholds(
      ms,
      mcd,
      this.ctx.settings.safetyUp,
      this.ctx.settings.safetyDown,
    );
    const { high, recheckAt } = this.lowered.check(key, count, limit, now);
    log.trace('overshoot check', { count, high, low, limit });
    const labelled = ms.metadata.labels?.[Label.Freeze] === LabelValue.True;
    const conditioned =
      findCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen) !== undefined;
    const name = ms.metadata.name ?? '';
    const action = decideOvershoot({ count, high, low, labelled, conditioned });
    // Held above the lowered limit: look again when the hold would end for want of progress (each
    // machine that goes wakes the set earlier and moves that time on).
    const recheck: ReconcileResult = recheckAt === undefined ? {} : { requeueAfter: recheckAt - now };
    if (action === 'none') return recheck;
    if (action === 'unfreeze') {
      log.info('unfreezing MachineSet: machine count back under the limit', { count, low });
      await this.unfreezeSet(ms);
      if (mcd !== undefined) this.enqueueDeployment(objectKey(mcd));
      return recheck;
    }
    if (action === 'freeze' && count >= high) {
      const message = `The number of machines backing MachineSet ${name} is ${count} >= ${high}, its maximum scale-up limit`;
      log.info('freezing MachineSet: too many machines', { count, high });
      await this.freezeSet(ms, ConditionReason.OverShootingReplicaCount, message);
    } else if (action === 'freeze') {
      // An earlier freeze set the label but could not record the condition: complete it.
      const message = `MachineSet ${name} was frozen for overshooting and has ${count} machines; it unfreezes at ${low}`;
      log.info('completing the freeze of a MachineSet (condition missing)', { count, low });
      await this.freezeSet(ms, ConditionReason.OverShootingReplicaCount, message);
    }
    // The set is frozen now; so is its deployment (also after an earlier pass failed half-way).
    if (mcd !== undefined && !isFullyFrozenDeployment(mcd)) {
      const reason =
        findCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen)?.reason ??
        ConditionReason.OverShootingReplicaCount;
      await this.freezeDeployment(
        mcd,
        reason,
        `MachineSet ${name} is frozen: ${count} machines, maximum scale-up limit ${high}`,
      );
    }
    return recheck;
  }

  /** Keeps one MachineDeployment's freeze in step with its sets (key namespace/name). */
  async reconcileDeployment(key: string, { log }: ReconcileContext): Promise<void> {
    const mcd = this.ctx.informers.machineDeployments.getByKey(key);
    if (mcd === undefined) return;
    const sets = this.ctx.informers.machineSets.byIndex(CONTROLLER_UID_INDEX, mcd.metadata.uid ?? '');
    if (mcd.metadata.annotations?.[Annotation.SafetyUnfreeze] !== undefined) {
      log.info('unfreezing MachineDeployment and its MachineSets on request (unfreeze annotation)');
      await this.unfreezeDeployment(mcd, 'UnfreezeAnnotation');
      for (const ms of sets) {
        await this.patchMeta(MachineSetResource, ms, {
          annotations: { [Annotation.SafetyUnfreeze]: LabelValue.True },
        });
      }
      return;
    }
    const anySetFrozen = sets.some(isFrozenSet);
    const frozen = isFrozenDeployment(mcd);
    if (anySetFrozen && !isFullyFrozenDeployment(mcd)) {
      await this.freezeDeployment(
        mcd,
        ConditionReason.MachineDeploymentStateSync,
        'A MachineSet of this MachineDeployment is frozen, so the MachineDeployment is frozen too',
      );
    } else if (!anySetFrozen && frozen) {
      const reason = findCondition(mcd.status?.conditions, MachineDeploymentConditionType.Frozen)?.reason;
      await this.unfreezeDeployment(
        mcd,
        reason === ConditionReason.OverShootingReplicaCount
          ? ConditionReason.UnderShootingReplicaCount
          : ConditionReason.MachineDeploymentStateSync,
      );
    }
  }

  /**
   * Merge-patches labels/annotations; with `conditional`, only if the object is still at the
   * resourceVersion the decision was made on. Returns the updated object (undefined when gone).
   */
  private async patchMeta<T extends MachineSet | MachineDeployment>(
    res: ResourceType,
    obj: DeepReadonly<T> | T,
    meta: { labels?: Record<string, string | null>; annotations?: Record<string, string | null> },
    conditional = false,
  ): Promise<T | undefined> {
    const metadata = conditional ? { ...meta, resourceVersion: obj.metadata.resourceVersion } : meta;
    try {
      return await this.ctx.client.patch<T>(
        res,
        obj.metadata.name ?? '',
        { metadata },
        { type: 'merge', namespace: obj.metadata.namespace ?? '' },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
      return undefined;
    }
  }

  /** Writes a condition list through the status subresource, conditional on resourceVersion. */
  private async patchConditions(
    res: ResourceType,
    obj: CachedMachineSet | CachedMachineDeployment | MachineSet | MachineDeployment,
    status: Record<string, unknown>,
  ): Promise<void> {
    try {
      await this.ctx.client.patch(
        res,
        obj.metadata.name ?? '',
        { metadata: { resourceVersion: obj.metadata.resourceVersion }, status },
        { type: 'merge', namespace: obj.metadata.namespace ?? '', subresource: 'status' },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  /**
   * A freeze takes two writes (labels live in metadata, conditions in the status subresource, and
   * neither write can carry the other). The label goes first, conditional on the resourceVersion
   * the count was taken at: it is what stops creation, so a failure of the second write leaves the
   * set frozen, and the next pass sees the label without the condition and completes the freeze.
   */
  private async freezeSet(ms: CachedMachineSet, reason: string, message: string): Promise<void> {
    let current: CachedMachineSet | MachineSet = ms;
    if (ms.metadata.labels?.[Label.Freeze] !== LabelValue.True) {
      const labelled = await this.patchMeta<MachineSet>(
        MachineSetResource,
        ms,
        { labels: { [Label.Freeze]: LabelValue.True } },
        true,
      );
      if (labelled === undefined) return;
      current = labelled;
      this.recorder.event(
        ms,
        'Normal',
        EventReason.FrozeMachineSet,
        `SafetyController: froze MachineSet ${ms.metadata.name ?? ''}: ${message}`,
      );
    }
    if (findCondition(current.status?.machineSetCondition, MachineSetConditionType.Frozen) === undefined) {
      const conds = setCondition(
        current.status?.machineSetCondition,
        { type: MachineSetConditionType.Frozen, status: 'True', reason, message },
        this.ctx.clock.now(),
      );
      await this.patchConditions(MachineSetResource, current, { machineSetCondition: conds });
    }
  }

  private async unfreezeSet(ms: CachedMachineSet): Promise<void> {
    if (findCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen) !== undefined) {
      const conds = removeCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen);
      await this.patchConditions(MachineSetResource, ms, {
        machineSetCondition: conds.length > 0 ? conds : null,
      });
    }
    await this.patchMeta(MachineSetResource, ms, {
      labels: { [Label.Freeze]: null },
      annotations: { [Annotation.SafetyUnfreeze]: null },
    });
    this.recorder.event(
      ms,
      'Normal',
      EventReason.UnfrozeMachineSet,
      `SafetyController: unfroze MachineSet ${ms.metadata.name ?? ''}`,
    );
  }

  /** Label first, then condition, as for a set (see freezeSet). */
  private async freezeDeployment(
    mcd: CachedMachineDeployment,
    reason: string,
    message: string,
  ): Promise<void> {
    let current: CachedMachineDeployment | MachineDeployment = mcd;
    if (mcd.metadata.labels?.[Label.Freeze] !== LabelValue.True) {
      const labelled = await this.patchMeta<MachineDeployment>(
        MachineDeploymentResource,
        mcd,
        { labels: { [Label.Freeze]: LabelValue.True } },
        true,
      );
      if (labelled === undefined) return;
      current = labelled;
    }
    if (findCondition(current.status?.conditions, MachineDeploymentConditionType.Frozen) === undefined) {
      const conds = setCondition(
        current.status?.conditions,
        { type: MachineDeploymentConditionType.Frozen, status: 'True', reason, message },
        this.ctx.clock.now(),
        { withUpdateTime: true },
      );
      await this.patchConditions(MachineDeploymentResource, current, { conditions: conds });
    }
  }

  private async unfreezeDeployment(mcd: CachedMachineDeployment, reason: string): Promise<void> {
    if (findCondition(mcd.status?.conditions, MachineDeploymentConditionType.Frozen) !== undefined) {
      const conds = removeCondition(mcd.status?.conditions, MachineDeploymentConditionType.Frozen);
      await this.patchConditions(MachineDeploymentResource, mcd, {
        conditions: conds.length > 0 ? conds : null,
      });
    }
    await this.patchMeta(MachineDeploymentResource, mcd, {
      labels: { [Label.Freeze]: null },
      annotations: { [Annotation.SafetyUnfreeze]: null },
    });
    this.ctx.logger.info('unfroze MachineDeployment', { machineDeployment: objectKey(mcd), reason });
  }
}
