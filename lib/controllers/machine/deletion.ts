// The deletion flow of a machine, as an explicit step machine whose position is stored in
// status.deletionStep (not parsed out of lastOperation.description, as MCM does):
//   GetVMStatus → DrainNode → DeleteVM → DeleteNode → RemoveFinalizer.
// Every step is idempotent, so a pass resumes at the recorded step (or from the start when none
// is recorded) and runs as many steps as it can; the step is recorded when a step must wait or
// fails, and when the drain is done, before the VM is deleted (so a restart never goes back to
// draining a node whose VM may be gone). The machine's Terminating mark goes out with the first
// of these records: a deletion whose node drains at once writes the machine's status once.
// A pass can start from a cache that lags behind this process's own writes (the machine is
// enqueued again by them while the previous pass runs): what this process knows it got past —
// the VM deleted, the node deleted, the finalizer removed — is kept in memory by machine UID, and
// a pass resumes from the later of the cache and that memory, so the driver deletes a VM once.
// After a restart the memory is empty and the recorded step (the API) is all there is.

import {
  Finalizer,
  Label,
  MachineOperationType,
  MachinePhase,
  MachineState,
  NodeConditionType,
  OperationDescriptionMarker,
  TerminatingReason,
} from '../../api/constants.js';
import { API_VERSION, MachineResource, type Machine } from '../../api/types.js';
import { decodeMachineError, formatMachineError, type DecodedMachineError } from '../../driver/codes.js';
import { describeBlockers, type Drainer } from '../../drain/drain.js';
import { PATIENCE_MS } from '../../drain/displaced.js';
import { POD_NODE_INDEX } from '../../drain/caches.js';
import { forceDeadline, forceReason, interruptionDeadline, podsToDrain } from '../../drain/pods.js';
import type { Driver, MachineRequest } from '../../driver/driver.js';
import { formatGoDuration } from '../../api/duration.js';
import { RetryPeriod, deleteRetryClass, deletionStatusRetryClass, retryDelay } from '../../driver/retry.js';
import type { ReconcileResult } from '../../kube/controller.js';
import { isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import { NODE_MACHINE_INDEX } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';
import { nodeBelongsTo, phaseOf } from '../machines.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import { drainId, endDrain } from './drains.js';
import { isNodeHealthy, lastOp } from './health.js';
import { resolveMachineClass } from './resolve.js';
import { drainTimeoutOf, nodeConditionsOf } from './settings.js';
import { DeletionStep, isNoop, patchMachine, patchMachineStatus, type StatusChange } from './status.js';

type AnyMachine = Machine | DeepReadonly<Machine>;

const STEPS: readonly DeletionStep[] = [
  DeletionStep.GetVMStatus,
  DeletionStep.DrainNode,
  DeletionStep.DeleteVM,
  DeletionStep.DeleteNode,
  DeletionStep.RemoveFinalizer,
];

/** The description of each step, with MCM's marker text so tools that read it keep working. */
const STEP_DESCRIPTION: Record<DeletionStep, string> = {
  GetVMStatus: OperationDescriptionMarker.GetVMStatus,
  DrainNode: `Getting VM status done. ${OperationDescriptionMarker.InitiateDrain}`,
  DeleteVM: `Drain done. ${OperationDescriptionMarker.InitiateVMDeletion}`,
  DeleteNode: `VM deletion was successful. ${OperationDescriptionMarker.InitiateNodeDeletion}`,
  RemoveFinalizer: `Node deletion done. ${OperationDescriptionMarker.InitiateFinalizerRemoval}`,
};

/** Steps a lagging cache must never send a pass back from: the VM is deleted by then. */
const PAST_VM: readonly DeletionStep[] = [DeletionStep.DeleteNode, DeletionStep.RemoveFinalizer];

/** What this process knows of a deletion it took past the VM: the step, the node (from the pass). */
export interface DeletionMemo {
  step: DeletionStep | 'Finished';
  nodeName: string;
}

/**
 * Where a pass resumes (pure): the recorded step, unless this process knows it got further
 * (`memo.step` later), or 'finished' when it already removed the finalizer (the machine's delete
 * event is on its way).
 */
export function resumePoint(
  recorded: DeletionStep,
  memo: DeletionMemo | undefined,
): { step: DeletionStep; nodeName?: string } | 'finished' {
  if (memo === undefined) return { step: recorded };
  if (memo.step === 'Finished') return 'finished';
  return STEPS.indexOf(memo.step) > STEPS.indexOf(recorded)
    ? { step: memo.step, nodeName: memo.nodeName }
    : { step: recorded };
}

export function recordedStep(m: AnyMachine): DeletionStep {
  const s = m.status?.deletionStep;
  return (STEPS as readonly string[]).includes(s ?? '') ? (s as DeletionStep) : DeletionStep.GetVMStatus;
}

type StepOutcome =
  { next: DeletionStep; record?: boolean } | { wait: ReconcileResult; change: StatusChange } | { done: true };

class DeletionPass {
  m: AnyMachine;
  nodeName: string;
  private warnedNotOwned = false;
  /** The Terminating mark while it is still to be sent, and its write once sent (see mark()). */
  private pendingMark: StatusChange | undefined;
  private marking: Promise<void> = Promise.resolve();

  constructor(
    private readonly d: MachineDeps,
    cached: AnyMachine,
    private readonly log: Logger,
  ) {
    this.m = cached;
    this.nodeName = cached.metadata.labels?.[Label.Node] ?? '';
  }

  /** The driver call's request and the driver, or why they cannot be had. */
  private call(): { req: MachineRequest; driver: Driver } | DecodedMachineError {
    const r = resolveMachineClass(
      {
        machineClasses: this.d.informers.machineClasses,
        secrets: this.d.informers.secrets,
        providers: this.d.providers,
      },
      this.m,
      { requireFinalizer: false, allowMissingSecrets: true },
    );
    if (!r.ok) return this.callWithoutClass(r.message);
    return {
      driver: r.driver,
      req: {
        machine: structuredClone(this.m) as Machine,
        machineClass: structuredClone(r.machineClass) as MachineRequest['machineClass'],
        secret: r.secret,
      },
    };
  }

  /**
   * The class is gone (MCM hangs forever here): find the provider from the providerID and delete
   * the VM with an empty class of that provider and no credentials, which is all the built-in
   * virtual provider needs (a cloud provider without credentials fails and says so).
   */
  private callWithoutClass(why: string): { req: MachineRequest; driver: Driver } | DecodedMachineError {
    const providerID = this.m.spec?.providerID ?? '';
    const provider = providerID === '' ? undefined : this.d.providers.providerOfID(providerID);
    const driver = provider === undefined ? undefined : this.d.providers.driverFor(provider);
    if (provider === undefined || driver === undefined) {
      return {
        code: 'FailedPrecondition',
        message: `${why}; no provider recognises providerID "${providerID}"`,
        ok: false,
      };
    }
    const namespace = this.m.metadata.namespace ?? '';
    return {
      driver,
      req: {
        machine: structuredClone(this.m) as Machine,
        machineClass: {
          apiVersion: API_VERSION,
          kind: 'MachineClass',
          metadata: { name: this.m.spec?.class?.name ?? '', namespace },
          provider,
          providerSpec: {},
        },
        secret: { apiVersion: 'v1', kind: 'Secret', metadata: { namespace }, data: {} },
      },
    };
  }

  private failed(step: DeletionStep, e: DecodedMachineError, retryMs: number, what: string): StepOutcome {
    const description = `${what}: ${e.ok ? formatMachineError(e.code, e.message) : e.message}. Will retry. ${STEP_DESCRIPTION[step]}`;
    this.d.recorder.event(this.m, 'Warning', MachineEventReason.DeleteFailed, description);
    return {
      wait: { requeueAfter: retryMs },
      change: {
        phase: MachinePhase.Terminating,
        deletionStep: step,
        lastOperation: lastOp(
          MachineOperationType.Delete,
          MachineState.Failed,
          description,
          this.d.clock.now(),
          e.ok ? e.code : undefined,
        ),
      },
    };
  }

  async getVMStatus(): Promise<StepOutcome> {
    if (this.d.target === undefined) return { next: DeletionStep.DeleteVM, record: true };
    if (this.nodeName === '') {
      const byLabel = this.d.informers.nodes?.byIndex(NODE_MACHINE_INDEX, this.m.metadata.name ?? '')[0];
      this.nodeName = byLabel?.metadata.name ?? '';
    }
    if (this.nodeName === '' && (this.m.spec?.providerID ?? '') !== '') {
      const c = this.call();
      if ('ok' in c)
        return this.failed(DeletionStep.GetVMStatus, c, RetryPeriod.Medium, 'Cannot read the VM');
      try {
        this.nodeName = (await c.driver.getMachineStatus(c.req)).nodeName;
      } catch (err) {
        const e = decodeMachineError(err);
        if (!(e.ok && ['NotFound', 'Unimplemented', 'Uninitialized'].includes(e.code))) {
          const retry = e.ok ? retryDelay(deletionStatusRetryClass(e.code), 0) : RetryPeriod.Long;
          return this.failed(DeletionStep.GetVMStatus, e, retry, 'Getting the VM status failed');
        }
      }
    }
    if (this.nodeName !== '' && this.m.metadata.labels?.[Label.Node] !== this.nodeName) {
      await this.mark();
      this.m = await patchMachine(this.d.client, this.m, { labels: { [Label.Node]: this.nodeName } });
    }
    return { next: DeletionStep.DrainNode };
  }

  /**
   * The node the deletion may act on: the named node when it is proved to be this machine's (see
   * nodeBelongsTo), else none, with a warning; the flow then leaves that node alone.
   */
  private owned<N extends Node | DeepReadonly<Node>>(node: N | undefined): N | undefined {
    if (node === undefined || nodeBelongsTo(node, this.m)) return node;
    const claimedBy = node.metadata.labels?.[Label.NodeMachineName];
    const message =
      `Node ${this.nodeName} is not this machine's (it ${claimedBy === undefined ? `has providerID "${node.spec?.providerID ?? ''}"` : `belongs to machine ${claimedBy}`}, ` +
      `the machine's VM is "${this.m.spec?.providerID ?? ''}"): it is not cordoned, drained or deleted`;
    if (!this.warnedNotOwned) {
      this.warnedNotOwned = true;
      this.log.warn('node named by the machine belongs to another machine; leaving it alone', {
        node: this.nodeName,
        claimedBy,
      });
      this.d.recorder.event(this.m, 'Warning', MachineEventReason.NodeNotOwned, message);
    }
    this.nodeName = '';
    return undefined;
  }

  /** Marks the node Terminating and cordons it, then drains it. */
  async drainNode(): Promise<StepOutcome> {
    const target = this.d.target;
    const node = this.owned(
      this.nodeName === '' ? undefined : this.d.informers.nodes?.get(undefined, this.nodeName),
    );
    if (target !== undefined && node !== undefined && node.metadata.deletionTimestamp === undefined) {
      const hasCondition = node.status?.conditions?.some(
        (c) => c.type === NodeConditionType.Terminating && c.status === 'True',
      );
      const writes: Promise<unknown>[] = [];
      if (hasCondition !== true) {
        const healthy = isNodeHealthy(
          node.status?.conditions ?? [],
          nodeConditionsOf(this.m, this.d.settings),
        );
        const now = rfc3339(this.d.clock.now());
        writes.push(
          target.patch(
            CoreResources.nodes,
            this.nodeName,
            {
              status: {
                conditions: [
                  {
                    type: NodeConditionType.Terminating,
                    status: 'True',
                    reason: healthy ? TerminatingReason.ScaleDown : TerminatingReason.Unhealthy,
                    message: 'Machine Controller is scaling down machine',
                    lastHeartbeatTime: now,
                    lastTransitionTime: now,
                  },
                ],
              },
            },
            { type: 'strategic', subresource: 'status' },
          ),
        );
      }
      if (node.spec?.unschedulable !== true) {
        writes.push(
          target.patch(
            CoreResources.nodes,
            this.nodeName,
            { spec: { unschedulable: true } },
            { type: 'merge' },
          ),
        );
      }
      // The condition (status) and the cordon (spec) are separate requests with no order between
      // them: both go out at once, and both must be done before the drain looks at pods. The
      // machine's Terminating mark waits for the drain's first outcome and goes out with it.
      await settleAll(writes, (err) => isNotFound(err));
    }
    const drainer = this.d.drainer;
    if (drainer === undefined || node === undefined || node.metadata.deletionTimestamp !== undefined) {
      // No node left to drain: a drain that was under way ends here too.
      endDrain(this.d, drainId('deletion', objectKey(this.m)));
      return { next: DeletionStep.DeleteVM, record: true };
    }
    return this.drainRound(drainer);
  }

  /**
   * An interrupted machine's drain displaces its pods: from its first round on, their successors
   * are timed until they are bound (displaced.ts), and an event says how long they waited.
   */
  private followDisplacedPods(): void {
    const d = this.d;
    const key = objectKey(this.m);
    const pods = d.informers.drain?.pods;
    if (d.displaced === undefined || pods === undefined || interruptionDeadline(this.m) === undefined) return;
    if (d.displaced.tracking(key)) return;
    const machine = this.m;
    d.displaced.start(key, podsToDrain(pods.byIndex(POD_NODE_INDEX, this.nodeName)), (r) => {
      const waits = [...r.pendingMs].sort((a, b) => a - b);
      const longest = waits[waits.length - 1];
      const median = waits[Math.floor((waits.length - 1) / 2)];
      const lost = r.displaced - waits.length;
      d.recorder.event(
        machine,
        lost > 0 ? 'Warning' : 'Normal',
        MachineEventReason.InterruptedPodsRescheduled,
        `${waits.length} of the ${r.displaced} pods its node's drain displaced got a node again` +
          (longest === undefined
            ? ''
            : `: Pending ${formatGoDuration(median ?? 0)} (median), ${formatGoDuration(longest)} at most`) +
          (lost > 0 ? `; ${lost} not within ${formatGoDuration(PATIENCE_MS)}` : ''),
      );
    });
  }

  /** One round of the drain; the step is done once no pod (and no volume) is left to wait for. */
  private async drainRound(drainer: Drainer): Promise<StepOutcome> {
    const d = this.d;
    const now = d.clock.now();
    const key = drainId('deletion', objectKey(this.m));
    const name = this.m.metadata.name ?? '';
    const namespace = this.m.metadata.namespace ?? '';
    const requested = Date.parse(this.m.metadata.deletionTimestamp ?? '');
    const startedAt = Number.isNaN(requested) ? now : requested;
    const timeout = drainTimeoutOf(this.m, d.settings);
    const force = forceReason(this.m, now, timeout, d.informers.nodes?.get(undefined, this.nodeName));
    this.followDisplacedPods();
    const c = this.call();
    const round = await drainer.round({
      id: key,
      nodeName: this.nodeName,
      startedAt,
      now,
      force: force !== undefined,
      driver: 'ok' in c ? undefined : c.driver,
    });
    if (round.done) {
      drainer.forget(key);
      d.drainMetrics.finished(key, namespace, this.m.metadata.labels?.name ?? '', (now - startedAt) / 1000);
      if (force !== undefined) {
        d.recorder.event(
          this.m,
          'Warning',
          MachineEventReason.DrainForced,
          `Node ${this.nodeName} was drained by force: ${force}`,
        );
      }
      return { next: DeletionStep.DeleteVM, record: true };
    }
    const forceAt = forceDeadline(this.m, startedAt, timeout);
    d.drainMetrics.blocked(key, namespace, name, round.blockers, (forceAt - now) / 1000);
    const what = describeBlockers(round.blockers);
    let description: string;
    if (force !== undefined) {
      description = `Forced drain of node ${this.nodeName} (${force}) is finishing: ${what}. ${OperationDescriptionMarker.InitiateDrain}`;
    } else {
      const limit =
        forceAt < startedAt + timeout
          ? 'the interruption deadline of its VM'
          : `drain timeout ${formatGoDuration(timeout)}`;
      description = `Drain of node ${this.nodeName} waits: ${what}. Pods still there at ${rfc3339(forceAt)} (${limit}) are deleted without eviction. ${OperationDescriptionMarker.InitiateDrain}`;
      if (round.blockers.some((b) => b.reason === 'pdb' || b.reason === 'error')) {
        d.recorder.event(
          this.m,
          'Warning',
          MachineEventReason.DrainBlocked,
          `Drain of node ${this.nodeName} waits: ${what}`,
        );
      }
    }
    // Look again when the drain is forced, if that comes before the next retry.
    const untilForce = force === undefined ? Math.max(1000, forceAt - now) : round.requeueAfterMs;
    return {
      wait: { requeueAfter: Math.min(round.requeueAfterMs, untilForce) },
      change: {
        phase: MachinePhase.Terminating,
        deletionStep: DeletionStep.DrainNode,
        lastOperation: lastOp(MachineOperationType.Delete, MachineState.Processing, description, now),
      },
    };
  }

  async deleteVM(): Promise<StepOutcome> {
    // The machine reads Terminating before its VM goes (the step's record carried the mark, unless
    // the pass resumed here).
    await this.mark();
    const c = this.call();
    if ('ok' in c) {
      // Without a recorded VM and without a class to ask the provider, there is nothing to delete.
      if ((this.m.spec?.providerID ?? '') === '') return { next: DeletionStep.DeleteNode };
      return this.failed(DeletionStep.DeleteVM, c, RetryPeriod.Medium, 'Cannot delete the VM');
    }
    try {
      const r = await c.driver.deleteMachine(c.req);
      this.log.info('deleted VM', { providerID: this.m.spec?.providerID });
      if (r.lastKnownState !== undefined)
        this.log.debug('driver returned a last known state', { state: r.lastKnownState });
    } catch (err) {
      const e = decodeMachineError(err);
      if (!(e.ok && e.code === 'NotFound')) {
        const retry = e.ok ? retryDelay(deleteRetryClass(e.code), 0) : RetryPeriod.Long;
        return this.failed(DeletionStep.DeleteVM, e, retry, 'Deleting the VM failed');
      }
    }
    // DeleteVM stays the recorded step: after a restart the pass deletes the VM again (the
    // provider answers NotFound) and goes on from there, never back to the drain.
    return { next: DeletionStep.DeleteNode };
  }

  async deleteNode(): Promise<StepOutcome> {
    const target = this.d.target;
    if (target !== undefined && this.nodeName !== '') {
      let node: Node | DeepReadonly<Node> | undefined = this.d.informers.nodes?.get(undefined, this.nodeName);
      if (node === undefined) {
        try {
          node = await target.get<Node>(CoreResources.nodes, this.nodeName);
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
      node = this.owned(node);
      if (node !== undefined) {
        // The node as the finalizer removal left it (undefined: gone): when the VM's deletion
        // already deleted it (the virtual cloud's VM is its Node), there is nothing to delete.
        const after = (node.metadata.finalizers ?? []).includes(Finalizer.MachineControllerNode)
          ? await removeFinalizerAt(target, CoreResources.nodes, node, Finalizer.MachineControllerNode)
          : node;
        if (after !== undefined && after.metadata.deletionTimestamp === undefined) {
          try {
            await target.delete(CoreResources.nodes, this.nodeName, {
              ...(node.metadata.uid === undefined ? {} : { preconditions: { uid: node.metadata.uid } }),
            });
          } catch (err) {
            if (!isNotFound(err)) throw err;
          }
        }
      }
    }
    return { next: DeletionStep.RemoveFinalizer };
  }

  async removeFinalizer(): Promise<StepOutcome> {
    await this.mark();
    await removeFinalizerAt(this.d.client, MachineResource, this.m, Finalizer.MachineControllerManager);
    const requested = Date.parse(this.m.metadata.deletionTimestamp ?? '');
    if (!Number.isNaN(requested))
      this.d.metrics.observe('delete', this.m, (this.d.clock.now() - requested) / 1000);
    return { done: true };
  }

  /**
   * Writes a status change of the machine. A Terminating mark not yet sent goes out in the same
   * write (the change is Terminating too): one round trip where there would be two.
   */
  async record(change: StatusChange): Promise<void> {
    if (this.pendingMark !== undefined) {
      this.pendingMark = { ...this.pendingMark, ...change };
      return this.mark();
    }
    await this.mark();
    await this.write(change);
  }

  private async write(change: StatusChange): Promise<void> {
    if (isNoop(this.m, change)) return;
    this.m = await patchMachineStatus(this.d.client, this.m, change, this.d.clock.now());
  }

  /**
   * Sends the Terminating mark the pass started with, unless it is sent already; resolves once it
   * is written. The first record of the pass carries it (see record()); every other write of the
   * machine, and the VM's deletion, wait for it.
   */
  private mark(): Promise<void> {
    const change = this.pendingMark;
    if (change !== undefined) {
      this.pendingMark = undefined;
      this.marking = this.write(change);
    }
    return this.marking;
  }

  async run(): Promise<ReconcileResult> {
    const uid = this.m.metadata.uid;
    const resume = resumePoint(recordedStep(this.m), this.d.deletions.get(uid));
    if (resume === 'finished') return {};
    let step = resume.step;
    if (resume.nodeName !== undefined) {
      // The cache lags behind our own writes: this pass goes on from where the last one got.
      this.nodeName = resume.nodeName;
      this.log.verbose('resuming the deletion past the cached step', { step });
    } else if (phaseOf(this.m) !== MachinePhase.Terminating) {
      this.pendingMark = {
        phase: MachinePhase.Terminating,
        deletionStep: step,
        preserveExpiryTime: null,
        lastOperation: lastOp(
          MachineOperationType.Delete,
          MachineState.Processing,
          STEP_DESCRIPTION[step],
          this.d.clock.now(),
        ),
      };
    }
    let outcome = await this.runStep(step);
    for (;;) {
      if ('done' in outcome) {
        this.d.deletions.set(uid, { step: 'Finished', nodeName: this.nodeName });
        return {};
      }
      if ('wait' in outcome) {
        await this.record(outcome.change);
        return outcome.wait;
      }
      step = outcome.next;
      if (PAST_VM.includes(step)) this.d.deletions.set(uid, { step, nodeName: this.nodeName });
      outcome = outcome.record === true ? await this.recordAndRun(step) : await this.runStep(step);
    }
  }

  /** Records that the pass reached `step`, then runs it. */
  private async recordAndRun(step: DeletionStep): Promise<StepOutcome> {
    await this.record({
      phase: MachinePhase.Terminating,
      deletionStep: step,
      lastOperation: lastOp(
        MachineOperationType.Delete,
        MachineState.Processing,
        STEP_DESCRIPTION[step],
        this.d.clock.now(),
      ),
    });
    return this.runStep(step);
  }

  private runStep(step: DeletionStep): Promise<StepOutcome> {
    switch (step) {
      case DeletionStep.GetVMStatus:
        return this.getVMStatus();
      case DeletionStep.DrainNode:
        return this.drainNode();
      case DeletionStep.DeleteVM:
        return this.deleteVM();
      case DeletionStep.DeleteNode:
        return this.deleteNode();
      case DeletionStep.RemoveFinalizer:
        return this.removeFinalizer();
    }
  }
}

/**
 * Waits for every write (none is left in flight), then throws the first failure that `ignore`
 * does not accept, in the order given.
 */
async function settleAll(
  writes: readonly Promise<unknown>[],
  ignore: (err: unknown) => boolean = () => false,
): Promise<void> {
  for (const r of await Promise.allSettled(writes)) {
    if (r.status === 'rejected' && !ignore(r.reason)) throw r.reason;
  }
}

/** Runs the deletion flow of a machine that has a deletionTimestamp. */
export function runDeletionFlow(d: MachineDeps, m: AnyMachine, log: Logger): Promise<ReconcileResult> {
  if (!(m.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) return Promise.resolve({});
  return new DeletionPass(d, m, log).run();
}
