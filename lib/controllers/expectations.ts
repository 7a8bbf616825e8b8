import type { Clock } from '../kube/clock.js';

/** How long an expectation may stay unmet before the controller stops trusting it. */
export const EXPECTATIONS_TTL_MS = 5 * 60 * 1000;

interface Record {
  /** Creations still to be observed in the cache. */
  adds: number;
  /** UIDs whose deletion is still to be observed. */
  deletes: Set<string>;
  setAt: number;
}

/**
 * What a controller has asked the apiserver to do but not yet seen in its cache. A MachineSet
 * whose expectations are unmet is not re-synced: its cache is known to lag behind its own writes,
 * and acting on it would create or delete machines a second time (gardener MCM issue #1091).
 * Unmet expectations expire after a TTL so that a lost watch event cannot wedge a MachineSet.
 */
export class Expectations {
  private readonly records = new Map<string, Record>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs = EXPECTATIONS_TTL_MS,
  ) {}

  /** True when nothing is pending for key (or what is pending has expired). */
  satisfied(key: string): boolean {
    const r = this.records.get(key);
    if (r === undefined) return true;
    if (r.adds <= 0 && r.deletes.size === 0) return true;
    return this.clock.now() - r.setAt > this.ttlMs;
  }

  /** Milliseconds until what is pending for key expires (0 when it is satisfied or expired). */
  expiresIn(key: string): number {
    const r = this.records.get(key);
    if (r === undefined || this.satisfied(key)) return 0;
    return Math.max(0, r.setAt + this.ttlMs - this.clock.now());
  }

  /** Pending counts, for logs and tests. */
  pending(key: string): { adds: number; deletes: number } {
    const r = this.records.get(key);
    return { adds: Math.max(0, r?.adds ?? 0), deletes: r?.deletes.size ?? 0 };
  }

  private record(key: string): Record {
    let r = this.records.get(key);
    if (r === undefined || (r.adds <= 0 && r.deletes.size === 0) || this.clock.now() - r.setAt > this.ttlMs) {
      r = { adds: 0, deletes: new Set(), setAt: this.clock.now() };
      this.records.set(key, r);
    }
    return r;
  }

  /** Called before issuing n creations. */
  expectCreations(key: string, n: number): void {
    if (n <= 0) return;
    const r = this.record(key);
    r.adds += n;
    r.setAt = this.clock.now();
  }

  /** A creation was seen in the cache, or a creation request failed and will not be seen. */
  creationObserved(key: string, n = 1): void {
    const r = this.records.get(key);
    if (r !== undefined && r.adds > 0) r.adds = Math.max(0, r.adds - n);
  }

  /** Called before deleting the machines with these UIDs. */
  expectDeletions(key: string, uids: readonly string[]): void {
    if (uids.length === 0) return;
    const r = this.record(key);
    for (const uid of uids) r.deletes.add(uid);
    r.setAt = this.clock.now();
  }

  /** The deletion of uid was seen (deletionTimestamp set or object gone), or the request failed. */
  deletionObserved(key: string, uid: string): void {
    this.records.get(key)?.deletes.delete(uid);
  }

  /** Forgets key entirely (its object is gone). */
  delete(key: string): void {
    this.records.delete(key);
  }
}
