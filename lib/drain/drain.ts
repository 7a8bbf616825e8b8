// The drain of a node, as rounds: each call does what can be done now (evict, delete, check
// volumes) and says what it waits for, instead of blocking a worker for up to the drain timeout
// as MCM's drain does. The caller runs the next round when an event or the requested delay comes.

import type { Driver } from '../driver/driver.js';
import type { KubeApi } from '../kube/client.js';
import { errorMessage, isNotFound, isTooManyRequests } from '../kube/errors.js';
import type { DeepReadonly, Informer } from '../kube/informer.js';
import { CoreResources } from '../kube/resources.js';
import type { Node, PersistentVolume, Pod, PodDisruptionBudget } from '../kube/types.js';
import { ATTACHMENT_NODE_INDEX, ATTACHMENT_PV_INDEX, POD_NODE_INDEX, type DrainCaches } from './caches.js';
import { claimNames, isMisconfiguredPdb, matchingPdbs, podKey, podsToDrain, volumePodOrder } from './pods.js';

type CachedPod = DeepReadonly<Pod>;

/** MCM retries an eviction a PodDisruptionBudget refused every 20 s. */
export const EVICTION_RETRY_MS = 20_000;
/** How soon to look again while pods terminate or volumes detach (events usually come first). */
export const DRAIN_POLL_MS = 5_000;

export interface DrainSettings {
  maxEvictRetries: number;
  pvDetachTimeoutMs: number;
  pvReattachTimeoutMs: number;
}

export type BlockerReason = 'pdb' | 'terminating' | 'volume-detach' | 'volume-reattach' | 'error';

/** A pod (or its volumes) the drain is waiting for, and why. */
export interface Blocker {
  pod: string;
  reason: BlockerReason;
  /** Budgets refusing the eviction (reason pdb). */
  pdbs?: string[];
  detail: string;
}

export interface DrainRound {
  done: boolean;
  blockers: Blocker[];
  /** Next round after this long (0 when done). */
  requeueAfterMs: number;
}

/** Where the one-at-a-time drain of pods with volumes stands (kept in memory; see docs/machine-lifecycle.md). */
interface SerialState {
  pod: string;
  pvNames: string[];
  volumeIDs: string[];
  goneAt?: number;
  detachedAt?: number;
}

/** What the one-at-a-time drain waits for, and when a timeout ends that waiting (ms from now). */
interface SerialWait {
  blocker: Blocker;
  endsInMs?: number;
}

export interface RoundInput {
  /** Identifies the drain (the machine key) across rounds. */
  id: string;
  nodeName: string;
  /** When the drain started (eviction retries are counted from here). */
  startedAt: number;
  now: number;
  force: boolean;
  /** The driver of the machine's provider, for GetVolumeIDs; undefined: volumes are not tracked. */
  driver: Driver | undefined;
  signal?: AbortSignal;
}

function describePdb(b: DeepReadonly<PodDisruptionBudget>): string {
  const s = b.status ?? {};
  const name = `PodDisruptionBudget ${b.metadata.namespace ?? ''}/${b.metadata.name ?? ''}`;
  const health = `${s.currentHealthy ?? 0} of ${s.expectedPods ?? 0} pods healthy, ${s.desiredHealthy ?? 0} required`;
  const never = isMisconfiguredPdb(b) ? '; as configured it can never allow one' : '';
  return `${name} allows ${s.disruptionsAllowed ?? 0} disruptions now (${health}${never})`;
}

export class Drainer {
  private readonly serial = new Map<string, SerialState>();

  constructor(
    private readonly target: KubeApi,
    private readonly caches: DrainCaches,
    private readonly nodes: Informer<Node>,
    private readonly settings: DrainSettings,
  ) {}

  /** Forgets a drain's in-memory state (it finished, or its machine is gone). */
  forget(id: string): void {
    this.serial.delete(id);
  }

  /** Whether a drain has in-memory state (a pod with volumes in progress), for diagnostics. */
  holds(id: string): boolean {
    return this.serial.has(id);
  }

  async round(input: RoundInput): Promise<DrainRound> {
    const pods = podsToDrain(this.caches.pods.byIndex(POD_NODE_INDEX, input.nodeName));
    return input.force ? this.forced(input, pods) : this.graceful(input, pods);
  }

