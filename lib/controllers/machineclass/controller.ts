import { Finalizer, MACHINE_CLASS_KIND } from '../../api/constants.js';
import { MachineClassResource, type MachineClass } from '../../api/types.js';
import { Controller, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { MACHINE_CLASS_INDEX, type ControllerContext } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';
import { addFinalizer } from '../ownership.js';

/**
 * Keeps a MachineClass from disappearing under its machines: while machines reference it, it
 * carries the machine-controller-manager finalizer (so a delete waits); once none does, the
 * finalizer goes (and a pending delete completes).
 */
export class MachineClassController {
  readonly controller: Controller;

  constructor(private readonly ctx: ControllerContext) {
    this.controller = new Controller({
      name: 'machineclass',
      workers: 2,
      reconciler: { reconcile: (key) => this.reconcile(key) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
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

  async reconcile(key: string): Promise<ReconcileResult> {
    const cls = this.ctx.informers.machineClasses.getByKey(key);
    if (cls === undefined) return {};
    const referenced = this.ctx.informers.machines
      .byIndex(MACHINE_CLASS_INDEX, cls.metadata.name ?? '')
      .some(
        (m) =>
          m.metadata.namespace === cls.metadata.namespace &&
          (m.spec?.class?.kind ?? MACHINE_CLASS_KIND) === MACHINE_CLASS_KIND,
      );
    const has = (cls.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager);
    try {
      if (referenced && !has && cls.metadata.deletionTimestamp === undefined) {
        await addFinalizer(this.ctx.client, MachineClassResource, cls, Finalizer.MachineControllerManager);
      } else if (!referenced && has) {
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
