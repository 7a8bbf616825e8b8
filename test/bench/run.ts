import { benchAutoscaler } from './autoscaler.bench.js';
import { benchInformer } from './informer.bench.js';
import { benchLifecycle } from './lifecycle.bench.js';
import { benchMachineSet } from './machineset.bench.js';
import { benchScale } from './scale.bench.js';

const benches: Record<string, () => Promise<void>> = {
  informer: benchInformer,
  machineset: benchMachineSet,
  lifecycle: benchLifecycle,
  autoscaler: benchAutoscaler,
  scale: benchScale,
};

const only = process.argv.slice(2);
console.log(`node ${process.version}, ${new Date().toISOString()}`);
for (const [name, fn] of Object.entries(benches)) {
  if (only.length > 0 && !only.includes(name)) continue;
  await fn();
}
