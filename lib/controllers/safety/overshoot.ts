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
import { scaledValue } from '../../api/intstr.js';
import { replicasOf } from '../../api/replicas.js';
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
import { selectorMatches } from '../../kube/labels.js';
import type { TimerHandle } from '../../kube/clock.js';
import type { ResourceType } from '../../kube/resources.js';
import { findCondition, removeCondition, setCondition } from '../conditions.js';
import type { ControllerContext } from '../context.js';
import { controllerRefOf, isTerminating } from '../machines.js';
import { cachedController } from '../ownership.js';

type CachedMachineSet = DeepReadonly<MachineSet>;
type CachedMachineDeployment = DeepReadonly<MachineDeployment>;

export interface Thresholds {
  high: number;
  low: number;
}

/**
 * The machine counts at which a MachineSet is frozen (high) and unfrozen again (low). A set owned
 * by a MachineDeployment may legitimately hold up to the deployment's replicas plus its surge
 * during a rollout; a standalone set never needs more than twice its replicas.
 */
export function overshootThresholds(
  ms: CachedMachineSet | MachineSet,
  mcd: CachedMachineDeployment | MachineDeployment | undefined,
  safetyUp: number,
  safetyDown: number,
): Thresholds {
  let high = 2 * replicasOf(ms) + safetyUp;
  if (mcd !== undefined) {
    const replicas = replicasOf(mcd);
    const strategy = mcd.spec?.strategy;
    const maxSurge = strategy?.rollingUpdate?.maxSurge ?? strategy?.inPlaceUpdate?.maxSurge;
    let surge: number;
    try {
      surge = maxSurge === undefined ? 0 : scaledValue(maxSurge, replicas, true);
    } catch {
      // A malformed surge is reported by the MachineDeployment controller; count it as none here.
      surge = 0;
    }
    high = replicas + surge + safetyUp;
  }
  return { high, low: high - safetyDown };
}

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
 * The overshoot part of MCM's safety controller. A MachineSet whose (non-terminating) machines
 * reach the high threshold is frozen — label freeze=True and condition Frozen on the set and its
 * MachineDeployment — which stops it from creating machines; it is unfrozen automatically once the
 * count falls to the low threshold, or manually with the annotation
 * safety.machine.sapcloud.io/unfreeze. Unlike gardener MCM, every set is checked on every pass
 * (not only the first that needs action), terminating machines do not count (a scale-down in
 * progress is not an overshoot), and a deployment is only unfrozen when none of its sets is frozen.
 */
export class OvershootSafetyController {
  /** One queue per key kind: MachineSet keys here, MachineDeployment keys in `deployments`. */
  readonly sets: Controller;
  readonly deployments: Controller;
  private readonly recorder: EventRecorder;
  private periodic: TimerHandle | undefined;

  constructor(
    private readonly ctx: ControllerContext,
    workers = 2,
  ) {
    this.recorder = ctx.recorderFor(EventSource.MachineControllerManager);
    const queue = (name: string, reconcile: (key: string, rctx: ReconcileContext) => Promise<void>) =>
      new Controller({
        name,
        workers,
        reconciler: {
          reconcile: async (key, rctx): Promise<ReconcileResult> => {
            await reconcile(key, rctx);
            return {};
          },
        },
        clock: ctx.clock,
        logger: ctx.logger,
        registry: ctx.registry,
        isRequeueError: isConflict,
      });
    this.sets = queue('safety-overshoot-machineset', (key, rctx) => this.reconcileSet(key, rctx));
    this.deployments = queue('safety-overshoot-machinedeployment', (key, rctx) =>
      this.reconcileDeployment(key, rctx),
    );
    const { machines, machineSets, machineDeployments } = ctx.informers;
    machines.addHandler({
      onAdd: (m) => {
        const ref = controllerRefOf(m);
        if (ref?.kind === MachineSetResource.kind)
          this.enqueueSet(`${m.metadata.namespace ?? ''}/${ref.name}`);
      },
      onUpdate: (old, m) => {
        // Leaving "terminating" never happens; entering it lowers the count (maybe below low).
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
      onUpdate: (_old, ms) => {
        this.enqueueSet(objectKey(ms));
      },
    });
    machineDeployments.addHandler({
      onAdd: (mcd) => {
        this.enqueueDeployment(objectKey(mcd));
      },
      onUpdate: (_old, mcd) => {
        this.enqueueDeployment(objectKey(mcd));
      },
    });
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

  /** Machines that count toward a set's overshoot: owned, carrying the template labels, staying. */
  countMachines(ms: CachedMachineSet): number {
    const templateLabels = ms.spec?.template?.metadata?.labels ?? {};
    return this.ctx.informers.machines
      .byIndex(CONTROLLER_UID_INDEX, ms.metadata.uid ?? '')
      .filter((m) => !isTerminating(m) && selectorMatches({ matchLabels: templateLabels }, m.metadata.labels))
      .length;
  }

  /** Freezes or unfreezes one MachineSet (key namespace/name) and, with it, its deployment. */
  async reconcileSet(key: string, { log }: ReconcileContext): Promise<void> {
    const ms = this.ctx.informers.machineSets.getByKey(key);
    if (ms === undefined) return;
    const mcd = this.deploymentOf(ms);
    if (ms.metadata.annotations?.[Annotation.SafetyUnfreeze] !== undefined) {
      log.info('unfreezing MachineSet on request (unfreeze annotation)');
      await this.unfreezeSet(ms);
      if (mcd !== undefined) this.enqueueDeployment(objectKey(mcd));
      return;
    }
    const count = this.countMachines(ms);
    const { high, low } = overshootThresholds(
      ms,
      mcd,
      this.ctx.settings.safetyUp,
      this.ctx.settings.safetyDown,
    );
    log.trace('overshoot check', { count, high, low });
    const labelled = ms.metadata.labels?.[Label.Freeze] === LabelValue.True;
    const conditioned =
      findCondition(ms.status?.machineSetCondition, MachineSetConditionType.Frozen) !== undefined;
    const name = ms.metadata.name ?? '';
    if (count >= high && !(labelled && conditioned)) {
      const message = `The number of machines backing MachineSet ${name} is ${count} >= ${high}, its maximum scale-up limit`;
      log.info('freezing MachineSet: too many machines', { count, high });
      await this.freezeSet(ms, ConditionReason.OverShootingReplicaCount, message);
    } else if (labelled && !conditioned && count > low) {
      // An earlier freeze set the label but could not record the condition: complete it.
      const message = `MachineSet ${name} was frozen for overshooting and has ${count} machines; it unfreezes at ${low}`;
      log.info('completing the freeze of a MachineSet (condition missing)', { count, low });
      await this.freezeSet(ms, ConditionReason.OverShootingReplicaCount, message);
    } else if (count <= low && isFrozenSet(ms)) {
      log.info('unfreezing MachineSet: machine count back under the limit', { count, low });
      await this.unfreezeSet(ms);
      if (mcd !== undefined) this.enqueueDeployment(objectKey(mcd));
      return;
    } else if (!labelled) {
      return;
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
