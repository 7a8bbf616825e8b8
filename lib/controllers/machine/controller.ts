import { EventSource, Finalizer, Label, MachinePhase } from '../../api/constants.js';
import { MachineResource, type Machine } from '../../api/types.js';
import { Drainer } from '../../drain/drain.js';
import { DisplacedPods } from '../../drain/displaced.js';
import { DrainMetrics } from '../../drain/metrics.js';
import type { ProviderRegistry } from '../../driver/registry.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { jsonEqual } from '../../kube/equal.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { OwnWrites, OwnWritesClient } from '../../kube/ownwrites.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import {
  CLASS_SECRET_INDEX,
  MACHINE_CLASS_INDEX,
  MACHINE_NODE_INDEX,
  type ControllerContext,
} from '../context.js';
import { phaseOf, vmFailureOf } from '../machines.js';
import { addFinalizer } from '../ownership.js';
import { deleteBootstrapToken, needsBootstrapToken } from './bootstrap.js';
import { ReplacementBudget, inReplacement } from './budget.js';
import { needsCreation, runCreationFlow } from './create.js';
import { runDeletionFlow } from './deletion.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import {
  MACHINE_DRAINING_INDEX,
  drainId,
  drainingIndex,
  drainingMachines,
  endDrain,
  endDrainsOf,
  isDraining,
} from './drains.js';
import { planHealth } from './health.js';
import { reconcileInPlace } from './inplaceflow.js';
import { LaunchBackoff, LaunchMetrics, launchKeyOf } from './launches.js';
import { MachineMemory } from './memory.js';
import { MachineMetrics } from './metrics.js';
import { VmProbes } from './vmprobe.js';
import { planNodeSync } from './nodesync.js';
import { effectivePreserve, preserveTimeoutOf, wantsPreservation } from './preserve.js';
import { reconcilePreservation } from './preservation.js';
import { rfc3339 } from '../conditions.js';
import { resolveMachineClass } from './resolve.js';
import type { MachineControllerSettings } from './settings.js';
import { patchMachineStatus, type StatusChange } from './status.js';

type CachedMachine = DeepReadonly<Machine>;
type CachedNode = DeepReadonly<Node>;

/** Machines remembered per in-memory map at most (entries go with their machines well before). */
const MEMORY_CAPACITY = 10_000;

/** How soon a machine skipped while frozen is looked at again (unfreezing also re-enqueues all). */
const FROZEN_RECHECK_MS = 60_000;

/** The earliest requeue of several results. */
function earliest(results: readonly ReconcileResult[]): ReconcileResult {
  let min: number | undefined;
  for (const r of results) {
    if (r.requeueAfter !== undefined && r.requeueAfter > 0)
      min = min === undefined ? r.requeueAfter : Math.min(min, r.requeueAfter);
  }
  return min === undefined ? {} : { requeueAfter: min };
}

/** Changes of a machine that can change what the controller does with it. */
function machineChanged(a: CachedMachine, b: CachedMachine): boolean {
  return (
    a.metadata.generation !== b.metadata.generation ||
    a.metadata.deletionTimestamp !== b.metadata.deletionTimestamp ||
    !jsonEqual(a.metadata.labels, b.metadata.labels) ||
    !jsonEqual(a.metadata.annotations, b.metadata.annotations) ||
    !jsonEqual(a.metadata.finalizers, b.metadata.finalizers) ||
    phaseOf(a) !== phaseOf(b)
  );
}

