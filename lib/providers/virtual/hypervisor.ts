// The virtual cloud's "hypervisor": moves VMs through their lives on time. A booting VM's node
// becomes Ready at its boot time; a VM with the notReadyAfter failure mode turns NotReady later;
// a node ready for its in-place update gets it from the simulated update agent (agent.ts).
// It is a small controller over the VM nodes in the shared node cache, so pending transitions
// survive our restarts (they are read back from the nodes) and failed writes back off.
//
// A boot writes in the order a real node comes up: the kubelet starts (the kwok annotation, so
// that kwok plays the node's kubelet from now on), then the node turns Ready, then it accepts
// pods (state running, not-ready taint removed). kwok only plays the pods of a node it manages
// when they are bound, and it does not look again at pods bound before it started managing the
// node, so no pod may be bound before the annotation lands: the kube-controller-manager lifts
// the not-ready taint as soon as a node is Ready, and the scheduler binds right after.

import type { Registry } from 'prom-client';

import type { ControlCaches } from '../../driver/registry.js';
import type { KubeApi } from '../../kube/client.js';
import type { Clock } from '../../kube/clock.js';
import { Controller, type ReconcileResult } from '../../kube/controller.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { DeepReadonly, Informer } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { planUpdateAgent, reportPatch, resolveUpdateTarget } from './agent.js';
import { isVmNode } from './store.js';
import {
  KWOK_ANNOTATION,
  KWOK_ANNOTATION_VALUE,
  NOT_READY_TAINT,
  VirtualKey,
  readyCondition,
  type VmState,
} from './vm.js';

export type VmTransition =
  | { kind: 'none'; recheckAfterMs?: number }
  /** Boot, first step: the kwok annotation (the simulated kubelet starts). */
  | { kind: 'start-kubelet' }
  /** Boot, last step: node Ready (status first), then state running, not-ready taint removed. */
  | { kind: 'boot' }
  /** State stopped and kwok annotation removed (metadata first), then node NotReady. */
  | { kind: 'stop' }
  /** A stopped VM's node still says Ready (a stop interrupted between its two writes). */
  | { kind: 'mark-not-ready' };

