import { Gauge, Histogram, type Registry } from 'prom-client';

import type { Blocker } from './drain.js';

/**
 * What a blocked drain waits for, as series an alert can name: one per blocking pod (with the
 * budget that blocks it), and the seconds until the drain is forced. A machine's series go when
 * its drain ends.
 */
export class DrainMetrics {
  private readonly blocking: Gauge<'namespace' | 'machine' | 'pod' | 'reason' | 'pdb'>;
  private readonly forceIn: Gauge<'namespace' | 'machine'>;
  private readonly duration: Histogram<'namespace'>;
  private readonly series = new Map<
    string,
    Record<'namespace' | 'machine' | 'pod' | 'reason' | 'pdb', string>[]
  >();

  constructor(registry: Registry) {
    this.blocking = new Gauge({
      name: 'mcm_machine_drain_blocking_pods',
      help: 'Pods (and the PodDisruptionBudget, if any) a machine’s drain is waiting for (value 1).',
      labelNames: ['namespace', 'machine', 'pod', 'reason', 'pdb'],
      registers: [registry],
    });
    this.forceIn = new Gauge({
      name: 'mcm_machine_drain_force_in_seconds',
      help: 'Seconds until a blocked drain deletes the remaining pods without eviction.',
      labelNames: ['namespace', 'machine'],
      registers: [registry],
    });
    this.duration = new Histogram({
      name: 'mcm_machine_drain_duration_seconds',
      help: 'Duration of completed node drains.',
      labelNames: ['namespace'],
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200],
      registers: [registry],
    });
  }

  blocked(namespace: string, machine: string, blockers: readonly Blocker[], forceInSeconds: number): void {
    this.clear(namespace, machine);
    const sets = blockers.map((b) => ({
      namespace,
      machine,
      pod: b.pod,
      reason: b.reason,
      pdb: (b.pdbs ?? []).join(','),
    }));
    for (const labels of sets) this.blocking.set(labels, 1);
    this.series.set(`${namespace}/${machine}`, sets);
    this.forceIn.set({ namespace, machine }, Math.max(0, Math.round(forceInSeconds)));
  }

  finished(namespace: string, machine: string, seconds: number | undefined): void {
    this.clear(namespace, machine);
    if (seconds !== undefined) this.duration.observe({ namespace }, Math.max(0, seconds));
  }

  clear(namespace: string, machine: string): void {
    const key = `${namespace}/${machine}`;
    for (const labels of this.series.get(key) ?? []) this.blocking.remove(labels);
    this.series.delete(key);
    this.forceIn.remove({ namespace, machine });
  }
}
