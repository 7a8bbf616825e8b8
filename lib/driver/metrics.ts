import { Counter, Histogram, type Registry } from 'prom-client';

import { decodeMachineError } from './codes.js';
import { DriverOperation, type Driver } from './driver.js';

interface DriverMetrics {
  duration: Histogram<'provider' | 'operation'>;
  failed: Counter<'provider' | 'operation' | 'error_code'>;
}

const byRegistry = new WeakMap<Registry, DriverMetrics>();

function driverMetrics(registry: Registry): DriverMetrics {
  let m = byRegistry.get(registry);
  if (m === undefined) {
    m = {
      duration: new Histogram({
        name: 'mcm_cloud_api_driver_request_duration_seconds',
        help: 'Duration of driver calls by provider and operation (its _count is the number of calls).',
        labelNames: ['provider', 'operation'],
        buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
        registers: [registry],
      }),
      failed: new Counter({
        name: 'mcm_cloud_api_driver_requests_failed_total',
        help: 'Failed driver calls by provider, operation and machine error code.',
        labelNames: ['provider', 'operation', 'error_code'],
        registers: [registry],
      }),
    };
    byRegistry.set(registry, m);
  }
  return m;
}

/** Wraps a driver so that every call records its duration and, when it fails, its error code. */
export function instrumentDriver(provider: string, driver: Driver, registry: Registry): Driver {
  const m = driverMetrics(registry);
  const timed =
    <Req, Res>(operation: DriverOperation, call: (req: Req, signal?: AbortSignal) => Promise<Res>) =>
    async (req: Req, signal?: AbortSignal): Promise<Res> => {
      const end = m.duration.startTimer({ provider, operation });
      try {
        return await call(req, signal);
      } catch (err) {
        m.failed.inc({ provider, operation, error_code: decodeMachineError(err).code });
        throw err;
      } finally {
        end();
      }
    };
  return {
    createMachine: timed(DriverOperation.CreateMachine, (r, s) => driver.createMachine(r, s)),
    initializeMachine: timed(DriverOperation.InitializeMachine, (r, s) => driver.initializeMachine(r, s)),
    deleteMachine: timed(DriverOperation.DeleteMachine, (r, s) => driver.deleteMachine(r, s)),
    getMachineStatus: timed(DriverOperation.GetMachineStatus, (r, s) => driver.getMachineStatus(r, s)),
    listMachines: timed(DriverOperation.ListMachines, (r, s) => driver.listMachines(r, s)),
    getVolumeIDs: timed(DriverOperation.GetVolumeIDs, (r, s) => driver.getVolumeIDs(r, s)),
  };
}
