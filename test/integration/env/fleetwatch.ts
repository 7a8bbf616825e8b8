// A deployment's machines as the API server reports them, state by state: the most that existed at
// once and the fewest Running, for rollout bounds (maxSurge / maxUnavailable) that sampling could
// miss, and whether old and new machines existed at once (that it saw a rollout at all).

import { MachinePhase } from '../../../lib/api/constants.js';
import { MachineResource, type Machine } from '../../../lib/api/types.js';
import { type LifecycleEnv, NS, phaseOf } from './lifecycle.js';
import { watchEvents } from './watch.js';

/**
 * Watches a deployment's machines and records, at every state the API server reports, the most
 * that existed at once (terminating ones included), the fewest Running ones, and whether machines
 * of two classes existed at once. stop() fails when the watch failed or ended early: bounds read
 * from a watch that missed states would prove nothing.
 */
export class FleetWatch {
  maxTotal = 0;
  /** The most machines not being deleted at once. */
  maxStaying = 0;
  minRunning = Number.POSITIVE_INFINITY;
  /** Whether machines of more than one class existed at the same time (a rollout's overlap). */
  mixed = false;
  /** Machines the watch saw created and deleted after its start. */
  readonly created = new Set<string>();
  readonly deleted = new Set<string>();
  private readonly machines = new Map<string, Machine>();
  private stopWatch: (() => Promise<void>) | undefined;

  constructor(
    private readonly env: LifecycleEnv,
    private readonly app: string,
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await watchEvents<Machine>(
      this.env.client,
      NS,
      MachineResource,
      { labelSelector: `app=${this.app}` },
      (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'DELETED') {
          this.deleted.add(name);
          this.machines.delete(name);
        } else {
          if (ev.type === 'ADDED') this.created.add(name);
          this.machines.set(name, ev.object);
        }
        this.check();
      },
      (items) => {
        for (const m of items) this.machines.set(m.metadata.name ?? '', m);
        this.check();
      },
    );
  }

  private check(): void {
    const all = [...this.machines.values()];
    this.maxTotal = Math.max(this.maxTotal, all.length);
    this.maxStaying = Math.max(
      this.maxStaying,
      all.filter((m) => m.metadata.deletionTimestamp === undefined).length,
    );
    this.minRunning = Math.min(
      this.minRunning,
      all.filter((m) => phaseOf(m) === MachinePhase.Running).length,
    );
    if (new Set(all.map((m) => m.spec?.class?.name ?? '')).size > 1) this.mixed = true;
  }

  /** Stops the watch; rejects when it failed, sent an ERROR or ended before this call. */
  async stop(): Promise<void> {
    await this.stopWatch?.();
  }
}