  /** Forced: every pod deleted at once without grace, then the node's VolumeAttachments deleted. */
  private async forced(input: RoundInput, pods: readonly CachedPod[]): Promise<DrainRound> {
    const blockers: Blocker[] = [];
    await Promise.all(
      pods
        .filter(
          (p) => !(p.metadata.deletionTimestamp !== undefined && p.metadata.deletionGracePeriodSeconds === 0),
        )
        .map(async (p) => {
          try {
            await this.deletePod(p, input.signal);
          } catch (err) {
            blockers.push({
              pod: podKey(p),
              reason: 'error',
              detail: `deleting it failed: ${errorMessage(err)}`,
            });
          }
        }),
    );
    const attachments = this.caches.volumeAttachments.byIndex(ATTACHMENT_NODE_INDEX, input.nodeName);
    for (const va of attachments) {
      if (va.metadata.deletionTimestamp !== undefined) continue;
      try {
        await this.target.delete(CoreResources.volumeAttachments, va.metadata.name ?? '', {
          ...(input.signal === undefined ? {} : { signal: input.signal }),
        });
      } catch (err) {
        if (!isNotFound(err))
          blockers.push({ pod: va.metadata.name ?? '', reason: 'error', detail: errorMessage(err) });
      }
    }
    this.serial.delete(input.id);
    const left = attachments.length > 0 || blockers.length > 0;
    if (left && attachments.length > 0) {
      blockers.push({
        pod: '',
        reason: 'volume-detach',
        detail: `${attachments.length} VolumeAttachment(s) of node ${input.nodeName} being deleted`,
      });
    }
    return { done: !left, blockers, requeueAfterMs: left ? DRAIN_POLL_MS : 0 };
  }

  private async graceful(input: RoundInput, pods: readonly CachedPod[]): Promise<DrainRound> {
    const retriesUsed = Math.floor((input.now - input.startedAt) / EVICTION_RETRY_MS);
    const retriesExhausted = retriesUsed >= this.settings.maxEvictRetries;
    const blockers: Blocker[] = [];
    const withoutVolumes = pods.filter((p) => claimNames(p).length === 0);
    const withVolumes = pods.filter((p) => claimNames(p).length > 0).sort(volumePodOrder);

    const results = await Promise.all(
      withoutVolumes.map((p) => this.evictOrWait(p, retriesExhausted, input.signal)),
    );
    for (const b of results) if (b !== undefined) blockers.push(b);

    const serialWait = await this.serialStep(input, withVolumes, retriesExhausted);
    if (serialWait !== undefined) blockers.push(serialWait.blocker);

    const done = pods.length === 0 && !this.serial.has(input.id);
    if (done) return { done, blockers: [], requeueAfterMs: 0 };
    const byPdb = blockers.some((b) => b.reason === 'pdb');
    const poll = byPdb ? EVICTION_RETRY_MS : DRAIN_POLL_MS;
    // A detach or reattach timeout that ends sooner than the next poll is looked at when it ends.
    const timer = serialWait?.endsInMs;
    return {
      done,
      blockers,
      requeueAfterMs: timer === undefined ? poll : Math.max(1, Math.min(poll, timer)),
    };
  }

  /**
   * Pods with volumes, one at a time: evict the current one, wait until it is gone and its volumes
   * have detached from this node (up to the detach timeout), then until they are attached
   * elsewhere (up to the reattach timeout; not an error when that never happens), then the next.
   *
   * A volume has detached when the node no longer reports it attached (status.volumesAttached)
   * and no VolumeAttachment attaches its PersistentVolume to this node. The node's list alone is
   * not enough: the attach/detach controller drops a volume from it when the detach starts, and
   * deletes the VolumeAttachment only once the CSI driver has detached it (gardener #468).
   */
  private async serialStep(
    input: RoundInput,
    withVolumes: readonly CachedPod[],
    retriesExhausted: boolean,
  ): Promise<SerialWait | undefined> {
    let state = this.serial.get(input.id);
    if (state === undefined) {
      const next = withVolumes[0];
      if (next === undefined) return undefined;
      state = await this.startSerial(input, next, withVolumes);
      this.serial.set(input.id, state);
    }
    const current = withVolumes.find((p) => podKey(p) === state.pod);
    if (current !== undefined) {
      const blocker = await this.evictOrWait(current, retriesExhausted, input.signal);
      return blocker === undefined ? undefined : { blocker };
    }

    state.goneAt ??= input.now;
    const node = this.nodes.get(undefined, input.nodeName);
    const attached = (node?.status?.volumesAttached ?? []).map((v) => v.name);
    const stillReported = state.volumeIDs.filter((id) =>
      attached.some((a) => a === id || a.endsWith(`^${id}`) || a.endsWith(`/${id}`)),
    );
    const stillAttachedPVs = state.pvNames.filter((pv) =>
      this.caches.volumeAttachments
        .byIndex(ATTACHMENT_PV_INDEX, pv)
        .some((va) => va.spec?.nodeName === input.nodeName),
    );
    const detachLeft = this.settings.pvDetachTimeoutMs - (input.now - state.goneAt);
    if (node !== undefined && (stillReported.length > 0 || stillAttachedPVs.length > 0) && detachLeft > 0) {
      const named = [
        ...stillReported,
        ...(stillAttachedPVs.length === 0
          ? []
          : [`${stillAttachedPVs.join(', ')} (VolumeAttachment on the node)`]),
      ];
      return {
        blocker: {
          pod: state.pod,
          reason: 'volume-detach',
          detail: `its volume(s) ${named.join(', ')} are still attached to node ${input.nodeName}`,
        },
        endsInMs: detachLeft,
      };
    }
    state.detachedAt ??= input.now;
    const reattached = state.pvNames.every((pv) =>
      this.caches.volumeAttachments
        .byIndex(ATTACHMENT_PV_INDEX, pv)
        .some((va) => va.spec?.nodeName !== input.nodeName && va.status?.attached === true),
    );
    const reattachLeft = this.settings.pvReattachTimeoutMs - (input.now - state.detachedAt);
    if (!reattached && reattachLeft > 0) {
      return {
        blocker: {
          pod: state.pod,
          reason: 'volume-reattach',
          detail: `waiting for its volume(s) ${state.pvNames.join(', ')} to attach to another node`,
        },
        endsInMs: reattachLeft,
      };
    }
    this.serial.delete(input.id);
    const rest = withVolumes.filter((p) => podKey(p) !== state.pod);
    return rest.length === 0 ? undefined : this.serialStep(input, rest, retriesExhausted);
  }

