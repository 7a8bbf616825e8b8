import { MachineResource, MachineSetResource, type Machine, type MachineSet } from '../../lib/api/types.js';
import { MachineSetController } from '../../lib/controllers/machineset/controller.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { machineSet } from '../unit/controllers/builders.js';
import { ControllerTestEnv } from '../unit/controllers/env.js';
import { printTable } from './table.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };

async function scenario(sets: number, perSet: number): Promise<(string | number)[]> {
  const env = new ControllerTestEnv();
  const all: MachineSet[] = [];
  for (let s = 0; s < sets; s++) {
    const ms = machineSet(`ms-${s}`, perSet);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    all.push(ms);
    env.seed(MachineSetResource, ms);
  }
  const controller = new MachineSetController(env.ctx);
  await env.start();

  // 1. Converge from zero: every set creates its machines (at most 100 per reconcile).
  let reconciles = 0;
  let createMs = 0;
  for (let pass = 0; env.api.all<Machine>(MachineResource).length < sets * perSet && pass < 100; pass++) {
    const t0 = performance.now();
    for (const ms of all) {
      await controller.reconcile(`default/${ms.metadata.name ?? ''}`, rctx);
      reconciles++;
    }
    createMs += performance.now() - t0;
    await env.settle();
  }
  const machines = env.api.all<Machine>(MachineResource).length;

  // Mark them running so the steady state has nothing to do.
  for (const m of env.api.all<Machine>(MachineResource)) {
    m.status = { currentStatus: { phase: 'Running' } };
    await env.api.updateStatus(MachineResource, m);
  }
  for (const ms of all) await controller.reconcile(`default/${ms.metadata.name ?? ''}`, rctx);
  await env.settle();

  // 2. Steady state: nothing to change, every reconcile must be a no-op read of the cache.
  env.api.clearActions();
  const rounds = 5;
  const t1 = performance.now();
  for (let r = 0; r < rounds; r++)
    for (const ms of all) await controller.reconcile(`default/${ms.metadata.name ?? ''}`, rctx);
  const steadyMs = performance.now() - t1;
  const writes = env.api.writes().length;

  // 3. Scale every set down by half: deletion order and deletes.
  for (const ms of env.api.all<MachineSet>(MachineSetResource)) {
    if (ms.spec !== undefined) ms.spec.replicas = Math.floor(perSet / 2);
    await env.api.update(MachineSetResource, ms);
  }
  await env.settle();
  const t2 = performance.now();
  for (const ms of all) await controller.reconcile(`default/${ms.metadata.name ?? ''}`, rctx);
  const scaleDownMs = performance.now() - t2;
  await env.stop();
  return [
    sets,
    perSet,
    machines,
    (reconciles / createMs) * 1000,
    (machines / createMs) * 1000,
    ((sets * rounds) / steadyMs) * 1000,
    writes,
    (sets / scaleDownMs) * 1000,
  ];
}

export async function benchMachineSet(): Promise<void> {
  // The last row has 5,000 machines in one set: a steady reconcile should cost what it costs at 1,000.
  const rows = [
    await scenario(100, 10),
    await scenario(10, 100),
    await scenario(1, 1000),
    await scenario(1, 5000),
  ];
  printTable(
    'MachineSet controller: reconcile throughput at 1,000 machines, and one set of 5,000 (in-memory API; reconcile called directly)',
    [
      'sets',
      'machines/set',
      'machines',
      'create MS/s',
      'machines created/s',
      'steady MS/s',
      'steady writes',
      'scale-down MS/s',
    ],
    rows,
  );
  console.log(
    'create: each reconcile creates its machines (slow-start batches); steady: no change, zero API writes expected;',
  );
  console.log('scale-down: each reconcile orders its machines for deletion and deletes half of them.');
}
