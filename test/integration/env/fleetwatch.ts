// A deployment's machines as the API server reports them, state by state: the most that existed at
// once and the fewest Running, for rollout bounds (maxSurge / maxUnavailable) that sampling could
// miss.

import { MachinePhase } from '../../../lib/api/constants.js';
import { MachineResource, type Machine } from '../../../lib/api/types.js';
import { type LifecycleEnv, NS, phaseOf } from './lifecycle.js';

export /**
 * Watches a deployment's machines and records the most that existed at once (terminating ones
 * included) and the fewest Running ones, at every state the API server reports.
 */
class FleetWatch {
  maxTotal = 0;
  minRunning = Number.POSITIVE_INFINITY;
  private readonly machines = new Map<string, Machine>();
  private readonly abort = new AbortController();
  private done: Promise<void> | undefined;

  constructor(
    private readonly env: LifecycleEnv,
    private readonly app: string,
  ) {}

  async start(): Promise<void> {
    const list = await this.env.client.list<Machine>(MachineResource, {
      namespace: NS,
      labelSelector: `app=${this.app}`,
    });
    for (const m of list.items) this.machines.set(m.metadata.name ?? '', m);
    this.check();
    const stream = await this.env.client.watch<Machine>(MachineResource, {
      namespace: NS,
      labelSelector: `app=${this.app}`,
      resourceVersion: list.metadata.resourceVersion ?? '',
      signal: this.abort.signal,
    });
    this.done = (async () => {
      for await (const ev of stream) {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'DELETED') this.machines.delete(name);
        else if (ev.type === 'ADDED' || ev.type === 'MODIFIED') this.machines.set(name, ev.object);
        this.check();
      }
    })().catch(() => undefined);
  }

  private check(): void {
    const all = [...this.machines.values()];
    this.maxTotal = Math.max(this.maxTotal, all.length);
    this.minRunning = Math.min(
      this.minRunning,
      all.filter((m) => phaseOf(m) === MachinePhase.Running).length,
    );
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.done;
  }
}
