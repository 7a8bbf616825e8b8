// Whether the VM of a Pending machine still exists. Until its node registers, nothing else tells:
// without this check a VM that vanishes in the meantime (a spot reclaim, an instance the cloud
// could not place after all, a user) keeps its machine Pending until the creation timeout (20
// minutes by default). So the driver is asked (GetMachineStatus for the recorded providerID) while
// a Pending machine has no node, on a per-machine schedule that thins out: first GRACE after the
// machine went Pending, then after intervals that double up to MAX_INTERVAL. Only NotFound counts
// as gone; any other answer or error leaves the machine to the creation timeout.
//
// The grace: a driver's CreateMachine returns once the VM is visible to its cloud's API (gardener's
// AWS driver waits for EC2's eventual consistency before it returns), and the machine only goes
// Pending after that and after InitializeMachine; the grace covers drivers that do not wait. A
// wrong NotFound costs one replacement (the deletion flow deletes the VM by its providerID, and
// orphan collection catches one that a still-inconsistent API hid), never a second VM for one
// machine: the machine is marked Failed, not created again.
//
// Once a node exists its loss is seen directly (the node controller deletes the machine of a
// deleted node, as MCM does), and a Running or Unknown machine is judged by its node and the
// health timeout as in MCM, without driver calls.

import { Label, MachinePhase } from '../../api/constants.js';
import type { Machine } from '../../api/types.js';
import { decodeMachineError } from '../../driver/codes.js';
import type { MachineRequest } from '../../driver/driver.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { phaseOf } from '../machines.js';
import type { MachineDeps } from './deps.js';
import { MachineMemory } from './memory.js';
import { resolveMachineClass } from './resolve.js';

type AnyMachine = Machine | DeepReadonly<Machine>;
type AnyNode = Node | DeepReadonly<Node>;

/** No VM is asked for sooner than this after its machine went Pending. */
export const VM_PROBE_GRACE_MS = 30_000;
/** The longest interval between two checks of one machine's VM. */
export const VM_PROBE_MAX_INTERVAL_MS = 4 * 60_000;

/** When a Pending machine's VM is next due for a check (pure): GRACE, then doubling intervals. */
export function nextVmProbeAt(pendingSince: number, lastProbeAt: number | undefined): number {
  if (lastProbeAt === undefined) return pendingSince + VM_PROBE_GRACE_MS;
  const interval = Math.min(
    VM_PROBE_MAX_INTERVAL_MS,
    Math.max(VM_PROBE_GRACE_MS, lastProbeAt - pendingSince),
  );
  return lastProbeAt + interval;
}

/** When the machine went Pending (its phase's lastUpdateTime), or undefined when unknown. */
function pendingSince(m: AnyMachine): number | undefined {
  for (const s of [m.status?.currentStatus?.lastUpdateTime, m.metadata.creationTimestamp]) {
    const t = Date.parse(s ?? '');
    if (!Number.isNaN(t)) return t;
  }
  return undefined;
}

/**
 * A Pending machine with a recorded VM and no node (none yet, or one being deleted, which our
 * finalizer keeps until the machine is deleted): only the driver can say if its VM is there.
 */
export function awaitsNode(m: AnyMachine, node: AnyNode | undefined): boolean {
  return (
    (node === undefined || node.metadata.deletionTimestamp !== undefined) &&
    phaseOf(m) === MachinePhase.Pending &&
    m.metadata.deletionTimestamp === undefined &&
    (m.spec?.providerID ?? '') !== '' &&
    m.metadata.labels?.[Label.Node] !== undefined
  );
}

export interface VmCheck {
  /** The driver answered NotFound for the recorded providerID. */
  gone: boolean;
  /** The next check is due after this long (undefined: no check pending). */
  recheckAfterMs?: number;
}

/** The checks of Pending machines' VMs, with the time of each machine's last check (in memory). */
export class VmProbes {
  private readonly lastProbe: MachineMemory<number>;

  constructor(
    private readonly d: MachineDeps,
    capacity: number,
  ) {
    this.lastProbe = new MachineMemory(capacity);
  }

  /** Checks the machine's VM if it awaits its node and a check is due. */
  async check(m: AnyMachine, node: AnyNode | undefined, now: number, log: Logger): Promise<VmCheck> {
    const uid = m.metadata.uid;
    const since = pendingSince(m);
    if (!awaitsNode(m, node) || since === undefined) {
      this.lastProbe.delete(uid);
      return { gone: false };
    }
    const due = nextVmProbeAt(since, this.lastProbe.get(uid));
    if (now < due) return { gone: false, recheckAfterMs: due - now };
    this.lastProbe.set(uid, now);
    const gone = await this.vmGone(m, log);
    return { gone, recheckAfterMs: nextVmProbeAt(since, now) - now };
  }

  forget(uid: string | undefined): void {
    this.lastProbe.delete(uid);
  }

  private async vmGone(m: AnyMachine, log: Logger): Promise<boolean> {
    const d = this.d;
    const r = resolveMachineClass(
      { machineClasses: d.informers.machineClasses, secrets: d.informers.secrets, providers: d.providers },
      m,
      { requireFinalizer: false, allowMissingSecrets: true },
    );
    if (!r.ok) return false;
    try {
      await r.driver.getMachineStatus({
        machine: structuredClone(m) as Machine,
        machineClass: structuredClone(r.machineClass) as MachineRequest['machineClass'],
        secret: r.secret,
      });
      return false;
    } catch (err) {
      const e = decodeMachineError(err);
      if (e.ok && e.code === 'NotFound') return true;
      log.verbose('could not tell whether the VM of the Pending machine exists', {
        providerID: m.spec?.providerID,
        code: e.ok ? e.code : undefined,
      });
      return false;
    }
  }
}
