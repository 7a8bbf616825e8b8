// Notices about VMs, the writing side: finds the VM's machine through the providerID index, reads
// it fresh from the API (the cache may not show a record this process just wrote), and writes what
// plan.ts decides: annotations (conditional on the version read), the deletion of a machine
// nothing replaces, the node's condition, the event. Notices about
// one VM are handled one at a time, so two copies of a notice arriving together are acted on once.
// Every write is fenced by the Lease (the clients) and carries the caller's signal.

import { MachineResource, type Machine } from '../../api/types.js';
import type { VmNotice, VmNoticeOutcome, VmNoticeSink } from '../../driver/notices.js';
import type { KubeApi } from '../../kube/client.js';
import type { Clock } from '../../kube/clock.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import type { DeepReadonly, Informer } from '../../kube/informer.js';
import { CoreResources } from '../../kube/resources.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { MACHINE_PROVIDER_ID_INDEX } from '../context.js';
import { nodeBelongsTo, sameVM, vmKey } from '../machines.js';
import { planNotice, type NoticePlan } from './plan.js';

/** Conflicting writes (the machine changed between the read and the write) retried at most this often. */
const MAX_CONFLICTS = 5;

/** Ranks outcomes when a VM has several machines: the notice's outcome is the highest. */
const RANK: Record<VmNoticeOutcome, number> = { unknown: 0, ignored: 1, duplicate: 2, acted: 3 };

export interface VmNoticeHandlerOptions {
  /** Control cluster (the machines). */
  client: KubeApi;
  /** Target cluster (the nodes); undefined without one. */
  target: KubeApi | undefined;
  machines: Informer<Machine>;
  nodes: Informer<Node> | undefined;
  recorder: EventRecorder;
  clock: Clock;
  logger: Logger;
}

export class VmNoticeHandler implements VmNoticeSink {
  /** The notice being handled per VM; the next one for the VM waits for it. */
  private readonly inFlight = new Map<string, Promise<unknown>>();
  private readonly log: Logger;

  constructor(private readonly opts: VmNoticeHandlerOptions) {
    this.log = opts.logger.child({ component: 'vm-notices' });
  }

  async handle(notice: VmNotice, signal?: AbortSignal): Promise<VmNoticeOutcome> {
    const key = vmKey(notice.providerID);
    const before = this.inFlight.get(key) ?? Promise.resolve();
    const run = before.then(
      () => this.handleNow(key, notice, signal),
      () => this.handleNow(key, notice, signal),
    );
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.set(key, settled);
    try {
      return await run;
    } finally {
      if (this.inFlight.get(key) === settled) this.inFlight.delete(key);
    }
  }

  private async handleNow(key: string, notice: VmNotice, signal?: AbortSignal): Promise<VmNoticeOutcome> {
    const cached = this.opts.machines.byIndex(MACHINE_PROVIDER_ID_INDEX, key);
    let outcome: VmNoticeOutcome = 'unknown';
    for (const c of cached) {
      const o = await this.handleMachine(c, notice, signal);
      if (RANK[o] > RANK[outcome]) outcome = o;
    }
    return outcome;
  }

  private async handleMachine(
    cached: DeepReadonly<Machine>,
    notice: VmNotice,
    signal?: AbortSignal,
  ): Promise<VmNoticeOutcome> {
    const name = cached.metadata.name ?? '';
    const namespace = cached.metadata.namespace ?? '';
    for (let attempt = 1; ; attempt++) {
      let m: Machine;
      try {
        m = await this.opts.client.get<Machine>(MachineResource, name, namespace, signal);
      } catch (err) {
        if (isNotFound(err)) return 'unknown';
        throw err;
      }
      if (!sameVM(m.spec?.providerID ?? '', notice.providerID)) return 'unknown';
      const node = this.nodeOf(m);
      const plan = planNotice(m, notice, this.opts.clock.now(), node);
      const log = this.log.child({ machine: `${namespace}/${name}`, notice: notice.reason });
      if (plan.outcome !== 'acted') {
        log.verbose('nothing to record', { outcome: plan.outcome, why: plan.why });
        return plan.outcome;
      }
      try {
        await this.apply(m, node, plan, signal);
      } catch (err) {
        if (isConflict(err) && attempt < MAX_CONFLICTS) continue;
        if (isNotFound(err)) return 'unknown';
        throw err;
      }
      log.info('recorded a notice about the VM', {
        providerID: notice.providerID,
        kind: notice.kind,
        annotations: plan.annotations,
        deleted: plan.deleteMachine === true,
        nodeCondition: plan.nodeCondition?.type,
      });
      this.opts.recorder.event(m, plan.event.type, plan.event.reason, plan.event.message);
      return 'acted';
    }
  }

  /** The machine's node, when the cache has it and it is proved to be the machine's. */
  private nodeOf(m: Machine): DeepReadonly<Node> | undefined {
    const name = m.metadata.labels?.node ?? '';
    if (name === '') return undefined;
    const node = this.opts.nodes?.get(undefined, name);
    return node !== undefined && nodeBelongsTo(node, m) ? node : undefined;
  }

  private async apply(
    m: Machine,
    node: DeepReadonly<Node> | undefined,
    plan: Extract<NoticePlan, { outcome: 'acted' }>,
    signal?: AbortSignal,
  ): Promise<void> {
    const { client } = this.opts;
    const name = m.metadata.name ?? '';
    const namespace = m.metadata.namespace ?? '';
    let current = m;
    if (plan.annotations !== undefined) {
      current = await client.patch<Machine>(
        MachineResource,
        name,
        { metadata: { annotations: plan.annotations, resourceVersion: current.metadata.resourceVersion } },
        { type: 'merge', namespace, ...(signal === undefined ? {} : { signal }) },
      );
    }
    if (plan.deleteMachine === true) {
      try {
        await client.delete(MachineResource, name, {
          namespace,
          preconditions: { uid: current.metadata.uid ?? '' },
          ...(signal === undefined ? {} : { signal }),
        });
      } catch (err) {
        // Gone already: what the notice asked for.
        if (!isNotFound(err)) throw err;
      }
    }
    if (plan.nodeCondition !== undefined && node !== undefined && this.opts.target !== undefined) {
      try {
        await this.opts.target.patch(
          CoreResources.nodes,
          node.metadata.name ?? '',
          { status: { conditions: [plan.nodeCondition] } },
          { type: 'strategic', subresource: 'status', ...(signal === undefined ? {} : { signal }) },
        );
      } catch (err) {
        // The node went meanwhile: the event still tells.
        if (!isNotFound(err)) throw err;
      }
    }
  }
}
