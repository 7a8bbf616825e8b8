import { benchAutoscaler } from './autoscaler.bench.js';
import { benchAws } from './aws.bench.js';
import { benchGrpcFlood } from './grpc-flood.bench.js';
import { benchInformer } from './informer.bench.js';
import { benchLifecycle } from './lifecycle.bench.js';
import { benchMachineSet } from './machineset.bench.js';
import { benchScale } from './scale.bench.js';
import { benchSdkMemory } from './sdk-memory.bench.js';
import { benchSoak } from './soak.bench.js';

const benches: Record<string, () => Promise<void>> = {
  informer: benchInformer,
  machineset: benchMachineSet,
  lifecycle: benchLifecycle,
  autoscaler: benchAutoscaler,
  scale: benchScale,
  soak: benchSoak,
  aws: benchAws,
  'sdk-memory': benchSdkMemory,
  'grpc-flood': benchGrpcFlood,
};

// Run only when named (`npm run bench soak`): the soak takes 30 minutes (MCM_BENCH_SOAK_MINUTES);
// aws needs the EC2 emulator (`bash hack/tools.sh moto`).
const onlyWhenNamed = new Set(['soak', 'aws']);

const only = process.argv.slice(2);
console.log(`node ${process.version}, ${new Date().toISOString()}`);
for (const [name, fn] of Object.entries(benches)) {
  if (only.length > 0 ? !only.includes(name) : onlyWhenNamed.has(name)) continue;
  await fn();
}
if (only.length === 0) {
  console.log(
    '\n(soak is left out: it takes 30 minutes; run it with `npm run bench soak`, MCM_BENCH_SOAK_MINUTES=3 for a short run)',
  );
}
