import { Finalizer, MACHINE_CLASS_KIND } from '../../api/constants.js';
import { MachineClassResource, type MachineClass } from '../../api/types.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { MACHINE_CLASS_INDEX, type ControllerContext } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';
import type { Logger } from '../../observability/logger.js';
import { addFinalizer } from '../ownership.js';
import type { ReleaseVerdict } from '../safety/orphans.js';

/** How soon a class whose release waits for its VMs is looked at again (events come sooner). */
export const RELEASE_RETRY_MS = 10_000;

/**
 * The class keeps its finalizer because a pass over its VMs failed (already logged where it
 * failed): retried with the work queue's backoff, not every RELEASE_RETRY_MS.
 */
export class ReleaseDeferredError extends Error {}

export interface MachineClassControllerOptions {
  /**
   * Runs before the finalizer of a class no machine refers to is removed (the orphan VM
   * collection's pass over the class, when the machine controller runs in this process); the
   * finalizer stays until it lets the class go.
   */
  beforeRelease?: ((cls: DeepReadonly<MachineClass>, log: Logger) => Promise<ReleaseVerdict>) | undefined;
}

/**
 * Keeps a MachineClass from disappearing under its machines and their VMs: while machines
 * reference it, it carries the machine-controller-manager finalizer (so a delete waits); once
 * none does and no VM of the class is left without a machine, the finalizer goes (and a pending
 * delete completes). A VM whose machine is gone can only be found through its class.
 */
export class MachineClassController {
  readonly controller: Controller;

  constructor(
    private readonly ctx: ControllerContext,
    private readonly opts: MachineClassControllerOptions = {},
  ) {
    this.controller = new Controller({
      name: 'machineclass',
      workers: 2,
      reconciler: { reconcile: (key, rctx) => this.reconcile(key, rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: (err) => isConflict(err) || err instanceof ReleaseDeferredError,
    });
    const { machineClasses, machines } = ctx.informers;
    const enqueue = (c: DeepReadonly<MachineClass>): void => {
      this.controller.enqueue(objectKey(c));
    };
    machineClasses.addHandler({
      onAdd: enqueue,
      onUpdate: (_o, c) => {
        enqueue(c);
      },
    });
    const onMachine = (
      m: DeepReadonly<{ metadata: { namespace?: string }; spec?: { class?: { name?: string } } }>,
    ): void => {
      const name = m.spec?.class?.name;
      if (name !== undefined) this.controller.enqueue(`${m.metadata.namespace ?? ''}/${name}`);
    };
    machines.addHandler({
      onAdd: onMachine,
      onUpdate: (old, m) => {
        if (old.spec?.class?.name !== m.spec?.class?.name) onMachine(old);
        onMachine(m);
      },
      onDelete: onMachine,
    });
  }

  start(): void {
    this.controller.start();
  }

  async stop(): Promise<void> {
    await this.controller.stop();
  }

  async reconcile(key: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const cls = this.ctx.informers.machineClasses.getByKey(key);
    if (cls === undefined) return {};
    // Stops at the first machine found: a class of thousands of machines costs no more.
    const referenced = this.ctx.informers.machines.someByIndex(
      MACHINE_CLASS_INDEX,
      cls.metadata.name ?? '',
      (m) =>
        m.metadata.namespace === cls.metadata.namespace &&
        (m.spec?.class?.kind ?? MACHINE_CLASS_KIND) === MACHINE_CLASS_KIND,
    );
    const has = (cls.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager);
    try {
      if (referenced && !has && cls.metadata.deletionTimestamp === undefined) {
        await addFinalizer(this.ctx.client, MachineClassResource, cls, Finalizer.MachineControllerManager);
      } else if (!referenced && has) {
        const verdict = await this.opts.beforeRelease?.(cls, log);
        if (verdict?.release === false) {
          if (verdict.retry === 'backoff') {
            throw new ReleaseDeferredError(`MachineClass ${key} keeps its finalizer: ${verdict.reason}`);
          }
          log.verbose('class keeps its finalizer until its VMs without machine are collected', {
            reason: verdict.reason,
          });
          return { requeueAfter: RELEASE_RETRY_MS };
        }
        await removeFinalizerAt(
          this.ctx.client,
          MachineClassResource,
          cls,
          Finalizer.MachineControllerManager,
        );
      }
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return {};
  }
}
