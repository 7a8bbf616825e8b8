import {
  Annotation,
  DEFAULT_MACHINE_PRIORITY,
  ExtensionAnnotation,
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

/**
 * Being replaced surge first (the replacing annotation, set by expiry): its set creates a machine
 * in its place and deletes it once the machines that stay are available. Not once it is going.
 */
export function isReplacing(m: AnyMachine): boolean {
  return (m.metadata.annotations?.[ExtensionAnnotation.Replacing] ?? '') !== '' && !isTerminating(m);
}

/** The interruption deadline recorded on the machine (its VM is about to go), if any. */
export function interruptionDeadlineOf(m: AnyMachine): number | undefined {
  return parseTime(m.metadata.annotations?.[ExtensionAnnotation.InterruptionDeadline]);
}

/**
 * Being replaced because its VM is about to go (replacing, with an interruption deadline): its
 * set deletes it at once, beside creating its replacement, since the VM will not wait for it.
 */
export function isInterrupted(m: AnyMachine): boolean {
  return isReplacing(m) && interruptionDeadlineOf(m) !== undefined;
}

/** The failure its provider reported for the machine's VM (the vm-failure annotation: the notice's reason), if any. */
export function vmFailureOf(m: AnyMachine): string | undefined {
  const v = m.metadata.annotations?.[ExtensionAnnotation.VmFailure];
  return v === undefined || v === '' ? undefined : v;
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

/** What MCM's scale-down order looks at in a machine, read once (see compareDeletionKeys). */
export interface DeletionKey {
  preserved: boolean;
  autoPreserved: boolean;
  /** Being replaced (isReplacing): its replacement is already there or on its way. */
  replacing: boolean;
  /** preserveExpiryTime (0 when absent); compared only between preserved machines. */
  expiry: number;
  priority: number;
  /** The marked-for-deletion time; undefined when unmarked. */
  marked: number | undefined;
  phaseRank: number;
  /** creationTimestamp (0 when absent). */
  created: number;
  name: string;
}

export function deletionKey(m: AnyMachine, now: number): DeletionKey {
  const expiry = parseTime(m.status?.currentStatus?.preserveExpiryTime);
  return {
    preserved: expiry !== undefined && expiry > now,
    autoPreserved: m.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved,
    replacing: isReplacing(m),
    expiry: expiry ?? 0,
    priority: priorityOf(m),
    marked: markedForDeletionTime(m),
    phaseRank: phaseDeletionRank[phaseOf(m)] ?? 0,
    created: parseTime(m.metadata.creationTimestamp) ?? 0,
    name: m.metadata.name ?? '',
  };
}

/**
 * MCM's scale-down order over deletion keys (negative: a is deleted before b):
 * 1. not preserved before preserved (auto-preserved before user-preserved, then earlier expiry);
 * 2. machines being replaced (isReplacing) first, then lower machinepriority first;
 * 3. machines marked for deletion before unmarked ones, earlier marks first;
 * 4. phase: Terminating, Failed, CrashLoopBackOff, Unknown, Pending, Available, Running
 *    (other phases, including the empty creating phase, rank first with Terminating);
 * 5. older machines first; then by name.
 */
export function compareDeletionKeys(a: DeletionKey, b: DeletionKey): number {
  if (a.preserved !== b.preserved) return a.preserved ? 1 : -1;
  if (a.preserved) {
    if (a.autoPreserved !== b.autoPreserved) return a.autoPreserved ? -1 : 1;
    if (a.expiry !== b.expiry) return a.expiry - b.expiry;
  }
  if (a.replacing !== b.replacing) return a.replacing ? -1 : 1;
  if (a.priority !== b.priority) return a.priority - b.priority;
  if ((a.marked === undefined) !== (b.marked === undefined)) return a.marked === undefined ? 1 : -1;
  if (a.marked !== undefined && b.marked !== undefined && a.marked !== b.marked) return a.marked - b.marked;
  if (a.phaseRank !== b.phaseRank) return a.phaseRank - b.phaseRank;
  if (a.created !== b.created) return a.created - b.created;
  return a.name.localeCompare(b.name);
}

/** MCM's scale-down order as a comparator of machines (see compareDeletionKeys). */
export function compareForDeletion(a: AnyMachine, b: AnyMachine, now: number): number {
  return compareDeletionKeys(deletionKey(a, now), deletionKey(b, now));
}

/**
 * The machines in MCM's scale-down order, first to go first: each machine's key is read once, so
 * ordering a large set costs its comparisons of numbers, not of parsed timestamps and annotations.
 */
export function sortForDeletion<M extends AnyMachine>(machines: readonly M[], now: number): M[] {
  const keyed = machines.map((m) => ({ m, k: deletionKey(m, now) }));
  keyed.sort((a, b) => compareDeletionKeys(a.k, b.k));
  return keyed.map((e) => e.m);
}

export function controllerRefOf(obj: {
  metadata: { ownerReferences?: readonly DeepReadonly<OwnerReference>[] | OwnerReference[] };
}): DeepReadonly<OwnerReference> | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}
