import { Annotation, EventSource, Label } from '../../api/constants.js';
import { MachineResource, type Machine } from '../../api/types.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import type { DeepReadonly, Informer } from '../../kube/informer.js';
import type { Node } from '../../kube/types.js';
import { MACHINE_NODE_INDEX, type ControllerContext } from '../context.js';
import { nodeBelongsTo } from '../machines.js';

/**
 * The node controller: a Node that is deleted (or being deleted) takes its Machine with it, as in
 * gardener MCM ("delete the Node to delete a machine you cannot reach"). It acts only on deletions
 * it observes, and only on the machine that node is proved to belong to (nodeBelongsTo: its
 * machine-name label, or its providerID): a name alone proves nothing, since providers that name
 * nodes by private IP address reuse names, and the machine created after the one whose node went
 * may already claim that name before its own node registers. (The node's finalizer and labels are
 * kept by the machine controller, which writes them in one patch.)
 */
export class NodeController {
  readonly controller: Controller;
  private readonly recorder: EventRecorder;
  private readonly nodes: Informer<Node>;
  /** The last state of each deleted node not reconciled yet: the proof of whose node it was. */
  private readonly deleted = new Map<string, DeepReadonly<Node>>();
  /**
   * Set by stop(): the informer keeps calling the handlers of a controller that lost the Lease,
   * whose queue no longer runs, so it records no more deletions (nothing would drop them).
   */
  private stopped = false;

  constructor(private readonly ctx: ControllerContext) {
    const nodes = ctx.informers.nodes;
    if (nodes === undefined) throw new Error('the node controller needs a target cluster');
    this.nodes = nodes;
    this.recorder = ctx.recorderFor(EventSource.MachineController);
    this.controller = new Controller({
      name: 'node',
      workers: 2,
      reconciler: { reconcile: (key, rctx) => this.reconcile(key, rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
    });
    nodes.addHandler({
      onUpdate: (old, n) => {
        if (old.metadata.deletionTimestamp === undefined && n.metadata.deletionTimestamp !== undefined)
          this.controller.enqueue(n.metadata.name ?? '');
      },
      onDelete: (n) => {
        if (this.stopped) return;
        this.deleted.set(n.metadata.name ?? '', n);
        this.controller.enqueue(n.metadata.name ?? '');
      },
    });
  }

  start(): void {
    this.controller.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.controller.stop();
    this.deleted.clear();
  }

  private machinesOf(name: string, node: DeepReadonly<Node> | undefined): DeepReadonly<Machine>[] {
    const machines = this.ctx.informers.machines;
    const found = machines
      .byIndex(MACHINE_NODE_INDEX, name)
      .filter((m) => m.metadata.namespace === this.ctx.namespace);
    const named = node?.metadata.labels?.[Label.NodeMachineName];
    if (named !== undefined && !found.some((m) => m.metadata.name === named)) {
      const m = machines.get(this.ctx.namespace, named);
      if (m !== undefined && (m.metadata.labels?.[Label.Node] ?? name) === name) found.push(m);
    }
    return found;
  }

  async reconcile(name: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const cached = this.nodes.get(undefined, name);
    const tombstone = this.deleted.get(name);
    // The node being deleted, else the last state of the one deleted (a node of the same name may
    // have registered since: another VM's, which changes nothing about whose node was deleted).
    const node = cached?.metadata.deletionTimestamp !== undefined ? cached : tombstone;
    const result = await this.deleteMachineOf(name, node, log);
    this.forget(name, tombstone);
    return result;
  }

  /** Drops the deleted node's record once handled, unless a newer deletion replaced it meanwhile. */
  private forget(name: string, handled: DeepReadonly<Node> | undefined): void {
    if (handled !== undefined && this.deleted.get(name) === handled) this.deleted.delete(name);
  }

  /** Deletes the machine `node` (deleted, or being deleted) belongs to, if exactly one. */
  private async deleteMachineOf(
    name: string,
    node: DeepReadonly<Node> | undefined,
    log: ReconcileContext['log'],
  ): Promise<ReconcileResult> {
    // Not being deleted, or nothing seen of it: nothing proves whose node went.
    if (node === undefined) return {};
    if (node.metadata.annotations?.[Annotation.NotManagedByMCM] !== undefined) return {};
    const claiming = this.machinesOf(name, node).filter((m) => m.metadata.deletionTimestamp === undefined);
    const machines = claiming.filter((m) => nodeBelongsTo(node, m));
    for (const m of claiming) {
      if (machines.includes(m)) continue;
      log.info('a deleted node of the name the machine holds was not its node; the machine stays', {
        machine: m.metadata.name,
        nodeProviderID: node.spec?.providerID,
        machineProviderID: m.spec?.providerID,
      });
    }
    if (machines.length > 1) {
      log.warn('node is claimed by several machines; deleting none', {
        machines: machines.map((m) => m.metadata.name),
      });
      for (const m of machines) {
        this.recorder.event(
          m,
          'Warning',
          'AmbiguousNode',
          `Node ${name} is claimed by ${machines.length} machines; none is deleted`,
        );
      }
      return {};
    }
    const m = machines[0];
    if (m === undefined) return {};
    try {
      await this.ctx.client.delete(MachineResource, m.metadata.name ?? '', {
        namespace: m.metadata.namespace ?? '',
        preconditions: { uid: m.metadata.uid ?? '' },
      });
      log.info('node was deleted; deleting its machine', { machine: m.metadata.name });
      this.recorder.event(
        m,
        'Normal',
        'NodeDeleted',
        `Node ${name} was deleted, so its machine is deleted too`,
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return {};
  }
}
