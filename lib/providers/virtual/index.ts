import type { MachineClass } from '../../api/types.js';
import type { NodePriceAnswer, ProviderFactory } from '../../driver/registry.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { parseProviderSpec } from './spec.js';
import { VirtualDriver } from './driver.js';
import { Hypervisor } from './hypervisor.js';
import { ConfigMapVmStore, NodeVmStore, type VmStore } from './store.js';

export { VIRTUAL_PROVIDER, VIRTUAL_PROVIDER_ID_PREFIX } from './vm.js';

/**
 * The built-in simulated cloud (`MachineClass.provider: virtual`). With a target cluster each VM
 * is a Node there, brought to Ready by the hypervisor when its boot delay has passed and kept
 * alive by kwok when kwok runs, and updated in place by a simulated node update agent; without
 * one, VMs are ConfigMaps in the control namespace.
 */
export function virtualProvider(opts: { random?: () => number } = {}): ProviderFactory {
  return (ctx) => {
    let store: VmStore;
    let hypervisor: Hypervisor | undefined;
    if (ctx.target !== undefined && ctx.nodes !== undefined) {
      store = new NodeVmStore(ctx.target, ctx.nodes);
      hypervisor = new Hypervisor(
        ctx.target,
        ctx.nodes,
        ctx.clock,
        ctx.logger.child({ provider: 'virtual' }),
        ctx.registry,
        { caches: ctx.informers, namespace: ctx.namespace },
      );
    } else {
      store = new ConfigMapVmStore(ctx.control, ctx.namespace, ctx.logger.child({ provider: 'virtual' }));
    }
    const driver = new VirtualDriver({
      store,
      clock: ctx.clock,
      ...(opts.random === undefined ? {} : { random: opts.random }),
    });
    return {
      driver,
      listAllMachines: (signal) => driver.listAllMachines(signal),
      nodePrice: ({ machineClass }) => classPrice(machineClass),
      start: () => {
        store.start();
        hypervisor?.start();
      },
      stop: async () => {
        await hypervisor?.stop();
        await store.stop();
      },
    };
  };
}

const prices = new WeakMap<DeepReadonly<MachineClass>, NodePriceAnswer>();

/** A virtual class's price: its providerSpec.pricePerHour (read once per class object). */
function classPrice(cls: DeepReadonly<MachineClass>): NodePriceAnswer {
  let p = prices.get(cls);
  if (p === undefined) {
    const parsed = parseProviderSpec(cls.providerSpec);
    const name = cls.metadata.name ?? '';
    p = !parsed.ok
      ? { unknown: `MachineClass ${name} has an invalid providerSpec` }
      : parsed.spec.pricePerHour === undefined
        ? { unknown: `MachineClass ${name} sets no providerSpec.pricePerHour` }
        : {
            pricePerHour: parsed.spec.pricePerHour,
            currency: '',
            source: `providerSpec.pricePerHour of MachineClass ${name}`,
          };
    prices.set(cls, p);
  }
  return p;
}
