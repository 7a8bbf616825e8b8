import {
  Annotation,
  DEFAULT_MACHINE_PRIORITY,
  Label,
  MachinePhase,
  PreserveValue,
} from '../api/constants.js';
import type { Node, OwnerReference } from '../kube/types.js';
import type { Machine } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';

export type AnyMachine = Machine | DeepReadonly<Machine>;

export function phaseOf(m: AnyMachine): MachinePhase {
  return m.status?.currentStatus?.phase ?? MachinePhase.Creating;
}

/**
 * The VM a providerID names, as a key: `<scheme>://<last path segment>` for ids of the
 * `<scheme>://…/<id>` form, else the id itself. Two providerIDs name the same VM exactly when
 * their keys are equal: a kubelet may register another form than the driver returned, e.g. AWS's
 * `aws:///<zone>/<id>` for the driver's `aws:///<region>/<id>`.
 */
export function vmKey(providerID: string): string {
  const sep = providerID.indexOf('://');
  const last = providerID.slice(providerID.lastIndexOf('/') + 1);
  if (sep <= 0 || last === '' || providerID.lastIndexOf('/') < sep + 2) return providerID;
  return `${providerID.slice(0, sep)}://${last}`;
}

/** Whether two providerIDs name the same VM (see vmKey); an empty one names none. */
export function sameVM(a: string, b: string): boolean {
  return a !== '' && b !== '' && vmKey(a) === vmKey(b);
}

/**
 * Whether a Node is proved to belong to a machine, before anything is written to it on the
 * machine's behalf: its machine-name label names the machine, or (unlabelled) its providerID is the
 * machine's VM. A node name alone proves nothing: providers that name nodes by IP address reuse
 * names, and another machine's node may carry the name a machine's `node` label still holds.
 */
export function nodeBelongsTo(node: Node | DeepReadonly<Node>, m: AnyMachine): boolean {
  const claimedBy = node.metadata.labels?.[Label.NodeMachineName] ?? '';
  if (claimedBy !== '') return claimedBy === m.metadata.name;
  return sameVM(node.spec?.providerID ?? '', m.spec?.providerID ?? '');
}

/** Phases of a machine whose node has not joined: not created yet, created, or failing to create. */
const NOT_JOINED: ReadonlySet<string> = new Set<string>([
  MachinePhase.Creating,
  MachinePhase.Pending,
  MachinePhase.Available,
  MachinePhase.CrashLoopBackOff,
]);

/**
 * Whether the machine is past its creation: none of the creation phases. A machine reads Running
 * once its node is Ready and carries the node template (the machine controller's join); later
 * phases (Unknown, Failed, Terminating, in-place updates) keep the node it has.
 */
export function hasJoined(m: AnyMachine): boolean {
  return !NOT_JOINED.has(phaseOf(m));
}

/** Being deleted: deletion requested or already in the Terminating phase. */
export function isTerminating(m: AnyMachine): boolean {
  return m.metadata.deletionTimestamp !== undefined || phaseOf(m) === MachinePhase.Terminating;
}

/** Counts toward a MachineSet's replicas. */
export function isActive(m: AnyMachine): boolean {
  return !isTerminating(m);
}

export function isAvailable(m: AnyMachine): boolean {
  const p = phaseOf(m);
  return p === MachinePhase.Running || p === MachinePhase.Available;
}

export function isReady(m: AnyMachine): boolean {
  return phaseOf(m) === MachinePhase.Running;
}

export function isFailed(m: AnyMachine): boolean {
  return phaseOf(m) === MachinePhase.Failed;
}

