import { Finalizer, MachineOperationType, MachinePhase, MachineState } from '../../../lib/api/constants.js';
import type { Node } from '../../../lib/kube/types.js';
import { MachineResource, type Machine } from '../../../lib/api/types.js';
import { rfc3339 } from '../../../lib/controllers/conditions.js';
import type { KubeApi } from '../../../lib/kube/client.js';
import { RealClock } from '../../../lib/kube/clock.js';
import { Controller, type ReconcileResult } from '../../../lib/kube/controller.js';
import { isConflict, isNotFound } from '../../../lib/kube/errors.js';
import { Informer, objectKey, type DeepReadonly } from '../../../lib/kube/informer.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { Logger } from '../../../lib/observability/logger.js';
import { KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE } from '../../harness/controlplane.js';

export interface StandInOptions {
  /** Time from creation to Running. */
  runningAfterMs?: number;
  /** Time from deletion request to the machine's finalizer being removed. */
  terminateAfterMs?: number;
  /** Create a Node object per machine (and set the machine's node label and providerID). */
  nodes?: boolean;
  /** Machines for which this returns true go to Failed instead of Running. */
  fail?: (m: DeepReadonly<Machine>) => boolean;
}

/**
 * A test stand-in for the machine controller: it adds the machine finalizer, moves machines
 * '' → Pending → Running after a delay, and on deletion marks them Terminating and removes the
 * finalizer after a delay. The real machine controller exists (lib/controllers/machine/) and is
 * what the lifecycle, AWS, drain and e2e suites run; the MachineSet, MachineDeployment, overshoot
 * and manager suites keep this stand-in on purpose: their subject is the set and deployment
 * controllers, and the stand-in makes the machines' phases and timing exact and fast (no VMs, no
 * nodes, no drain), so a rollout's bounds and a set's counts are asserted without a provider's
 * timing in between.
 */
export class StandInMachineController {
  private readonly informer: Informer<Machine>;
  private readonly controller: Controller;
  private readonly clock = new RealClock();

  constructor(
    private readonly client: KubeApi,
    namespace: string,
    private readonly opts: StandInOptions,
    logger: Logger,
  ) {
    this.informer = new Informer<Machine>({
      client,
      resource: MachineResource,
      namespace,
      logger,
      name: 'standin-machines',
    });
    this.controller = new Controller({
      name: 'standin-machine',
      workers: 4,
      logger,
      reconciler: { reconcile: (key) => this.reconcile(key) },
      isRequeueError: isConflict,
    });
    this.informer.addHandler({
      onAdd: (m) => {
        this.controller.enqueue(objectKey(m));
      },
      onUpdate: (_o, m) => {
        this.controller.enqueue(objectKey(m));
      },
    });
  }

  async start(): Promise<void> {
    this.informer.start();
    await this.informer.waitForSync();
    this.controller.start();
  }

  async stop(): Promise<void> {
    await this.controller.stop();
    await this.informer.stop();
  }

  private elapsed(m: DeepReadonly<Machine>): number {
    const t = Date.parse(m.status?.currentStatus?.lastUpdateTime ?? '');
    return Number.isNaN(t) ? Infinity : this.clock.now() - t;
  }

  private async setStatus(
    m: DeepReadonly<Machine>,
    phase: string,
    op: { type: string; state: string; description: string },
  ): Promise<void> {
    const now = rfc3339(this.clock.now());
    await this.client.patch(
      MachineResource,
      m.metadata.name ?? '',
      {
        status: {
          currentStatus: { phase, lastUpdateTime: now, timeoutActive: false },
          lastOperation: { ...op, lastUpdateTime: now },
        },
      },
      { type: 'merge', namespace: m.metadata.namespace ?? '', subresource: 'status' },
    );
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const m = this.informer.getByKey(key);
    if (m === undefined) return {};
    const name = m.metadata.name ?? '';
    const namespace = m.metadata.namespace ?? '';
    const phase = m.status?.currentStatus?.phase ?? '';
    if (m.metadata.deletionTimestamp !== undefined) {
      if (phase !== MachinePhase.Terminating) {
        await this.setStatus(m, MachinePhase.Terminating, {
          type: MachineOperationType.Delete,
          state: MachineState.Processing,
          description: 'stand-in: deleting',
        });
        return { requeueAfter: this.opts.terminateAfterMs ?? 100 };
      }
      const wait = (this.opts.terminateAfterMs ?? 100) - this.elapsed(m);
      if (wait > 0) return { requeueAfter: wait };
      if (this.opts.nodes === true) {
        await this.client.delete(CoreResources.nodes, name).catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
      }
      const finalizers = (m.metadata.finalizers ?? []).filter(
        (f) => f !== Finalizer.MachineControllerManager,
      );
      await this.client
        .patch(
          MachineResource,
          name,
          {
            metadata: {
              finalizers: finalizers.length === 0 ? null : finalizers,
              resourceVersion: m.metadata.resourceVersion,
            },
          },
          { type: 'merge', namespace },
        )
        .catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
      return {};
    }
    if (!(m.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)) {
      await this.client.patch(
        MachineResource,
        name,
        {
          metadata: {
            finalizers: [...(m.metadata.finalizers ?? []), Finalizer.MachineControllerManager],
            resourceVersion: m.metadata.resourceVersion,
          },
        },
        { type: 'merge', namespace },
      );
      return {};
    }
    if (phase === MachinePhase.Creating) {
      if (this.opts.nodes === true) {
        const node: Node = {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: {
            name,
            labels: { 'kubernetes.io/hostname': name },
            annotations: { [KWOK_NODE_ANNOTATION]: KWOK_NODE_ANNOTATION_VALUE },
          },
          spec: { providerID: `standin:///${namespace}/${name}` },
        };
        await this.client.create(CoreResources.nodes, node).catch((err: unknown) => {
          if (!(err instanceof Error && err.name === 'AlreadyExistsError')) throw err;
        });
        await this.client.patch(
          MachineResource,
          name,
          { metadata: { labels: { node: name } }, spec: { providerID: `standin:///${namespace}/${name}` } },
          { type: 'merge', namespace },
        );
      }
      await this.setStatus(m, MachinePhase.Pending, {
        type: MachineOperationType.Create,
        state: MachineState.Processing,
        description: 'stand-in: creating',
      });
      return { requeueAfter: this.opts.runningAfterMs ?? 100 };
    }
    if (phase === MachinePhase.Pending) {
      const wait = (this.opts.runningAfterMs ?? 100) - this.elapsed(m);
      if (wait > 0) return { requeueAfter: wait };
      if (this.opts.fail?.(m) === true) {
        await this.setStatus(m, MachinePhase.Failed, {
          type: MachineOperationType.Create,
          state: MachineState.Failed,
          description: 'stand-in: failed on purpose',
        });
      } else {
        await this.setStatus(m, MachinePhase.Running, {
          type: MachineOperationType.Create,
          state: MachineState.Successful,
          description: 'stand-in: running',
        });
      }
    }
    return {};
  }
}