/** Changes of a node that can change its machine's health, node template sync or in-place update (labels, condition reasons). */
function nodeChanged(a: CachedNode, b: CachedNode): boolean {
  const conds = (n: CachedNode): string =>
    (n.status?.conditions ?? [])
      .map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`)
      .sort()
      .join(',');
  return (
    conds(a) !== conds(b) ||
    a.metadata.deletionTimestamp !== b.metadata.deletionTimestamp ||
    !jsonEqual(a.spec?.taints, b.spec?.taints) ||
    !jsonEqual(a.metadata.labels, b.metadata.labels) ||
    !jsonEqual(a.metadata.annotations, b.metadata.annotations) ||
    !jsonEqual(a.metadata.finalizers, b.metadata.finalizers) ||
    !jsonEqual(a.status?.capacity, b.status?.capacity) ||
    !jsonEqual(a.status?.volumesAttached, b.status?.volumesAttached) ||
    a.spec?.unschedulable !== b.spec?.unschedulable
  );
}

/**
 * The machine controller (gardener's provider machine-controller): creates each machine's VM
 * through the driver of its class's provider, follows its node's health through the phases
 * Pending, Running, Unknown and Failed (replacing unhealthy machines within a budget), keeps the
 * node's labels, annotations, taints and finalizer in step with the machine, takes the node
 * through its in-place update (condition, drain, phases), and deletes VM and node when the
 * machine is deleted.
 */
export class MachineController {
  readonly controller: Controller;
  readonly deps: MachineDeps;
  private readonly namespace: string;
  private readonly frozen: () => boolean;
  /** Machines (keys) whose creation flow is running now: orphan collection keeps their VMs. */
  private readonly creating = new Set<string>();
  private readonly vmProbes: VmProbes;
  private readonly launchMetrics: LaunchMetrics;
  /** This controller's writes to machines that the machine cache does not show yet. */
  private readonly ownWrites: OwnWrites;

  constructor(
    ctx: ControllerContext,
    opts: {
      settings: MachineControllerSettings;
      providers: ProviderRegistry;
      workers: number;
      /**
       * The API-server safety freeze: while it returns true, machines that are not being deleted
       * are left alone (MCM's "machine controller frozen"), so an outage is never read as failure.
       */
      frozen?: () => boolean;
    },
  ) {
    this.frozen = opts.frozen ?? (() => false);
    const { informers } = ctx;
    this.namespace = ctx.namespace;
    this.ownWrites = new OwnWrites(
      ctx.clock,
      (key) => informers.machines.getByKey(key)?.metadata.resourceVersion,
    );
    this.deps = {
      client: new OwnWritesClient(ctx.client, MachineResource, this.ownWrites),
      target: ctx.target,
      informers,
      clock: ctx.clock,
      recorder: ctx.recorderFor(EventSource.MachineController),
      settings: opts.settings,
      providers: opts.providers,
      metrics: new MachineMetrics(
        ctx.registry,
        informers.machines,
        informers.machineClasses,
        informers.machineDeployments,
      ),
      drainer:
        ctx.target !== undefined && informers.drain !== undefined && informers.nodes !== undefined
          ? new Drainer(ctx.target, informers.drain, informers.nodes, {
              maxEvictRetries: opts.settings.maxEvictRetries,
              pvDetachTimeoutMs: opts.settings.pvDetachTimeoutMs,
              pvReattachTimeoutMs: opts.settings.pvReattachTimeoutMs,
            })
          : undefined,
      drainMetrics: new DrainMetrics(ctx.registry),
      displaced:
        ctx.target !== undefined && informers.drain !== undefined
          ? new DisplacedPods(informers.drain.pods, ctx.clock, ctx.registry)
          : undefined,
      deletions: new MachineMemory(MEMORY_CAPACITY),
      tokens: new MachineMemory(MEMORY_CAPACITY),
      budget: new ReplacementBudget(
        informers.machines,
        informers.machineSets,
        informers.machineDeployments,
        opts.settings.maxUnhealthyReplacements,
        ctx.registry,
      ),
      launches: new LaunchBackoff(
        opts.settings.launchFailureBackoffMs,
        opts.settings.launchFailureMaxBackoffMs,
      ),
    };
    this.launchMetrics = new LaunchMetrics(ctx.registry, this.deps.launches, ctx.clock);
    this.vmProbes = new VmProbes(this.deps, MEMORY_CAPACITY);
    informers.machines.addIndexer(MACHINE_DRAINING_INDEX, drainingIndex);
    this.controller = new Controller({
      name: 'machine',
      workers: opts.workers,
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

  /** Re-enqueues every machine (after an unfreeze: the skipped ones need a pass now). */
  enqueueAll(): void {
    for (const m of this.deps.informers.machines.list()) this.enqueue(m);
  }

  async stop(): Promise<void> {
    await this.controller.stop();
    this.deps.displaced?.stop();
  }

  /** Whether the creation flow of machine `namespace/name` is running right now. */
  isCreating(key: string): boolean {
    return this.creating.has(key);
  }

  private enqueue(m: CachedMachine): void {
    this.controller.enqueue(objectKey(m));
  }

  private enqueueWaitersBeside(m: CachedMachine): void {
    for (const key of this.deps.budget.waitersBeside(m)) this.controller.enqueue(key);
  }

  /** Machines backed by a node: by their `node` label, or the node's machine-name label. */
  private machinesOfNode(node: CachedNode): CachedMachine[] {
    const name = node.metadata.name ?? '';
    const out = this.deps.informers.machines.byIndex(MACHINE_NODE_INDEX, name);
    const named = node.metadata.labels?.[Label.NodeMachineName];
    if (named !== undefined && !out.some((m) => m.metadata.name === named)) {
      const m = this.deps.informers.machines.get(this.namespace, named);
      if (m !== undefined) out.push(m);
    }
    return out;
  }

  private wire(): void {
    const { machines, machineClasses, secrets, nodes } = this.deps.informers;
    machines.addHandler({
      onAdd: (m) => {
        this.ownWrites.seen(objectKey(m), m.metadata.resourceVersion);
        this.enqueue(m);
      },
      onUpdate: (old, m) => {
        this.ownWrites.seen(objectKey(m), m.metadata.resourceVersion);
        if (old === m || machineChanged(old, m)) this.enqueue(m);
        // A machine that leaves replacement frees its group's budget for one that waits.
        if (old !== m) {
          const now = this.deps.clock.now();
          if (inReplacement(old, now) && !inReplacement(m, now)) this.enqueueWaitersBeside(m);
        }
      },
      onDelete: (m) => {
        // Whatever was in memory for it goes with it (a finalizer removed by hand included).
        this.ownWrites.forget(objectKey(m));
        this.forgetMachine(objectKey(m), m.metadata.uid);
        this.enqueueWaitersBeside(m);
      },
    });
    nodes?.addHandler({
      onAdd: (n) => {
        for (const m of this.machinesOfNode(n)) this.enqueue(m);
      },
      onUpdate: (old, n) => {
        if (old !== n && !nodeChanged(old, n)) return;
        for (const m of this.machinesOfNode(n)) this.enqueue(m);
      },
      onDelete: (n) => {
        for (const m of this.machinesOfNode(n)) this.enqueue(m);
      },
    });
    const enqueueDeletingOrDrainingOn = (nodeName: string | undefined): void => {
      if (nodeName === undefined) return;
      for (const m of machines.byIndex(MACHINE_NODE_INDEX, nodeName)) {
        if (m.metadata.deletionTimestamp !== undefined || isDraining(m)) this.enqueue(m);
      }
    };
    const drain = this.deps.informers.drain;
    drain?.pods.addHandler({
      onUpdate: (old, p) => {
        if (
          old.metadata.deletionTimestamp !== p.metadata.deletionTimestamp ||
          old.status?.phase !== p.status?.phase
        )
          enqueueDeletingOrDrainingOn(p.spec?.nodeName);
      },
      onDelete: (p) => {
        enqueueDeletingOrDrainingOn(p.spec?.nodeName);
      },
    });
    // A budget that changes may let a blocked drain go on (or explain better why it cannot).
    const enqueueDraining = (): void => {
      for (const m of drainingMachines(this.deps)) this.enqueue(m);
    };
    drain?.podDisruptionBudgets.addHandler({
      onAdd: (_b, initial) => {
        if (!initial) enqueueDraining();
      },
      onUpdate: (old, b) => {
        if (old !== b) enqueueDraining();
      },
      onDelete: enqueueDraining,
    });
    drain?.volumeAttachments.addHandler({
      onAdd: (v) => {
        enqueueDeletingOrDrainingOn(v.spec?.nodeName);
      },
      onUpdate: (_o, v) => {
        enqueueDeletingOrDrainingOn(v.spec?.nodeName);
      },
      onDelete: (v) => {
        enqueueDeletingOrDrainingOn(v.spec?.nodeName);
      },
    });
    const enqueueClassMachines = (
      className: string,
      namespace: string | undefined,
      onlyUncreated: boolean,
    ): void => {
      for (const m of machines.byIndex(MACHINE_CLASS_INDEX, className)) {
        if (m.metadata.namespace !== namespace) continue;
        if (!onlyUncreated || needsCreation(m)) this.enqueue(m);
      }
    };
    machineClasses.addHandler({
      onAdd: (c) => {
        enqueueClassMachines(c.metadata.name ?? '', c.metadata.namespace, true);
      },
      onUpdate: (old, c) => {
        if (old.metadata.resourceVersion === c.metadata.resourceVersion) return;
        enqueueClassMachines(c.metadata.name ?? '', c.metadata.namespace, false);
      },
    });
    const onSecret = (s: DeepReadonly<{ metadata: { name?: string; namespace?: string } }>): void => {
      for (const c of machineClasses.byIndex(CLASS_SECRET_INDEX, s.metadata.name ?? '')) {
        if (c.metadata.namespace === s.metadata.namespace)
          enqueueClassMachines(c.metadata.name ?? '', c.metadata.namespace, true);
      }
    };
    secrets.addHandler({
      onAdd: onSecret,
      onUpdate: (_o, s) => {
        onSecret(s);
      },
    });
  }

  async reconcile(key: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const m = this.deps.informers.machines.getByKey(key);
    if (m === undefined) return {};
    // The cache does not show this controller's last write to the machine yet: reconciling now
    // would redo that write's work from the state before it. The write's watch event enqueues
    // the machine again (the wait ends by itself in case that event never comes).
    const wait = this.ownWrites.waitFor(key, m.metadata.resourceVersion);
    if (wait !== undefined) {
      log.verbose('the cache does not show the last write yet; waiting for it', { waitMs: wait });
      return { requeueAfter: wait };
    }
    try {
      return await this.reconcileMachine(key, m, log);
    } finally {
      // Gone while this pass ran: its delete event may have come before the pass wrote to memory.
      if (this.deps.informers.machines.getByKey(key)?.metadata.uid !== m.metadata.uid)
        this.forgetMachine(key, m.metadata.uid);
    }
  }

  /** Everything kept in memory for a machine that is gone. */
  private forgetMachine(key: string, uid: string | undefined): void {
    endDrainsOf(this.deps, key);
    this.deps.deletions.delete(uid);
    this.deps.tokens.delete(uid);
    this.deps.budget.forget(uid);
    this.vmProbes.forget(uid);
  }

  private async reconcileMachine(key: string, m: CachedMachine, log: Logger): Promise<ReconcileResult> {
    if (m.metadata.deletionTimestamp !== undefined) {
      endDrain(this.deps, drainId('inplace', key));
      endDrain(this.deps, drainId('preserve', key));
      return runDeletionFlow(this.deps, m, log);
    }
    if (this.frozen()) {
      log.verbose('machine controller is frozen (an API server was unreachable); not reconciling');
      return { requeueAfter: FROZEN_RECHECK_MS };
    }
    if (!(m.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) {
      // The finalizer comes first: no VM may exist for a machine that can vanish without us.
      await addFinalizer(this.deps.client, MachineResource, m, Finalizer.MachineControllerManager);
      return {};
    }
    const results: ReconcileResult[] = [];
    const nodeName = m.metadata.labels?.[Label.Node];
    let current: CachedMachine | Machine = m;
    let updateDraining = false;
    if (this.deps.target !== undefined && nodeName !== undefined && phaseOf(m) !== MachinePhase.Creating) {
      const health = await this.reconcileHealth(m, nodeName, log);
      results.push(health.result);
      current = health.machine;
      const node = this.deps.informers.nodes?.get(undefined, nodeName);
      if (node !== undefined) {
        const inPlace = await reconcileInPlace(this.deps, current, node, log);
        results.push(inPlace.result);
        current = inPlace.machine;
        updateDraining = inPlace.draining === true;
      }
    }
    if (!updateDraining) endDrain(this.deps, drainId('inplace', key));
    if (needsCreation(current)) {
      this.creating.add(key);
      try {
        results.push(await runCreationFlow(this.deps, current, log));
      } finally {
        this.creating.delete(key);
      }
    } else {
      const node = nodeName === undefined ? undefined : this.deps.informers.nodes?.get(undefined, nodeName);
      results.push(await reconcilePreservation(this.deps, current, node, log));
    }
    return earliest(results);
  }

  /** Conditions and phase from the node, then the node brought in line with the machine. */
  private async reconcileHealth(
    m: CachedMachine,
    nodeName: string,
    log: Logger,
  ): Promise<{ result: ReconcileResult; machine: CachedMachine | Machine }> {
    const d = this.deps;
    const node = d.informers.nodes?.get(undefined, nodeName);
    const now = d.clock.now();
    const vm = await this.vmProbes.check(m, node, now, log);
    const decision = planHealth(m, node, d.settings, now, { vmGone: vm.gone });
    const change: StatusChange = {};
    if (decision.conditions !== undefined) change.conditions = decision.conditions;
    const recheck = [decision.recheckAfterMs, vm.recheckAfterMs].filter((x) => x !== undefined);
    let result: ReconcileResult =
      recheck.length === 0 ? {} : { requeueAfter: Math.max(1000, Math.min(...recheck)) };
    let current: CachedMachine | Machine = m;
    const liveNode = node !== undefined && node.metadata.deletionTimestamp === undefined ? node : undefined;
    let synced = false;
    const t = decision.transition;
    if (t?.needsBudget !== true) d.budget.forget(m.metadata.uid);
    if (t !== undefined) {
      change.phase = t.phase;
      change.lastOperation = t.lastOperation;
      if (t.phase === MachinePhase.Running) change.timeoutActive = false;
      if (t.phase === MachinePhase.Failed) {
        // Preserved when failed: the expiry goes with the Failed phase in one write, so the
        // MachineSet never sees the machine Failed and unprotected.
        const eff = effectivePreserve(m, node);
        if (
          wantsPreservation(eff.value, MachinePhase.Failed) &&
          m.status?.currentStatus?.preserveExpiryTime === undefined
        ) {
          change.preserveExpiryTime = rfc3339(now + preserveTimeoutOf(m, d.settings));
        }
      }
      if (t.needsBudget) {
        const outcome = await d.budget.tryMark(m, now, async () => {
          current = await patchMachineStatus(d.client, m, change, now);
        });
        if (!outcome.allowed) {
          const why =
            t.reason === 'vm-failed'
              ? `its provider reported its VM failed (${vmFailureOf(m) ?? ''})`
              : 'it is unhealthy past its health timeout';
          const message = `Machine ${m.metadata.name ?? ''}: ${why}, but ${outcome.inReplacement} machine(s) of its deployment are already being replaced (budget ${outcome.budget}); it is marked Failed once one finishes`;
          d.recorder.event(m, 'Warning', MachineEventReason.ReplacementBudgetExhausted, message);
          log.info('replacement budget exhausted', {
            inReplacement: outcome.inReplacement,
            budget: outcome.budget,
          });
          if (change.conditions !== undefined)
            current = await patchMachineStatus(d.client, m, { conditions: change.conditions }, now);
          result = { requeueAfter: 60_000 };
        } else {
          d.recorder.event(m, 'Warning', MachineEventReason.MachineFailed, t.lastOperation.description ?? '');
        }
      } else {
        // A joining machine's node carries its template (labels, taints) before the machine reads
        // Running: from then on the autoscaler counts the node as its group's capacity, which the
        // pending pods must be able to use (see autoscaler/instances.ts isRegistered).
        if (t.reason === 'joined' && liveNode !== undefined) {
          await this.syncNode(m, liveNode);
          synced = true;
        }
        // A failed launch holds its class's launches before the machine reads Failed: its
        // MachineSet replaces a Failed machine at once, and the replacement must find the hold.
        if (t.reason === 'launch-failed' || t.reason === 'vm-not-found') this.launchFailed(m, t.reason);
        current = await patchMachineStatus(d.client, m, change, now);
        await this.afterTransition(current, t.reason, t.joinDurationMs, log);
      }
    } else if (change.conditions !== undefined) {
      current = await patchMachineStatus(d.client, m, change, now);
    }
    if (liveNode !== undefined && !synced) await this.syncNode(current, liveNode);
    return { result, machine: current };
  }

  private async afterTransition(
    m: Machine | CachedMachine,
    reason: string,
    joinDurationMs: number | undefined,
    log: Logger,
  ): Promise<void> {
    const d = this.deps;
    switch (reason) {
      case 'joined': {
        log.info('machine joined the cluster', { node: m.metadata.labels?.[Label.Node], joinDurationMs });
        d.launches.succeeded(launchKeyOf(m));
        // The join duration goes to the metric and to the Running lastOperation (its description,
        // and its lastUpdateTime less the creation time, which is how gardener's own join tracking
        // reads it). No machine-join-duration annotation: gardener's master sets it on the object
        // it passes to UpdateStatus, which keeps only the status, so it never lands there either,
        // and writing it would cost a request per machine.
        if (joinDurationMs !== undefined) d.metrics.observe('join', m, joinDurationMs / 1000);
        await this.deleteBootstrapTokenIfUsed(m);
        return;
      }
      case 'vm-not-found':
      case 'launch-failed': {
        log.info(
          'the launch of the machine failed (its VM is gone or failed before its node joined); machine marked Failed',
          {
            providerID: m.spec?.providerID,
            reason,
          },
        );
        // Recorded before the Failed phase was written (launchFailed()): the hold stands now.
        const hold = d.launches.holdOf(launchKeyOf(m), d.clock.now());
        const next =
          hold === undefined
            ? ''
            : `; launches of class ${m.spec?.class?.name ?? ''} back off: ${hold.failures} failed in a row, the next at ${rfc3339(hold.until)}`;
        d.recorder.event(
          m,
          'Warning',
          MachineEventReason.LaunchFailed,
          `${m.status?.lastOperation?.description ?? ''}${next}`,
        );
        return;
      }
      case 'join-timeout':
        d.metrics.failedToJoin(m);
        d.recorder.event(
          m,
          'Warning',
          MachineEventReason.MachineFailed,
          m.status?.lastOperation?.description ?? '',
        );
        return;
      case 'inplace-successful':
        d.recorder.event(
          m,
          'Normal',
          MachineEventReason.InPlaceUpdateSuccessful,
          m.status?.lastOperation?.description ?? '',
        );
        log.info('machine updated in place', { node: m.metadata.labels?.[Label.Node] });
        return;
      case 'inplace-failed':
      case 'inplace-timeout':
        d.recorder.event(
          m,
          'Warning',
          MachineEventReason.InPlaceUpdateFailed,
          m.status?.lastOperation?.description ?? '',
        );
        log.info('in-place update of machine failed', { description: m.status?.lastOperation?.description });
        return;
      default:
        log.info('machine phase changed', { phase: m.status?.currentStatus?.phase, reason });
    }
  }

  /** Records a failed launch of the machine's class (launches.ts) and counts it. */
  private launchFailed(m: CachedMachine, reason: 'launch-failed' | 'vm-not-found'): void {
    const vm = `VM ${m.spec?.providerID ?? ''} of machine ${m.metadata.name ?? ''}`;
    const why =
      reason === 'vm-not-found'
        ? `${vm} vanished before its node joined`
        : `${vm} failed (${vmFailureOf(m) ?? 'reported by its provider'}) before its node joined`;
    this.deps.launches.failed(launchKeyOf(m), this.deps.clock.now(), why, m.metadata.uid);
    this.launchMetrics.failed(m);
  }

  /** The token is only created for user data that asks for it, so only then is it deleted. */
  private async deleteBootstrapTokenIfUsed(m: Machine | CachedMachine): Promise<void> {
    const target = this.deps.target;
    if (target === undefined) return;
    const r = resolveMachineClass(
      {
        machineClasses: this.deps.informers.machineClasses,
        secrets: this.deps.informers.secrets,
        providers: this.deps.providers,
      },
      m,
      { requireFinalizer: false },
    );
    const raw = r.ok ? r.secret.data?.userData : undefined;
    if (raw === undefined || !needsBootstrapToken(Buffer.from(raw, 'base64'))) return;
    const uid = m.metadata.uid ?? '';
    await deleteBootstrapToken(target, { name: m.metadata.name ?? '', uid }, this.deps.tokens.get(uid));
    this.deps.tokens.delete(uid);
  }

  private async syncNode(m: Machine | CachedMachine, node: CachedNode): Promise<void> {
    const target = this.deps.target;
    if (target === undefined) return;
    // A node another machine claims is never taken over (a reused node name): nothing is written.
    const claimedBy = node.metadata.labels?.[Label.NodeMachineName] ?? '';
    if (claimedBy !== '' && claimedBy !== m.metadata.name) return;
    const cls = this.deps.informers.machineClasses.get(m.metadata.namespace, m.spec?.class?.name ?? '');
    const plan = planNodeSync(node, m, cls, true);
    try {
      if (plan.patch !== undefined) {
        await target.patch(CoreResources.nodes, node.metadata.name ?? '', plan.patch, { type: 'merge' });
      }
      if (plan.statusPatch !== undefined) {
        await target.patch(CoreResources.nodes, node.metadata.name ?? '', plan.statusPatch, {
          type: 'merge',
          subresource: 'status',
        });
      }
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}
