// Nodes without machines (MCM's AnnotateNodesUnmanagedByMCM): a target-cluster Node that no
// Machine claims, and that is older than the creation timeout (a machine may not have recorded its
// node yet), is annotated node.machine.sapcloud.io/not-managed-by-mcm=1, which the node controller
// honours by leaving it alone; the annotation goes as soon as a machine claims the node. Unlike
// MCM (a pass over every node every orphan period), this reacts to node and machine events, and
// patches a node only when its annotation must change.

import { Annotation, Finalizer, Label } from '../../api/constants.js';
import type { Machine } from '../../api/types.js';
import { Controller, type ReconcileContext, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { DeepReadonly, Informer } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { TimerHandle } from '../../kube/clock.js';
import { MACHINE_NODE_INDEX, NODE_MACHINE_INDEX, type ControllerContext } from '../context.js';
import { removeFinalizerAt } from '../finalizers.js';

/** MCM's value of the not-managed-by-mcm annotation. */
export const NOT_MANAGED_VALUE = '1';

type AnyNode = Node | DeepReadonly<Node>;
type AnyMachine = Machine | DeepReadonly<Machine>;

export interface UnmanagedNodePlan {
  /** Set the annotation (true), remove it (false), or leave it (undefined). */
  annotate?: boolean;
  /** Remove our node finalizer: nothing would ever remove it from a node without a machine. */
  removeFinalizer: boolean;
  /** The node is too young to judge: look again then. */
  recheckAfterMs?: number;
}

/**
 * Machines claiming a node: those whose `node` label names it, and the one its
 * `node.gardener.cloud/machine-name` label names unless that machine names another node.
 */
export function claimingMachines(
  node: AnyNode,
  byNodeLabel: readonly AnyMachine[],
  byName: (name: string) => AnyMachine | undefined,
): AnyMachine[] {
  const name = node.metadata.name ?? '';
  const out = [...byNodeLabel];
  const named = node.metadata.labels?.[Label.NodeMachineName];
  if (named !== undefined && !out.some((m) => m.metadata.name === named)) {
    const m = byName(named);
    if (m !== undefined && (m.metadata.labels?.[Label.Node] ?? name) === name) out.push(m);
  }
  return out;
}

/** What to do with a node, given how many machines claim it. */
export function planUnmanagedNode(
  node: AnyNode,
  claimedBy: number,
  now: number,
  creationTimeoutMs: number,
): UnmanagedNodePlan {
  const annotated = node.metadata.annotations?.[Annotation.NotManagedByMCM] !== undefined;
  if (claimedBy > 0)
    return annotated ? { annotate: false, removeFinalizer: false } : { removeFinalizer: false };
  const created = Date.parse(node.metadata.creationTimestamp ?? '');
  const age = Number.isNaN(created) ? Infinity : now - created;
  if (age < creationTimeoutMs) return { removeFinalizer: false, recheckAfterMs: creationTimeoutMs - age };
  const hasFinalizer = (node.metadata.finalizers ?? []).includes(Finalizer.MachineControllerNode);
  // A node being deleted is not annotated, but without a machine whose deletion flow would
  // release it, our finalizer would hold it forever.
  if (annotated || node.metadata.deletionTimestamp !== undefined) return { removeFinalizer: hasFinalizer };
  return { annotate: true, removeFinalizer: hasFinalizer };
}

export interface UnmanagedNodeOptions {
  /** --machine-creation-timeout: how old a node must be before it counts as unmanaged. */
  creationTimeoutMs: number;
  /** Every node is looked at again this often (--machine-safety-orphan-vms-period). */
  periodMs: number;
  frozen?: () => boolean;
}

/** Keeps the not-managed-by-mcm annotation of target-cluster nodes true. */
export class UnmanagedNodeController {
  readonly controller: Controller;
  private readonly nodes: Informer<Node>;
  private periodic: TimerHandle | undefined;

  constructor(
    private readonly ctx: ControllerContext,
    private readonly opts: UnmanagedNodeOptions,
  ) {
    const nodes = ctx.informers.nodes;
    if (nodes === undefined || ctx.target === undefined)
      throw new Error('the unmanaged node check needs a target cluster');
    this.nodes = nodes;
    this.controller = new Controller({
      name: 'safety-unmanaged-nodes',
      workers: 2,
      reconciler: { reconcile: (key, rctx) => this.reconcile(key, rctx) },
      clock: ctx.clock,
      logger: ctx.logger,
      registry: ctx.registry,
      isRequeueError: isConflict,
    });
    const enqueue = (name: string | undefined): void => {
      if (name !== undefined && name !== '') this.controller.enqueue(name);
    };
    nodes.addHandler({
      onAdd: (n) => {
        enqueue(n.metadata.name);
      },
      onUpdate: (old, n) => {
        if (
          old.metadata.annotations?.[Annotation.NotManagedByMCM] !==
            n.metadata.annotations?.[Annotation.NotManagedByMCM] ||
          old.metadata.labels?.[Label.NodeMachineName] !== n.metadata.labels?.[Label.NodeMachineName] ||
          old.metadata.deletionTimestamp !== n.metadata.deletionTimestamp
        )
          enqueue(n.metadata.name);
      },
    });
    const nodesOf = (m: DeepReadonly<Machine>): void => {
      enqueue(m.metadata.labels?.[Label.Node]);
      for (const n of nodes.byIndex(NODE_MACHINE_INDEX, m.metadata.name ?? '')) enqueue(n.metadata.name);
    };
    ctx.informers.machines.addHandler({
      onAdd: nodesOf,
      onUpdate: (old, m) => {
        if (old.metadata.labels?.[Label.Node] === m.metadata.labels?.[Label.Node]) return;
        nodesOf(old);
        nodesOf(m);
      },
      onDelete: nodesOf,
    });
  }

  start(): void {
    this.controller.start();
    this.schedulePeriodic();
  }

  async stop(): Promise<void> {
    this.periodic?.cancel();
    await this.controller.stop();
  }

  private schedulePeriodic(): void {
    this.periodic = this.ctx.clock.setTimeout(
      () => {
        for (const n of this.nodes.list()) this.controller.enqueue(n.metadata.name ?? '');
        this.schedulePeriodic();
      },
      Math.max(1000, this.opts.periodMs),
    );
  }

  async reconcile(name: string, { log }: ReconcileContext): Promise<ReconcileResult> {
    const node = this.nodes.get(undefined, name);
    if (node === undefined) return {};
    if (this.opts.frozen?.() === true) return { requeueAfter: 60_000 };
    const machines = this.ctx.informers.machines;
    const claimed = claimingMachines(node, machines.byIndex(MACHINE_NODE_INDEX, name), (n) =>
      machines.get(this.ctx.namespace, n),
    );
    const plan = planUnmanagedNode(node, claimed.length, this.ctx.clock.now(), this.opts.creationTimeoutMs);
    const target = this.ctx.target;
    if (target === undefined) return {};
    try {
      if (plan.annotate !== undefined) {
        await target.patch(
          CoreResources.nodes,
          name,
          {
            metadata: {
              annotations: { [Annotation.NotManagedByMCM]: plan.annotate ? NOT_MANAGED_VALUE : null },
            },
          },
          { type: 'merge' },
        );
        if (plan.annotate) log.info('node has no machine; annotated as not managed', { node: name });
        else log.info('node is claimed by a machine again; not-managed annotation removed', { node: name });
      }
      if (plan.removeFinalizer) {
        await removeFinalizerAt(target, CoreResources.nodes, node, Finalizer.MachineControllerNode);
        log.info('removed the machine controller finalizer of a node without machine', { node: name });
      }
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return plan.recheckAfterMs === undefined ? {} : { requeueAfter: Math.max(1000, plan.recheckAfterMs) };
  }
}
