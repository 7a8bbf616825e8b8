// Stands in for what a real VM does when it boots: its kubelet registers a Node carrying the VM's
// providerID. Here the provider registers it in the target cluster itself, annotated so that kwok
// (the test harness's kubelet simulator, when it runs) keeps it alive. A real provider does not
// write Nodes.

import type { KubeApi, Logger, Node, ResourceType } from '../../../lib/driver/index.js';
import type { VmRecord } from './cloud.js';
import { providerIDOf } from './driver.js';
import type { ExampleSpec } from './spec.js';

const NODES: ResourceType = { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false };

export function nodeOf(vm: VmRecord, spec: ExampleSpec): Node {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const resources = { cpu: spec.cpu, memory: spec.memory, pods: '110' };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: vm.id,
      labels: {
        'kubernetes.io/hostname': vm.id,
        'kubernetes.io/os': 'linux',
        'node.kubernetes.io/instance-type': spec.machineType,
        'topology.kubernetes.io/zone': vm.zone,
      },
      annotations: { 'kwok.x-k8s.io/node': 'fake' },
    },
    spec: { providerID: providerIDOf(vm) },
    status: {
      capacity: resources,
      allocatable: resources,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'KubeletReady',
          message: 'example VM is running',
          lastHeartbeatTime: now,
          lastTransitionTime: now,
        },
      ],
      addresses: [{ type: 'Hostname', address: vm.id }],
    },
  };
}

/** How long after its creation a VM's kubelet registers its Node. */
export const BOOT_MS = 1000;

/**
 * The simulated kubelets: a VM registers its Node a moment after it was created, never during
 * CreateMachine (a Node that exists before its VM would be taken for a stale one, as gardener MCM
 * does). Registration is idempotent, so a VM whose create was retried registers once.
 */
export class Kubelets {
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly running = new Set<Promise<void>>();

  constructor(
    private readonly target: KubeApi,
    private readonly logger: Logger,
  ) {}

  boot(vm: VmRecord, spec: ExampleSpec): Promise<void> {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      const registering = this.register(vm, spec).finally(() => this.running.delete(registering));
      this.running.add(registering);
    }, BOOT_MS);
    this.timers.add(timer);
    return Promise.resolve();
  }

  private async register(vm: VmRecord, spec: ExampleSpec): Promise<void> {
    try {
      await this.target.create(NODES, nodeOf(vm, spec));
    } catch (err) {
      if ((err as { code?: unknown }).code === 409) return;
      this.logger.warn('example cloud: the VM could not register its Node', { vm: vm.id, err });
    }
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    await Promise.all(this.running);
  }
}
