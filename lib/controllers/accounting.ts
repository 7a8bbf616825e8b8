// Machine counts per owner, kept up to date from the machine informer's events, so that the
// MachineSet, MachineDeployment and overshoot reconciles read a handful of numbers instead of
// scanning every machine of a set on every machine write (issue #22). Each machine's facts are
// computed once per event and remembered, so a delete or an update subtracts exactly what was
// added before, whatever order the events came in and whatever state the delete event carries.
//
// Some facts depend on the owning MachineSet (its selector, template labels and template spec).
// They are computed against the owner as the tally last saw it; a reader passes the set as it is
// now, and when its spec differs (or the tally has not seen the set yet) the tally is rebuilt from
// the cache: O(machines of the set), once per change of the set's spec.

import {
  Annotation,
  ExtensionAnnotation,
  DELETE_FIRST_MACHINE_PRIORITY,
  Label,
  LabelValue,
  MachineState,
  PreserveValue,
} from '../api/constants.js';
import type { Machine, MachineSet } from '../api/types.js';
import {
  CONTROLLER_UID_INDEX,
  NO_CONTROLLER,
  objectKey,
  type DeepReadonly,
  type Lister,
} from '../kube/informer.js';
import { isEmptySelector, selectorMatches } from '../kube/labels.js';
import { propagationPatch } from './machineset/propagate.js';
import {
  controllerRefOf,
  isAvailable,
  isFailed,
  isInterrupted,
  isReplacing,
  isReady,
  isTerminating,
  markedForDeletionTime,
  priorityOf,
  type AnyMachine,
} from './machines.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;

/**
 * What is counted. The first group holds for every machine with the owner's controller
 * reference; the `selected*` ones only for those of them the owner's selector also matches (what
 * the MachineSet controller claims and reports in its status).
 */
export interface MachineCounts {
  /** Machines with this controller reference. */
  all: number;
  /** …being deleted (deletionTimestamp or phase Terminating). */
  terminating: number;
  /** …not being deleted and available (Running or Available). */
  available: number;
  /** …carrying a deletion mark of the autoscaler protocol (marked-for-deletion time). */
  marked: number;
  /**
   * …not being deleted, with a rebalance recommendation or being replaced for a voluntary reason
   * (expiry, rebalance): their deployment plans voluntary replacement even without expiry.
   */
  voluntary: number;
  /**
   * …not being deleted, not interrupted (their replacement is counted instead, one for one) and
   * carrying the owner's template labels (what counts toward overshoot).
   */
  stayingTemplated: number;
  /** …the owner's selector matches (in the owner's namespace). */
  selected: number;
  /** …the selector does not match and that are not being deleted: the owner would release them. */
  releasable: number;
  selectedTerminating: number;
  /** Selected, not being deleted, Running. */
  selectedReady: number;
  /** Selected, not being deleted, Running or Available. */
  selectedAvailable: number;
  /** Selected and carrying the template labels. */
  selectedFullyLabeled: number;
  /** Selected, not being deleted, handed over by an in-place update (label update-result=successful). */
  selectedUpdateSuccessful: number;
  /** Selected in phase Failed. */
  selectedFailed: number;
  /** Selected with lastOperation.state Failed. */
  selectedFailedOperation: number;
  /** Selected with the preserve annotation auto-preserved. */
  selectedAutoPreserved: number;
  /** Selected with priority 1 and a deletion mark time. */
  selectedMarkedFirst: number;
  /** Selected whose node template, configuration or class kind differs from the owner's template. */
  selectedNeedingPropagation: number;
  /** Selected, not being deleted, being replaced surge first (isReplacing). */
  selectedReplacing: number;
}

/** The counts that hold whatever the owner's spec: readable for any controller UID at once. */
export type OwnerCounts = Pick<MachineCounts, 'all' | 'terminating' | 'available' | 'marked' | 'voluntary'>;

const FIELDS = [
  'all',
  'terminating',
  'available',
  'marked',
  'voluntary',
  'stayingTemplated',
  'selected',
  'releasable',
  'selectedTerminating',
  'selectedReady',
  'selectedAvailable',
  'selectedFullyLabeled',
  'selectedUpdateSuccessful',
  'selectedFailed',
  'selectedFailedOperation',
  'selectedAutoPreserved',
  'selectedMarkedFirst',
  'selectedNeedingPropagation',
  'selectedReplacing',
] as const satisfies readonly (keyof MachineCounts)[];

type Field = (typeof FIELDS)[number];

/** A machine's facts as a bit set: bit i stands for FIELDS[i]. */
type Facts = number;

