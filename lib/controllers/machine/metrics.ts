// Machine metrics (gardener MCM's mcm_machine_* families). Per-machine gauges are computed from
// the cache at scrape time, so a machine's series disappear with it; duration histograms are
// labelled by deployment and removed when that deployment is deleted.

import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

import { MachinePhase } from '../../api/constants.js';
import type { Machine, MachineClass, MachineDeployment } from '../../api/types.js';
import type { DeepReadonly, Informer, Lister } from '../../kube/informer.js';
import { WellKnownLabel } from '../../kube/wellknown.js';
import { phaseOf } from '../machines.js';

const PHASE_VALUE: Partial<Record<MachinePhase, number>> = {
  [MachinePhase.Terminating]: -4,
  [MachinePhase.Failed]: -3,
  [MachinePhase.CrashLoopBackOff]: -2,
  [MachinePhase.Unknown]: -1,
  [MachinePhase.Pending]: 0,
  [MachinePhase.Running]: 1,
};

const CONDITION_VALUE: Record<string, number> = { True: 1, False: 0, Unknown: 2 };

type DurationLabels = 'namespace' | 'machine_deployment' | 'instance_type' | 'zone';

const DURATION_BUCKETS = [1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200];

export type MachineDuration = 'create' | 'initialize' | 'join' | 'delete';

export class MachineMetrics {
  private readonly durations: Record<MachineDuration, Histogram<DurationLabels>>;
  private readonly failedJoin: Counter<DurationLabels>;
  /** Label sets in use per deployment (namespace/name), so they can be removed with it. */
  private readonly seen = new Map<string, Map<string, Record<DurationLabels, string>>>();

  constructor(
    registry: Registry,
    machines: Lister<Machine> & { size(): number },
    private readonly classes: Lister<MachineClass>,
    deployments: Informer<MachineDeployment> | undefined,
  ) {
    const registers = [registry];
    new Gauge({
      name: 'mcm_machine_items_total',
      help: 'Machines in the cache of the machine controller.',
      registers,
      collect() {
        this.set(machines.size());
      },
    });
    new Gauge({
      name: 'mcm_machine_current_status_phase',
      help: 'Phase of each machine: Terminating -4, Failed -3, CrashLoopBackOff -2, Unknown -1, Pending 0, Running 1, others 0.',
      labelNames: ['name', 'namespace'],
      registers,
      collect() {
        this.reset();
        for (const m of machines.list()) {
          this.set(
            { name: m.metadata.name ?? '', namespace: m.metadata.namespace ?? '' },
            PHASE_VALUE[phaseOf(m)] ?? 0,
          );
        }
      },
    });
    new Gauge({
      name: 'mcm_machine_info',
      help: 'Information about each machine (value 1).',
      labelNames: [
        'name',
        'namespace',
        'createdAt',
        'spec_provider_id',
        'spec_class_api_group',
        'spec_class_kind',
        'spec_class_name',
        'node_name',
      ],
      registers,
      collect() {
        this.reset();
        for (const m of machines.list()) {
          this.set(
            {
              name: m.metadata.name ?? '',
              namespace: m.metadata.namespace ?? '',
              createdAt: String(Math.floor((Date.parse(m.metadata.creationTimestamp ?? '') || 0) / 1000)),
              spec_provider_id: m.spec?.providerID ?? '',
              spec_class_api_group: m.spec?.class?.apiGroup ?? '',
              spec_class_kind: m.spec?.class?.kind ?? '',
              spec_class_name: m.spec?.class?.name ?? '',
              node_name: m.metadata.labels?.node ?? '',
            },
            1,
          );
        }
      },
    });
    new Gauge({
      name: 'mcm_machine_status_condition',
      help: 'Conditions of each machine (mirrored from its node): 1 True, 0 False, 2 Unknown.',
      labelNames: ['name', 'namespace', 'condition'],
      registers,
      collect() {
        this.reset();
        for (const m of machines.list()) {
          for (const c of m.status?.conditions ?? []) {
            this.set(
              { name: m.metadata.name ?? '', namespace: m.metadata.namespace ?? '', condition: c.type },
              CONDITION_VALUE[c.status] ?? 2,
            );
          }
        }
      },
    });
    const histogram = (name: string, help: string): Histogram<DurationLabels> =>
      new Histogram({
        name,
        help,
        labelNames: ['namespace', 'machine_deployment', 'instance_type', 'zone'],
        buckets: DURATION_BUCKETS,
        registers,
      });
    this.durations = {
      create: histogram('mcm_machine_create_duration_seconds', 'Duration of successful CreateMachine calls.'),
      initialize: histogram(
        'mcm_machine_initialize_duration_seconds',
        'Duration of successful InitializeMachine calls.',
      ),
      join: histogram(
        'mcm_machine_join_duration_seconds',
        'Time from a machine’s creation until its node is Ready (Running).',
      ),
      delete: histogram(
        'mcm_machine_delete_duration_seconds',
        'Time from a machine’s deletion request until its finalizer is removed.',
      ),
    };
    this.failedJoin = new Counter({
      name: 'mcm_machine_num_failed_join',
      help: 'Machines whose node did not join within the creation timeout.',
      labelNames: ['namespace', 'machine_deployment', 'instance_type', 'zone'],
      registers,
    });
    deployments?.addHandler({
      onDelete: (mcd) => {
        this.forgetDeployment(mcd.metadata.namespace ?? '', mcd.metadata.name ?? '');
      },
    });
  }

  private labelsOf(m: Machine | DeepReadonly<Machine>): Record<DurationLabels, string> {
    const namespace = m.metadata.namespace ?? '';
    const cls = this.classes.get(namespace, m.spec?.class?.name ?? '');
    const labels = {
      namespace,
      machine_deployment: m.metadata.labels?.name ?? '',
      instance_type: cls?.nodeTemplate?.instanceType ?? '',
      // gardener's master reads the zone from the machine's node template labels; the class's
      // node template names it too, for machines whose template has no such label.
      zone: m.spec?.nodeTemplate?.metadata?.labels?.[WellKnownLabel.Zone] ?? cls?.nodeTemplate?.zone ?? '',
    };
    const key = `${namespace}/${labels.machine_deployment}`;
    let sets = this.seen.get(key);
    if (sets === undefined) {
      sets = new Map();
      this.seen.set(key, sets);
    }
    sets.set(JSON.stringify(labels), labels);
    return labels;
  }

  observe(kind: MachineDuration, m: Machine | DeepReadonly<Machine>, seconds: number): void {
    this.durations[kind].observe(this.labelsOf(m), Math.max(0, seconds));
  }

  failedToJoin(m: Machine | DeepReadonly<Machine>): void {
    this.failedJoin.inc(this.labelsOf(m));
  }

  forgetDeployment(namespace: string, name: string): void {
    const sets = this.seen.get(`${namespace}/${name}`);
    if (sets === undefined) return;
    for (const labels of sets.values()) {
      for (const h of Object.values(this.durations)) h.remove(labels);
      this.failedJoin.remove(labels);
    }
    this.seen.delete(`${namespace}/${name}`);
  }
}
