import { Gauge, Histogram, type Registry } from 'prom-client';

import type { Blocker } from './drain.js';

type BlockingLabels = Record<'namespace' | 'machine' | 'pod' | 'reason' | 'pdb', string>;

/**
 * What a blocked drain waits for, as series an alert can name: one per blocking pod (with the
 * budget that blocks it), and the seconds until the drain is forced. The series are kept per drain
 * (a machine's deletion drain and its in-place update's are different drains) and go when that
 * drain ends, however it ends.
 */
export class DrainMetrics {
  private readonly blocking: Gauge<'namespace' | 'machine' | 'pod' | 'reason' | 'pdb'>;
  private readonly forceIn: Gauge<'namespace' | 'machine'>;
  private readonly duration: Histogram<'namespace' | 'machine_deployment'>;
  /** The series each drain (by its id) has set. */
  private readonly series = new Map<string, { namespace: string; machine: string; pods: BlockingLabels[] }>();

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
      labelNames: ['namespace', 'machine_deployment'],
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200],
      registers: [registry],
    });
  }

  /** Drain `drain` of machine namespace/machine waits for these blockers. */
  blocked(
    drain: string,
    namespace: string,
    machine: string,
    blockers: readonly Blocker[],
    forceInSeconds: number,
  ): void {
    this.end(drain);
    const pods = blockers.map((b) => ({
      namespace,
      machine,
      pod: b.pod,
      reason: b.reason,
      pdb: (b.pdbs ?? []).join(','),
    }));
    for (const labels of pods) this.blocking.set(labels, 1);
    this.series.set(drain, { namespace, machine, pods });
    this.forceIn.set({ namespace, machine }, Math.max(0, Math.round(forceInSeconds)));
  }

  /**
   * Drain `drain` completed after `seconds`; `machineDeployment` is the machine's `name` label
   * (gardener's label for its deployment; '' when it has none).
   */
  finished(drain: string, namespace: string, machineDeployment: string, seconds: number): void {
    this.end(drain);
    this.duration.observe({ namespace, machine_deployment: machineDeployment }, Math.max(0, seconds));
  }

  /** Drain `drain` ended (completed, abandoned, or its machine is gone): its series go. */
  end(drain: string): void {
    const s = this.series.get(drain);
    if (s === undefined) return;
    for (const labels of s.pods) this.blocking.remove(labels);
    this.forceIn.remove({ namespace: s.namespace, machine: s.machine });
    this.series.delete(drain);
  }
}