const BIT = Object.fromEntries(FIELDS.map((f, i) => [f, 1 << i])) as Record<Field, number>;

export function emptyCounts(): MachineCounts {
  return Object.fromEntries(FIELDS.map((f) => [f, 0])) as unknown as MachineCounts;
}

/**
 * The facts of one machine, counted for its controller, given that controller as the tally knows
 * it (undefined: not known yet, so nothing that depends on it holds).
 */
export function factsOf(m: AnyMachine, owner: AnySet | undefined): Facts {
  const terminating = isTerminating(m);
  let f = BIT.all;
  if (terminating) f |= BIT.terminating;
  else if (isAvailable(m)) f |= BIT.available;
  if ((m.metadata.annotations?.[Annotation.MarkedForDeletionTime] ?? '') !== '') f |= BIT.marked;
  if (!terminating && isVoluntarilyDisrupted(m)) f |= BIT.voluntary;
  if (owner === undefined) return f;
  const templateLabels = owner.spec?.template?.metadata?.labels ?? {};
  const templated = selectorMatches({ matchLabels: templateLabels }, m.metadata.labels);
  if (templated && !terminating && !isInterrupted(m)) f |= BIT.stayingTemplated;
  const selector = owner.spec?.selector;
  const selected =
    selector !== undefined &&
    !isEmptySelector(selector) &&
    m.metadata.namespace === owner.metadata.namespace &&
    selectorMatches(selector, m.metadata.labels);
  if (!selected) {
    if (m.metadata.deletionTimestamp === undefined) f |= BIT.releasable;
    return f;
  }
  f |= BIT.selected;
  if (terminating) f |= BIT.selectedTerminating;
  else {
    if (isReady(m)) f |= BIT.selectedReady;
    if (isAvailable(m)) f |= BIT.selectedAvailable;
    if (m.metadata.labels?.[Label.UpdateResult] === LabelValue.UpdateSuccessful)
      f |= BIT.selectedUpdateSuccessful;
  }
  if (templated) f |= BIT.selectedFullyLabeled;
  if (isFailed(m)) f |= BIT.selectedFailed;
  if (m.status?.lastOperation?.state === MachineState.Failed) f |= BIT.selectedFailedOperation;
  if (m.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved)
    f |= BIT.selectedAutoPreserved;
  if (priorityOf(m) === DELETE_FIRST_MACHINE_PRIORITY && markedForDeletionTime(m) !== undefined)
    f |= BIT.selectedMarkedFirst;
  if (propagationPatch(owner, m) !== undefined) f |= BIT.selectedNeedingPropagation;
  if (isReplacing(m)) f |= BIT.selectedReplacing;
  return f;
}

/** A rebalance recommendation, or a replacement for a voluntary reason (expiry, rebalance). */
function isVoluntarilyDisrupted(m: AnyMachine): boolean {
  const a = m.metadata.annotations;
  if ((a?.[ExtensionAnnotation.RebalanceRecommended] ?? '') !== '') return true;
  const replacing = a?.[ExtensionAnnotation.Replacing] ?? '';
  return replacing !== '' && a?.[ExtensionAnnotation.InterruptionDeadline] === undefined;
}

/** The counts of a list of machines, all counted for `owner` (for tests and comparisons). */
export function countMachines(machines: readonly AnyMachine[], owner: AnySet | undefined): MachineCounts {
  const counts = emptyCounts();
  for (const m of machines) apply(counts, factsOf(m, owner), 1);
  return counts;
}

function apply(counts: MachineCounts, facts: Facts, sign: 1 | -1): void {
  for (let i = 0; i < FIELDS.length; i++) {
    if ((facts & (1 << i)) !== 0) {
      const field = FIELDS[i] as Field;
      counts[field] += sign;
    }
  }
}

/**
 * What a MachineSet's spec the owner-dependent facts were computed from: selector, template and
 * the effective creation timeout (propagated to machines). Two sets with the same key give every
 * machine the same facts.
 */
export function ownerSpecKey(ms: AnySet): string {
  return JSON.stringify([
    ms.metadata.namespace,
    ms.spec?.selector,
    ms.spec?.template,
    ms.metadata.annotations?.[Annotation.EffectiveCreationTimeout],
  ]);
}

interface Tally {
  counts: MachineCounts;
  /** The owner the owner-dependent facts were computed against; undefined before the first read. */
  owner: AnySet | undefined;
  ownerKey: string | undefined;
}

interface Counted {
  uid: string;
  facts: Facts;
}

