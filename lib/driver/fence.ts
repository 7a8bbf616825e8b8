import type { WriteFence } from '../kube/fence.js';
import { linkSignals } from '../kube/signals.js';
import { MachineError } from './codes.js';
import type { Driver } from './driver.js';

/**
 * Guards a driver's mutating calls (create, initialize, delete) with the leader fence: a call is
 * refused before it reaches the cloud unless this process may write now, and a call in flight gets
 * a signal that aborts when leadership ends. Reads (status, list, volume ids) pass through: a
 * standby may look, never act.
 */
export function fenceDriver(provider: string, driver: Driver, fence: WriteFence): Driver {
  const guarded =
    <Req extends { machine: { metadata: { name?: string } } }, Res>(
      operation: string,
      call: (req: Req, signal?: AbortSignal) => Promise<Res>,
    ) =>
    (req: Req, signal?: AbortSignal): Promise<Res> => {
      if (!fence.allowed()) {
        return Promise.reject(
          new MachineError(
            'Unavailable',
            `${provider} ${operation} of machine ${req.machine.metadata.name ?? ''} refused: this process no longer holds the leader Lease`,
          ),
        );
      }
      const linked = linkSignals(signal, fence.signal);
      return call(req, linked.signal).finally(linked.dispose);
    };
  return {
    createMachine: guarded('CreateMachine', (r, s) => driver.createMachine(r, s)),
    initializeMachine: guarded('InitializeMachine', (r, s) => driver.initializeMachine(r, s)),
    deleteMachine: guarded('DeleteMachine', (r, s) => driver.deleteMachine(r, s)),
    getMachineStatus: (r, s) => driver.getMachineStatus(r, s),
    listMachines: (r, s) => driver.listMachines(r, s),
    getVolumeIDs: (r, s) => driver.getVolumeIDs(r, s),
  };
}
