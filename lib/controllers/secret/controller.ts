import { Finalizer } from '../../api/constants.js';
import { Controller, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import { CLASS_SECRET_INDEX, type ControllerContext } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';
import { addFinalizer } from '../ownership.js';

/**
 * Keeps the secrets MachineClasses reference (secretRef, credentialsSecretRef) from being deleted
 * while referenced: they carry the machine-controller finalizer exactly as long as a class of the
 * control namespace names them.
 */
export class SecretController {
  readonly controller: Controller;

  constructor(private readonly ctx: ControllerContext) {
    this.controller = new Controller({
      name: 'secret',
      workers: 2,
      reconciler: { reconcile: (key) => this.reconcile(key) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
    });
    const { secrets, machineClasses } = ctx.informers;
    secrets.addHandler({
      onAdd: (s) => {
        this.controller.enqueue(objectKey(s));
      },
      onUpdate: (_o, s) => {
        this.controller.enqueue(objectKey(s));
      },
    });
    const onClass = (c: {
      metadata: { namespace?: string };
      secretRef?: { name?: string; namespace?: string };
      credentialsSecretRef?: { name?: string; namespace?: string };
    }): void => {
      for (const ref of [c.secretRef, c.credentialsSecretRef]) {
        if (ref?.name === undefined || ref.name === '') continue;
        this.controller.enqueue(`${ref.namespace ?? c.metadata.namespace ?? ''}/${ref.name}`);
      }
    };
    machineClasses.addHandler({
      onAdd: onClass,
      onUpdate: (old, c) => {
        onClass(old);
        onClass(c);
      },
      onDelete: onClass,
    });
  }

  start(): void {
    this.controller.start();
  }

  async stop(): Promise<void> {
    await this.controller.stop();
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const secret = this.ctx.informers.secrets.getByKey(key);
    if (secret === undefined) return {};
    const referenced = this.ctx.informers.machineClasses
      .byIndex(CLASS_SECRET_INDEX, secret.metadata.name ?? '')
      .some((c) => c.metadata.namespace === secret.metadata.namespace);
    const has = (secret.metadata.finalizers ?? []).includes(Finalizer.MachineControllerSecret);
    try {
      if (referenced && !has && secret.metadata.deletionTimestamp === undefined) {
        await addFinalizer(this.ctx.client, CoreResources.secrets, secret, Finalizer.MachineControllerSecret);
      } else if (!referenced && has) {
        await removeFinalizerAt(
          this.ctx.client,
          CoreResources.secrets,
          secret,
          Finalizer.MachineControllerSecret,
        );
      }
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return {};
  }
}
