/**
 * What this process remembers about machines, by UID (a machine recreated under the same name is
 * another machine). Bounded — when full, the entry set longest ago goes — and forgotten when the
 * machine is gone. It only ever shortens what the API says, so losing an entry (a restart, the
 * bound) costs a repeated call at most, never a wrong decision.
 */
export class MachineMemory<V> {
  private readonly entries = new Map<string, V>();

  constructor(private readonly capacity: number) {}

  get(uid: string | undefined): V | undefined {
    return uid === undefined ? undefined : this.entries.get(uid);
  }

  set(uid: string | undefined, value: V): void {
    if (uid === undefined || uid === '') return;
    this.entries.delete(uid);
    this.entries.set(uid, value);
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.capacity) break;
      this.entries.delete(oldest);
    }
  }

  delete(uid: string | undefined): void {
    if (uid !== undefined) this.entries.delete(uid);
  }

  get size(): number {
    return this.entries.size;
  }
}