  private async startSerial(
    input: RoundInput,
    pod: CachedPod,
    all: readonly CachedPod[],
  ): Promise<SerialState> {
    // Volumes shared with other pods on this node do not detach when this pod goes.
    const others = new Set(
      all
        .filter((p) => p !== pod)
        .flatMap((p) => claimNames(p).map((c) => `${p.metadata.namespace ?? ''}/${c}`)),
    );
    const pvNames: string[] = [];
    for (const claim of claimNames(pod)) {
      const key = `${pod.metadata.namespace ?? ''}/${claim}`;
      if (others.has(key)) continue;
      const pv = this.caches.persistentVolumeClaims.getByKey(key)?.spec?.volumeName;
      if (pv !== undefined && pv !== '') pvNames.push(pv);
    }
    let volumeIDs: string[] = [];
    const specs = pvNames
      .map((n) => this.caches.persistentVolumes.get(undefined, n)?.spec)
      .filter((s) => s !== undefined)
      .map((s) => structuredClone(s) as NonNullable<PersistentVolume['spec']>);
    if (input.driver !== undefined && specs.length > 0) {
      try {
        volumeIDs = (await input.driver.getVolumeIDs({ pvSpecs: specs }, input.signal)).volumeIDs;
      } catch {
        volumeIDs = [];
      }
    }
    return { pod: podKey(pod), pvNames, volumeIDs };
  }

  /** Evicts a pod (or deletes it once the eviction retries are used up); says what blocks it. */
  private async evictOrWait(
    p: CachedPod,
    retriesExhausted: boolean,
    signal: AbortSignal | undefined,
  ): Promise<Blocker | undefined> {
    const key = podKey(p);
    if (p.metadata.deletionTimestamp !== undefined) {
      return {
        pod: key,
        reason: 'terminating',
        detail: `terminating (grace ${p.metadata.deletionGracePeriodSeconds ?? 0}s)`,
      };
    }
    try {
      await this.target.evict(p.metadata.namespace ?? '', p.metadata.name ?? '', {
        ...(signal === undefined ? {} : { signal }),
      });
      return { pod: key, reason: 'terminating', detail: 'evicted, terminating' };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      if (isTooManyRequests(err)) {
        if (retriesExhausted) {
          await this.deletePod(p, signal);
          return {
            pod: key,
            reason: 'terminating',
            detail: 'deleted after the eviction retries were used up',
          };
        }
        const pdbs = matchingPdbs(p, this.caches.podDisruptionBudgets.list(p.metadata.namespace));
        return {
          pod: key,
          reason: 'pdb',
          pdbs: pdbs.map((b) => `${b.metadata.namespace ?? ''}/${b.metadata.name ?? ''}`),
          detail:
            pdbs.length === 0
              ? `its eviction was refused: ${errorMessage(err)}`
              : pdbs.map(describePdb).join('; '),
        };
      }
      return { pod: key, reason: 'error', detail: `its eviction failed: ${errorMessage(err)}` };
    }
  }

  private async deletePod(p: CachedPod, signal: AbortSignal | undefined): Promise<void> {
    try {
      await this.target.delete(CoreResources.pods, p.metadata.name ?? '', {
        namespace: p.metadata.namespace ?? '',
        gracePeriodSeconds: 0,
        ...(p.metadata.uid === undefined ? {} : { preconditions: { uid: p.metadata.uid } }),
        ...(signal === undefined ? {} : { signal }),
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}

/** One line naming what blocks a drain (pods, budgets, volumes). */
export function describeBlockers(blockers: readonly Blocker[]): string {
  return blockers.map((b) => (b.pod === '' ? b.detail : `pod ${b.pod}: ${b.detail}`)).join('; ');
}