function time(s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

function isReady(node: DeepReadonly<Node>): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** What is due for a VM node now (pure). Nodes without a state annotation count as running. */
export function planVmTransition(node: DeepReadonly<Node>, now: number): VmTransition {
  if (!isVmNode(node) || node.metadata.deletionTimestamp !== undefined) return { kind: 'none' };
  const a = node.metadata.annotations ?? {};
  const state = (a[VirtualKey.State] ?? 'running') as VmState;
  switch (state) {
    case 'booting': {
      if (a[VirtualKey.BootNeverCompletes] === 'true') return { kind: 'none' };
      const bootAt = time(a[VirtualKey.BootAt]) ?? now;
      if (bootAt > now) return { kind: 'none', recheckAfterMs: bootAt - now };
      return a[KWOK_ANNOTATION] === KWOK_ANNOTATION_VALUE ? { kind: 'boot' } : { kind: 'start-kubelet' };
    }
    case 'running': {
      const at = time(a[VirtualKey.NotReadyAt]);
      if (at === undefined) return { kind: 'none' };
      return at <= now ? { kind: 'stop' } : { kind: 'none', recheckAfterMs: at - now };
    }
    case 'stopped':
      return isReady(node) ? { kind: 'mark-not-ready' } : { kind: 'none' };
    default:
      return { kind: 'none' };
  }
}

export class Hypervisor {
  private readonly controller: Controller;

  constructor(
    private readonly client: KubeApi,
    private readonly nodes: Informer<Node>,
    private readonly clock: Clock,
    private readonly logger: Logger,
    registry: Registry,
    /** For the update agent: the control caches and namespace (undefined: default updates). */
    private readonly control?: { caches: ControlCaches | undefined; namespace: string },
  ) {
    this.controller = new Controller({
      name: 'virtual-hypervisor',
      workers: 4,
      reconciler: { reconcile: (key) => this.reconcile(key) },
      clock,
      logger,
      registry,
      isRequeueError: isConflict,
    });
    const enqueue = (n: DeepReadonly<Node>): void => {
      if (isVmNode(n)) this.controller.enqueue(n.metadata.name ?? '');
    };
    nodes.addHandler({
      onAdd: enqueue,
      onUpdate: (_old, n) => {
        enqueue(n);
      },
    });
  }

  start(): void {
    this.controller.start();
  }

  stop(): Promise<void> {
    return this.controller.stop();
  }

  private async reconcile(name: string): Promise<ReconcileResult> {
    const node = this.nodes.get(undefined, name);
    if (node === undefined) return {};
    const now = this.clock.now();
    const plan = planVmTransition(node, now);
    try {
      switch (plan.kind) {
        case 'none': {
          const agent = await this.runUpdateAgent(node, now);
          const after = [plan.recheckAfterMs, agent].filter((x) => x !== undefined);
          return after.length === 0 ? {} : { requeueAfter: Math.max(1, Math.min(...after)) };
        }
        case 'start-kubelet':
          // The node's next event (this write) brings it back here for the rest of the boot.
          await this.client.patch(
            CoreResources.nodes,
            name,
            { metadata: { annotations: { [KWOK_ANNOTATION]: KWOK_ANNOTATION_VALUE } } },
            { type: 'merge' },
          );
          return {};
        case 'boot': {
          // Status first: the metadata patch then carries the resourceVersion that write returned.
          const ready = await this.setReady(name, true);
          await this.patchMetadata(ready, 'running', true);
          return {};
        }
        case 'stop':
          await this.patchMetadata(node, 'stopped', false);
          await this.setReady(name, false);
          return {};
        case 'mark-not-ready':
          await this.setReady(name, false);
          return {};
      }
    } catch (err) {
      if (isNotFound(err)) return {};
      throw err;
    }
  }

  /** The update agent's step for the node; returns when to look again, if it waits. */
  private async runUpdateAgent(node: DeepReadonly<Node>, now: number): Promise<number | undefined> {
    const step = planUpdateAgent(
      node,
      () => resolveUpdateTarget(this.control?.caches, node, this.control?.namespace ?? ''),
      now,
    );
    if (step.kind === 'none') return step.recheckAfterMs;
    await this.client.patch(CoreResources.nodes, node.metadata.name ?? '', reportPatch(node, step), {
      type: 'merge',
    });
    this.logger.info('virtual update agent reported an in-place update', {
      node: node.metadata.name,
      result: step.result,
      ...(step.result === 'successful' ? { updatedTo: step.className } : { reason: step.reason }),
    });
    return undefined;
  }

  private async setReady(name: string, ready: boolean): Promise<Node> {
    const now = new Date(this.clock.now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
    return this.client.patch<Node>(
      CoreResources.nodes,
      name,
      { status: { conditions: [readyCondition(ready, now)], ...(ready ? { phase: 'Running' } : {}) } },
      { type: 'strategic', subresource: 'status' },
    );
  }

  private async patchMetadata(node: DeepReadonly<Node> | Node, state: VmState, kwok: boolean): Promise<void> {
    const taints = (node.spec?.taints ?? []).filter(
      (t) => !(t.key === NOT_READY_TAINT.key && t.effect === NOT_READY_TAINT.effect),
    );
    await this.client.patch(
      CoreResources.nodes,
      node.metadata.name ?? '',
      {
        metadata: {
          resourceVersion: node.metadata.resourceVersion,
          annotations: { [VirtualKey.State]: state, [KWOK_ANNOTATION]: kwok ? KWOK_ANNOTATION_VALUE : null },
        },
        ...(state === 'running' ? { spec: { taints: taints.length === 0 ? null : taints } } : {}),
      },
      { type: 'merge' },
    );
  }
}
