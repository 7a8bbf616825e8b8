// The deletion flow of a machine, as an explicit step machine whose position is stored in
// status.deletionStep (not parsed out of lastOperation.description, as MCM does):
//   GetVMStatus → DrainNode → DeleteVM → DeleteNode → RemoveFinalizer.
// Every step is idempotent, so a pass resumes at the recorded step (or from the start when none
// is recorded) and runs as many steps as it can; the step is recorded when a step must wait or
// fails, and once the VM is gone (so a restart never goes back to draining a node without VM).

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
import { MachineResource, type Machine } from '../../api/types.js';
import { decodeMachineError, formatMachineError, type DecodedMachineError } from '../../driver/codes.js';
import type { Driver, MachineRequest } from '../../driver/driver.js';
import { RetryPeriod, deleteRetryClass, deletionStatusRetryClass, retryDelay } from '../../driver/retry.js';
import type { ReconcileResult } from '../../kube/controller.js';
import { isNotFound } from '../../kube/errors.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import { NODE_MACHINE_INDEX } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';
import { phaseOf } from '../machines.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import { isNodeHealthy, lastOp } from './health.js';
import { resolveMachineClass } from './resolve.js';
import { nodeConditionsOf } from './settings.js';
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

export function recordedStep(m: AnyMachine): DeletionStep {
  const s = m.status?.deletionStep;
  return (STEPS as readonly string[]).includes(s ?? '') ? (s as DeletionStep) : DeletionStep.GetVMStatus;
}

type StepOutcome =
  { next: DeletionStep; record?: boolean } | { wait: ReconcileResult; change: StatusChange } | { done: true };

class DeletionPass {
  m: AnyMachine;
  nodeName: string;

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
      { requireFinalizer: false },
    );
    if (!r.ok) return { code: 'FailedPrecondition', message: r.message, ok: false };
    return {
      driver: r.driver,
      req: {
        machine: structuredClone(this.m) as Machine,
        machineClass: structuredClone(r.machineClass) as MachineRequest['machineClass'],
        secret: r.secret,
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
    if (this.d.target === undefined) return { next: DeletionStep.DeleteVM };
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
      this.m = await patchMachine(this.d.client, this.m, { labels: { [Label.Node]: this.nodeName } });
    }
    return { next: DeletionStep.DrainNode };
  }

  /** Marks the node Terminating and cordons it; draining pods comes with the drain issue. */
  async drainNode(): Promise<StepOutcome> {
    const target = this.d.target;
    const node = this.nodeName === '' ? undefined : this.d.informers.nodes?.get(undefined, this.nodeName);
    if (target !== undefined && node !== undefined && node.metadata.deletionTimestamp === undefined) {
      const hasCondition = node.status?.conditions?.some(
        (c) => c.type === NodeConditionType.Terminating && c.status === 'True',
      );
      try {
        if (hasCondition !== true) {
          const healthy = isNodeHealthy(
            node.status?.conditions ?? [],
            nodeConditionsOf(this.m, this.d.settings),
          );
          const now = rfc3339(this.d.clock.now());
          await target.patch(
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
          );
        }
        if (node.spec?.unschedulable !== true) {
          await target.patch(
            CoreResources.nodes,
            this.nodeName,
            { spec: { unschedulable: true } },
            { type: 'merge' },
          );
        }
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    return { next: DeletionStep.DeleteVM };
  }

  async deleteVM(): Promise<StepOutcome> {
    const c = this.call();
    if ('ok' in c) {
      // Without a recorded VM and without a class to ask the provider, there is nothing to delete.
      if ((this.m.spec?.providerID ?? '') === '') return { next: DeletionStep.DeleteNode, record: true };
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
    return { next: DeletionStep.DeleteNode, record: true };
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
      if (node !== undefined) {
        await removeFinalizerAt(target, CoreResources.nodes, node, Finalizer.MachineControllerNode);
        if (node.metadata.deletionTimestamp === undefined) {
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
    await removeFinalizerAt(this.d.client, MachineResource, this.m, Finalizer.MachineControllerManager);
    const requested = Date.parse(this.m.metadata.deletionTimestamp ?? '');
    if (!Number.isNaN(requested))
      this.d.metrics.observe('delete', this.m, (this.d.clock.now() - requested) / 1000);
    return { done: true };
  }

  async record(change: StatusChange): Promise<void> {
    if (isNoop(this.m, change)) return;
    this.m = await patchMachineStatus(this.d.client, this.m, change, this.d.clock.now());
  }

  async run(): Promise<ReconcileResult> {
    let step = recordedStep(this.m);
    if (phaseOf(this.m) !== MachinePhase.Terminating) {
      await this.record({
        phase: MachinePhase.Terminating,
        deletionStep: step,
        preserveExpiryTime: null,
        lastOperation: lastOp(
          MachineOperationType.Delete,
          MachineState.Processing,
          STEP_DESCRIPTION[step],
          this.d.clock.now(),
        ),
      });
    }
    for (;;) {
      const outcome = await this.runStep(step);
      if ('done' in outcome) return {};
      if ('wait' in outcome) {
        await this.record(outcome.change);
        return outcome.wait;
      }
      step = outcome.next;
      if (outcome.record === true) {
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
      }
    }
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

/** Runs the deletion flow of a machine that has a deletionTimestamp. */
export function runDeletionFlow(d: MachineDeps, m: AnyMachine, log: Logger): Promise<ReconcileResult> {
  if (!(m.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) return Promise.resolve({});
  return new DeletionPass(d, m, log).run();
}
