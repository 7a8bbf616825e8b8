// A machine controller over the in-memory API with the virtual provider, for the machine
// controller's tests: a class, machines and VM nodes to seed, and the driver calls it made.

import {
  API_VERSION,
  MachineClassResource,
  MachineResource,
  type Machine,
  type MachineClass,
} from '../../../../lib/api/types.js';
import { MachineController } from '../../../../lib/controllers/machine/controller.js';
import {
  defaultMachineControllerSettings,
  type MachineControllerSettings,
} from '../../../../lib/controllers/machine/settings.js';
import { ProviderRegistry } from '../../../../lib/driver/registry.js';
import type { Driver, DriverOperation } from '../../../../lib/driver/driver.js';
import type { Node } from '../../../../lib/kube/types.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { virtualProvider } from '../../../../lib/providers/virtual/index.js';
import { machine } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

export const rctx = { log: nullLogger, signal: new AbortController().signal };
export const FINALIZER = 'machine.sapcloud.io/machine-controller-manager';

export const smallClass: MachineClass = {
  apiVersion: API_VERSION,
  kind: 'MachineClass',
  metadata: { name: 'small', namespace: 'default', finalizers: [FINALIZER] },
  provider: 'virtual',
  providerSpec: {},
};

/** A machine with a VM (providerID) and a node label; Running unless `status` says otherwise. */
export function machineWithVm(
  name: string,
  opts: { deleting?: boolean; status?: Machine['status'] } = {},
): Machine {
  const m = machine(name, { labels: { node: name }, deleting: opts.deleting === true });
  m.spec = { ...m.spec, providerID: `virtual://virtual-zone-a/${name}` };
  m.status = opts.status ?? {
    currentStatus: { phase: 'Running', lastUpdateTime: '2026-11-21T09:00:00Z' },
    conditions: [{ type: 'Ready', status: 'True' }],
  };
  return m;
}

/** The Node that is the virtual VM of machine `name` (Ready). */
export function vmNode(name: string, labels: Record<string, string> = {}): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      uid: `node-uid-${name}`,
      labels: { 'virtual.mcm-ts.io/vm': 'true', 'node.gardener.cloud/machine-name': name, ...labels },
      annotations: {
        'virtual.mcm-ts.io/machine': `default/${name}`,
        'virtual.mcm-ts.io/machine-class': 'small',
      },
    },
    spec: { providerID: `virtual://virtual-zone-a/${name}` },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

/**
 * The class (smallClass unless `machineClass` says otherwise; null: none) and machines seeded, and
 * whatever `seed` adds, the controller built, the caches synced.
 */
export async function machineControllerEnv(
  machines: Machine[],
  opts: {
    settings?: Partial<MachineControllerSettings>;
    machineClass?: MachineClass | null;
    seed?: (env: ControllerTestEnv) => void;
    /** A further provider (a fake driver) beside the virtual one. */
    provider?: { name: string; driver: Driver };
  } = {},
): Promise<{ env: ControllerTestEnv; mc: MachineController }> {
  const env = new ControllerTestEnv();
  const cls = opts.machineClass === undefined ? smallClass : opts.machineClass;
  if (cls !== null) env.seed(MachineClassResource, cls);
  for (const m of machines) env.seed(MachineResource, m);
  opts.seed?.(env);
  const providers = new ProviderRegistry().register('virtual', virtualProvider());
  const extra = opts.provider;
  if (extra !== undefined) providers.register(extra.name, () => ({ driver: extra.driver }));
  providers.instantiate({
    control: env.api,
    target: env.target,
    namespace: 'default',
    nodes: env.informers.nodes,
    clock: env.clock,
    logger: env.logger,
    registry: env.registry,
  });
  const mc = new MachineController(env.ctx, {
    settings: { ...defaultMachineControllerSettings, ...opts.settings },
    providers,
    workers: 1,
  });
  await env.start();
  return { env, mc };
}

/** How many calls of `operation` the drivers received (from their call metrics). */
export async function driverCalls(env: ControllerTestEnv, operation: DriverOperation): Promise<number> {
  const text = await env.registry.getSingleMetricAsString('mcm_cloud_api_driver_request_duration_seconds');
  const line = text.split('\n').find((l) => l.includes('_count{') && l.includes(`operation="${operation}"`));
  return Number(line?.split(' ').pop() ?? 0);
}