/** The part of an informer the accounting needs: the cache and its events. */
export interface MachineSource extends Lister<Machine> {
  addHandler(h: {
    onAdd?(m: DeepReadonly<Machine>): void;
    onUpdate?(old: DeepReadonly<Machine>, m: DeepReadonly<Machine>): void;
    onDelete?(m: DeepReadonly<Machine>): void;
  }): void;
}

/**
 * Per-owner machine counts (by controller UID), updated on every machine event in O(1). Orphans
 * (no controller reference) are not counted; readers list them from the controller-UID index.
 */
export class MachineAccounting {
  private readonly tallies = new Map<string, Tally>();
  private readonly counted = new Map<string, Counted>();
  /** Tally rebuilds so far (a reader's set had a spec the tally had not seen): for tests and benches. */
  rebuilds = 0;

  constructor(private readonly machines: MachineSource) {
    machines.addHandler({
      onAdd: (m) => {
        this.put(m);
      },
      onUpdate: (_old, m) => {
        this.put(m);
      },
      onDelete: (m) => {
        this.remove(objectKey(m));
      },
    });
  }

  /**
   * The counts of a MachineSet's machines, computed against the set as given. Returns a copy the
   * caller may keep.
   */
  countsOf(ms: AnySet): MachineCounts {
    const uid = ms.metadata.uid ?? '';
    if (uid === '') return emptyCounts();
    const key = ownerSpecKey(ms);
    let tally = this.tallies.get(uid);
    if (tally?.ownerKey !== key) tally = this.rebuild(uid, ms, key);
    return { ...tally.counts };
  }

  /**
   * Counts that do not depend on the owner's spec (all, terminating, available, marked, voluntary) for any
   * controller UID, without a rebuild.
   */
  ownerlessCountsOf(uid: string): OwnerCounts {
    const c = this.tallies.get(uid)?.counts;
    return {
      all: c?.all ?? 0,
      terminating: c?.terminating ?? 0,
      available: c?.available ?? 0,
      marked: c?.marked ?? 0,
      voluntary: c?.voluntary ?? 0,
    };
  }

  /** Machines without a controller reference in a namespace (candidates for adoption). */
  orphans(namespace: string | undefined): DeepReadonly<Machine>[] {
    return this.machines
      .byIndex(CONTROLLER_UID_INDEX, NO_CONTROLLER)
      .filter((m) => m.metadata.namespace === namespace);
  }

  private tally(uid: string): Tally {
    let t = this.tallies.get(uid);
    if (t === undefined) {
      t = { counts: emptyCounts(), owner: undefined, ownerKey: undefined };
      this.tallies.set(uid, t);
    }
    return t;
  }

  private put(m: DeepReadonly<Machine>): void {
    const key = objectKey(m);
    this.remove(key);
    const uid = controllerRefOf(m)?.uid ?? NO_CONTROLLER;
    if (uid === NO_CONTROLLER) return;
    const t = this.tally(uid);
    const facts = factsOf(m, t.owner);
    apply(t.counts, facts, 1);
    this.counted.set(key, { uid, facts });
  }

  private remove(key: string): void {
    const was = this.counted.get(key);
    if (was === undefined) return;
    this.counted.delete(key);
    const t = this.tallies.get(was.uid);
    if (t === undefined) return;
    apply(t.counts, was.facts, -1);
    if (t.counts.all === 0 && t.owner === undefined) this.tallies.delete(was.uid);
  }

  private rebuild(uid: string, ms: AnySet, key: string): Tally {
    this.rebuilds++;
    const t = this.tally(uid);
    t.owner = ms;
    t.ownerKey = key;
    t.counts = emptyCounts();
    for (const m of this.machines.byIndex(CONTROLLER_UID_INDEX, uid)) {
      const k = objectKey(m);
      const facts = factsOf(m, ms);
      const was = this.counted.get(k);
      if (was !== undefined && was.uid !== uid) {
        // Not possible while the index and the events agree; keep the other tally right anyway.
        const other = this.tallies.get(was.uid);
        if (other !== undefined) apply(other.counts, was.facts, -1);
      }
      apply(t.counts, facts, 1);
      this.counted.set(k, { uid, facts });
    }
    return t;
  }

  /** Forgets the owner a tally was computed against (its set is gone); counts stay. */
  forgetOwner(uid: string): void {
    const t = this.tallies.get(uid);
    if (t === undefined) return;
    t.owner = undefined;
    t.ownerKey = undefined;
    if (t.counts.all === 0) this.tallies.delete(uid);
  }
}