function parseTime(s: string | undefined): number | undefined {
  if (s === undefined || s === '') return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

/** Preservation is in force: preserveExpiryTime lies in the future. */
export function isPreserved(m: AnyMachine, now: number): boolean {
  const t = parseTime(m.status?.currentStatus?.preserveExpiryTime);
  return t !== undefined && t > now;
}

/**
 * Whether a Failed machine must be kept instead of replaced: preservation in force, or a preserve
 * annotation asking for it (the machine controller then sets the expiry). An expired preservation
 * no longer protects it.
 */
export function shouldKeepFailedMachine(m: AnyMachine, now: number): boolean {
  const expiry = parseTime(m.status?.currentStatus?.preserveExpiryTime);
  if (expiry !== undefined) return expiry > now;
  const v = m.metadata.annotations?.[Annotation.Preserve];
  return v === PreserveValue.Now || v === PreserveValue.WhenFailed || v === PreserveValue.AutoPreserved;
}

/** Deletion priority (lower goes first); MCM's default 3 when absent or unparsable. */
export function priorityOf(m: AnyMachine): number {
  const raw = m.metadata.annotations?.[Annotation.MachinePriority];
  if (raw === undefined || !/^-?\d+$/.test(raw.trim())) return DEFAULT_MACHINE_PRIORITY;
  return Number(raw.trim());
}

export function markedForDeletionTime(m: AnyMachine): number | undefined {
  return parseTime(m.metadata.annotations?.[Annotation.MarkedForDeletionTime]);
}

/** Phases that go first when scaling down: broken and unfinished machines before healthy ones. */
const phaseDeletionRank: Partial<Record<MachinePhase, number>> = {
  [MachinePhase.Terminating]: 0,
  [MachinePhase.Failed]: 1,
  [MachinePhase.CrashLoopBackOff]: 2,
  [MachinePhase.Unknown]: 3,
  [MachinePhase.Pending]: 4,
  [MachinePhase.Available]: 5,
  [MachinePhase.Running]: 6,
};

/**
 * MCM's scale-down order, as a comparator (negative: a is deleted before b):
 * 1. not preserved before preserved (auto-preserved before user-preserved, then earlier expiry);
 * 2. lower machinepriority first;
 * 3. machines marked for deletion before unmarked ones, earlier marks first;
 * 4. phase: Terminating, Failed, CrashLoopBackOff, Unknown, Pending, Available, Running
 *    (other phases, including the empty creating phase, rank first with Terminating);
 * 5. older machines first.
 */
export function compareForDeletion(a: AnyMachine, b: AnyMachine, now: number): number {
  const pa = isPreserved(a, now);
  const pb = isPreserved(b, now);
  if (pa !== pb) return pa ? 1 : -1;
  if (pa && pb) {
    const autoA = a.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved;
    const autoB = b.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved;
    if (autoA !== autoB) return autoA ? -1 : 1;
    const ea = parseTime(a.status?.currentStatus?.preserveExpiryTime) ?? 0;
    const eb = parseTime(b.status?.currentStatus?.preserveExpiryTime) ?? 0;
    if (ea !== eb) return ea - eb;
  }
  const prioDiff = priorityOf(a) - priorityOf(b);
  if (prioDiff !== 0) return prioDiff;
  const ma = markedForDeletionTime(a);
  const mb = markedForDeletionTime(b);
  if ((ma === undefined) !== (mb === undefined)) return ma === undefined ? 1 : -1;
  if (ma !== undefined && mb !== undefined && ma !== mb) return ma - mb;
  const ra = phaseDeletionRank[phaseOf(a)] ?? 0;
  const rb = phaseDeletionRank[phaseOf(b)] ?? 0;
  if (ra !== rb) return ra - rb;
  const ca = parseTime(a.metadata.creationTimestamp) ?? 0;
  const cb = parseTime(b.metadata.creationTimestamp) ?? 0;
  if (ca !== cb) return ca - cb;
  return (a.metadata.name ?? '').localeCompare(b.metadata.name ?? '');
}

export function controllerRefOf(obj: {
  metadata: { ownerReferences?: readonly DeepReadonly<OwnerReference>[] | OwnerReference[] };
}): DeepReadonly<OwnerReference> | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}
