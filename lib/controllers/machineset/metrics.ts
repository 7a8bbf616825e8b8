import { Gauge, type Registry } from 'prom-client';

import type { MachineSet } from '../../api/types.js';
import type { Lister } from '../../kube/informer.js';

const CONDITION_VALUE: Record<string, number> = { True: 1, False: 0, Unknown: 2 };

/**
 * MachineSet conditions as gardener MCM exports them (`mcm_machine_set_status_condition`, 1 True,
 * 0 False, 2 Unknown), read from the cache at scrape time, so a deleted set leaves no series.
 */
export function registerMachineSetMetrics(registry: Registry, sets: Lister<MachineSet>): void {
  new Gauge({
    name: 'mcm_machine_set_status_condition',
    help: 'Conditions of each MachineSet (Frozen when the overshoot safety froze it): 1 True, 0 False, 2 Unknown.',
    labelNames: ['name', 'namespace', 'condition'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of sets.list()) {
        for (const c of s.status?.machineSetCondition ?? []) {
          this.set(
            { name: s.metadata.name ?? '', namespace: s.metadata.namespace ?? '', condition: c.type },
            CONDITION_VALUE[c.status] ?? 2,
          );
        }
      }
    },
  });
}
