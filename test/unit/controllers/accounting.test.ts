import { expect } from 'chai';

import {
  Annotation,
  Label,
  LabelValue,
  MachinePhase,
  MachineState,
  PreserveValue,
} from '../../../lib/api/constants.js';
import type { Machine, MachineSet } from '../../../lib/api/types.js';
import {
  MachineAccounting,
  countMachines,
  type MachineCounts,
  type MachineSource,
} from '../../../lib/controllers/accounting.js';
import { planReplicas, planReplicasFromCounts } from '../../../lib/controllers/machineset/replicas.js';
import { calculateStatus, calculateStatusFromCounts } from '../../../lib/controllers/machineset/status.js';
import { controllerRefOf } from '../../../lib/controllers/machines.js';
import { planClaim } from '../../../lib/controllers/ownership.js';
import {
  CONTROLLER_UID_INDEX,
  NO_CONTROLLER,
  objectKey,
  type DeepReadonly,
  type InformerHandlers,
} from '../../../lib/kube/informer.js';

const NS = 'default';
const NOW = Date.UTC(2026, 10, 26, 8, 0, 0);

/** A deterministic random source (mulberry32), so a failing case can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A machine cache that delivers events only when told to: the test decides what the handlers
 * see and in which order, independently of what the cache holds (as with a relist, whose delete
 * carries the last cached state, or a delete event carrying a newer state than the cache).
 */
class ScriptedSource implements MachineSource {
  readonly store = new Map<string, DeepReadonly<Machine>>();
  private readonly handlers: InformerHandlers<Machine>[] = [];

  addHandler(h: InformerHandlers<Machine>): void {
    this.handlers.push(h);
  }
  get(namespace: string | undefined, name: string): DeepReadonly<Machine> | undefined {
    return this.store.get(`${namespace ?? ''}/${name}`);
  }
  getByKey(key: string): DeepReadonly<Machine> | undefined {
    return this.store.get(key);
  }
  list(): DeepReadonly<Machine>[] {
    return [...this.store.values()];
  }
  someByIndex(index: string, value: string, pred: (m: DeepReadonly<Machine>) => boolean): boolean {
    return this.byIndex(index, value).some(pred);
  }
  byIndex(index: string, value: string): DeepReadonly<Machine>[] {
    if (index !== CONTROLLER_UID_INDEX) throw new Error(`no index ${index}`);
    return this.list().filter((m) => (controllerRefOf(m)?.uid ?? NO_CONTROLLER) === value);
  }

  /** Cache and event together, as the informer does it. */
  upsert(m: Machine): void {
    const old = this.store.get(objectKey(m));
    const obj = m as DeepReadonly<Machine>;
    this.store.set(objectKey(m), obj);
    for (const h of this.handlers) {
      if (old === undefined) h.onAdd?.(obj, false);
      else h.onUpdate?.(old, obj);
    }
  }

  /** Removes from the cache and delivers `delivered` (default: the cached state) as deleted. */
  delete(key: string, delivered?: Machine, finalStateUnknown = false): void {
    const old = this.store.get(key);
    this.store.delete(key);
    const obj = delivered ?? old;
    if (obj === undefined) return;
    for (const h of this.handlers) h.onDelete?.(obj, finalStateUnknown);
  }
}

function set(name: string, uid: string, opts: { labels?: Record<string, string> } = {}): MachineSet {
  const labels = opts.labels ?? { pool: 'a' };
  return {
    apiVersion: 'machine.sapcloud.io/v1alpha1',
    kind: 'MachineSet',
    metadata: { name, namespace: NS, uid, resourceVersion: '1' },
    spec: {
      replicas: 3,
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { class: { kind: 'MachineClass', name: 'small' } } },
    },
  };
}

interface MachineShape {
  owner?: string | undefined;
  labels?: Record<string, string>;
  phase?: string;
  deleting?: boolean;
  failedOperation?: boolean;
  preservedUntil?: number;
  annotations?: Record<string, string>;
}

function machineOf(name: string, shape: MachineShape): Machine {
  const m: Machine = {
    apiVersion: 'machine.sapcloud.io/v1alpha1',
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      uid: `uid-${name}`,
      creationTimestamp: new Date(NOW - 60_000).toISOString(),
      labels: shape.labels ?? { pool: 'a' },
      annotations: shape.annotations ?? {},
    },
    spec: { class: { kind: 'MachineClass', name: 'small' } },
    status: {
      currentStatus: {
        phase: (shape.phase ?? MachinePhase.Running) as MachinePhase,
        ...(shape.preservedUntil === undefined
          ? {}
          : { preserveExpiryTime: new Date(shape.preservedUntil).toISOString() }),
      },
      ...(shape.failedOperation === true
        ? { lastOperation: { state: MachineState.Failed, description: 'broke' } }
        : {}),
    },
  };
  if (shape.owner !== undefined)
    m.metadata.ownerReferences = [
      { apiVersion: 'v1', kind: 'MachineSet', name: 'x', uid: shape.owner, controller: true },
    ];
  if (shape.deleting === true) m.metadata.deletionTimestamp = new Date(NOW).toISOString();
  return m;
}

const PHASES = [
  MachinePhase.Creating,
  MachinePhase.Pending,
  MachinePhase.Running,
  MachinePhase.Available,
  MachinePhase.Failed,
  MachinePhase.Terminating,
  MachinePhase.Unknown,
];

function randomShape(r: () => number, owners: readonly string[]): MachineShape {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T;
  const annotations: Record<string, string> = {};
  if (r() < 0.15) annotations[Annotation.MarkedForDeletionTime] = new Date(NOW - 1000).toISOString();
  if (r() < 0.15) annotations[Annotation.MachinePriority] = '1';
  if (r() < 0.1) annotations[Annotation.Preserve] = PreserveValue.AutoPreserved;
  const labels: Record<string, string> = { pool: pick(['a', 'a', 'a', 'b']) };
  if (r() < 0.1) labels[Label.UpdateResult] = LabelValue.UpdateSuccessful;
  return {
    owner: pick([...owners, undefined]),
    labels,
    phase: pick(PHASES),
    deleting: r() < 0.15,
    failedOperation: r() < 0.1,
    ...(r() < 0.1 ? { preservedUntil: NOW + (r() < 0.5 ? -1 : 1) * 60_000 } : {}),
    annotations,
  };
}

/** What the counts must be: counted from scratch over the cache. */
function expected(source: ScriptedSource, ms: MachineSet): MachineCounts {
  return countMachines(source.byIndex(CONTROLLER_UID_INDEX, ms.metadata.uid ?? ''), ms);
}

describe('machine accounting', () => {
  it('counts a set’s machines by phase, deletion, selection and marks', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    const ms = set('s', 'u1');
    source.upsert(machineOf('running', { owner: 'u1' }));
    source.upsert(machineOf('pending', { owner: 'u1', phase: MachinePhase.Pending }));
    source.upsert(machineOf('going', { owner: 'u1', deleting: true }));
    source.upsert(machineOf('other-labels', { owner: 'u1', labels: { pool: 'b' } }));
    source.upsert(
      machineOf('marked', {
        owner: 'u1',
        annotations: {
          [Annotation.MarkedForDeletionTime]: new Date(NOW).toISOString(),
          [Annotation.MachinePriority]: '1',
        },
      }),
    );
    source.upsert(machineOf('orphan', {}));
    source.upsert(machineOf('someone-else', { owner: 'u2' }));
    const c = acct.countsOf(ms);
    expect(c).to.include({
      all: 5,
      terminating: 1,
      available: 3,
      marked: 1,
      selected: 4,
      releasable: 1,
      selectedTerminating: 1,
      selectedReady: 2,
      selectedAvailable: 2,
      selectedMarkedFirst: 1,
      stayingTemplated: 3,
    });
    expect(acct.ownerlessCountsOf('u2').all).to.equal(1);
    expect(acct.orphans(NS).map((m) => m.metadata.name)).to.deep.equal(['orphan']);
  });

  it('follows updates, deletes and moves between sets without rebuilding', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    const a = set('a', 'ua');
    const b = set('b', 'ub');
    source.upsert(machineOf('m1', { owner: 'ua', phase: MachinePhase.Pending }));
    acct.countsOf(a);
    acct.countsOf(b);
    const rebuilds = acct.rebuilds;
    source.upsert(machineOf('m1', { owner: 'ua' }));
    expect(acct.countsOf(a)).to.include({ all: 1, selectedReady: 1 });
    // The controller reference moves the machine to the other set: both tallies follow.
    source.upsert(machineOf('m1', { owner: 'ub' }));
    expect(acct.countsOf(a).all).to.equal(0);
    expect(acct.countsOf(b)).to.include({ all: 1, selected: 1, selectedReady: 1 });
    // Labels leave b's selector: still b's machine, now one to release.
    source.upsert(machineOf('m1', { owner: 'ub', labels: { pool: 'b' } }));
    expect(acct.countsOf(b)).to.include({ all: 1, selected: 0, releasable: 1 });
    source.delete(`${NS}/m1`);
    expect(acct.countsOf(b)).to.deep.equal(expected(source, b));
    expect(acct.countsOf(b).all).to.equal(0);
    expect(acct.rebuilds).to.equal(rebuilds);
  });

  it('takes back exactly what it counted when a delete event carries another state than the cache', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    const ms = set('s', 'u1');
    source.upsert(machineOf('m1', { owner: 'u1', phase: MachinePhase.Pending }));
    acct.countsOf(ms);
    // The delete event is newer than the cache (an update was folded into it), and names no owner.
    source.delete(`${NS}/m1`, machineOf('m1', { phase: MachinePhase.Running, deleting: true }));
    expect(acct.countsOf(ms)).to.deep.equal(expected(source, ms));
    expect(acct.countsOf(ms).all).to.equal(0);
  });

  it('ignores deletes of machines it never saw and duplicate deletes', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    const ms = set('s', 'u1');
    source.upsert(machineOf('m1', { owner: 'u1' }));
    source.delete(`${NS}/never`, machineOf('never', { owner: 'u1' }));
    source.delete(`${NS}/m1`);
    source.delete(`${NS}/m1`, machineOf('m1', { owner: 'u1' }));
    expect(acct.countsOf(ms)).to.deep.equal(expected(source, ms));
  });

  it('counts machines seen before their set, and recounts when the set’s selector or template changes', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    source.upsert(machineOf('m1', { owner: 'u1', labels: { pool: 'a' } }));
    source.upsert(machineOf('m2', { owner: 'u1', labels: { pool: 'b' } }));
    const a = set('s', 'u1', { labels: { pool: 'a' } });
    expect(acct.countsOf(a)).to.include({ all: 2, selected: 1, releasable: 1, stayingTemplated: 1 });
    const b = set('s', 'u1', { labels: { pool: 'b' } });
    expect(acct.countsOf(b)).to.include({ all: 2, selected: 1, releasable: 1 });
    expect(acct.countsOf(b)).to.deep.equal(expected(source, b));
    const before = acct.rebuilds;
    acct.countsOf(b);
    expect(acct.rebuilds, 'same spec: no rebuild').to.equal(before);
    // After the rebuild, events are counted against the new spec.
    source.upsert(machineOf('m3', { owner: 'u1', labels: { pool: 'b' } }));
    expect(acct.countsOf(b)).to.deep.equal(expected(source, b));
  });

  it('a relist that drops a machine (final state unknown) and re-adds others keeps the counts exact', () => {
    const source = new ScriptedSource();
    const acct = new MachineAccounting(source);
    const ms = set('s', 'u1');
    for (let i = 0; i < 5; i++) source.upsert(machineOf(`m${i}`, { owner: 'u1' }));
    acct.countsOf(ms);
    source.delete(`${NS}/m0`, undefined, true);
    source.upsert(machineOf('m1', { owner: 'u1', deleting: true }));
    source.upsert(machineOf('m9', { owner: 'u1', phase: MachinePhase.Failed }));
    expect(acct.countsOf(ms)).to.deep.equal(expected(source, ms));
  });

  it('stays equal to a recount over random event sequences (adds, updates, moves, deletes, spec changes)', () => {
    for (let seed = 1; seed <= 40; seed++) {
      const r = rng(seed);
      const source = new ScriptedSource();
      const acct = new MachineAccounting(source);
      const owners = ['u1', 'u2'];
      let sets = [set('s1', 'u1'), set('s2', 'u2', { labels: { pool: 'b' } })];
      for (let step = 0; step < 300; step++) {
        const name = `m${Math.floor(r() * 25)}`;
        const key = `${NS}/${name}`;
        const x = r();
        if (x < 0.6) source.upsert(machineOf(name, randomShape(r, owners)));
        else if (x < 0.75) source.delete(key);
        else if (x < 0.85) {
          // A delete event whose object differs from what the cache held.
          if (source.store.has(key)) source.delete(key, machineOf(name, randomShape(r, owners)));
        } else if (x < 0.9) {
          const labels = { pool: r() < 0.5 ? 'a' : 'b' };
          sets = sets.map((s, i) => (i === 0 ? set('s1', 'u1', { labels }) : s));
        }
        if (r() < 0.3) {
          for (const s of sets) {
            expect(acct.countsOf(s), `seed ${seed}, step ${step}, ${s.metadata.name ?? ''}`).to.deep.equal(
              expected(source, s),
            );
          }
        }
      }
    }
  });
});

describe('MachineSet planning from counts', () => {
  /** The machines a MachineSet pass would hold after claiming (owned and selected, no adoption). */
  function claimed(machines: readonly Machine[], ms: MachineSet): Machine[] {
    const owner = {
      apiVersion: 'v1',
      kind: 'MachineSet',
      name: ms.metadata.name ?? '',
      uid: ms.metadata.uid ?? '',
      deleting: false,
    };
    return planClaim(owner, ms.spec?.selector, machines).owned;
  }

  it('gives the status and the replica plan the machine list gives, whenever it gives one', () => {
    let fromCounts = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const r = rng(seed);
      const ms = set('s', 'u1');
      (ms.spec ??= {}).replicas = Math.floor(r() * 8);
      if (r() < 0.3)
        ms.metadata.annotations = {
          [Annotation.LastDeploymentReplicaChangeByScalerTime]: new Date(NOW).toISOString(),
        };
      // Few failures and marks, so that the counts often suffice.
      const machines = Array.from({ length: Math.floor(r() * 10) }, (_, i) => {
        const shape = randomShape(r, ['u1']);
        if (r() < 0.7) {
          shape.phase = MachinePhase.Running;
          shape.failedOperation = false;
          shape.annotations = {};
        }
        shape.owner = 'u1';
        return machineOf(`m${i}`, shape);
      });
      const counts = countMachines(machines, ms);
      const owned = claimed(machines, ms);
      const status = calculateStatusFromCounts({ ms, counts, now: NOW });
      if (status !== undefined) {
        expect(status, `seed ${seed}`).to.deep.equal(calculateStatus({ ms, machines: owned, now: NOW }));
        fromCounts++;
      }
      const plan = planReplicasFromCounts(ms, counts, 100);
      if (plan !== undefined) {
        expect(plan, `seed ${seed}`).to.deep.equal(planReplicas(ms, owned, NOW, 100));
      }
    }
    expect(fromCounts, 'cases decided from counts').to.be.greaterThan(100);
  });

  it('leaves a set with a Failed machine to the machine list (its preservation depends on the time)', () => {
    const ms = set('s', 'u1');
    (ms.spec ??= {}).replicas = 2;
    const failed = machineOf('f', { owner: 'u1', phase: MachinePhase.Failed, preservedUntil: NOW + 60_000 });
    const counts = countMachines([failed, machineOf('ok', { owner: 'u1' })], ms);
    expect(calculateStatusFromCounts({ ms, counts, now: NOW })).to.equal(undefined);
    expect(planReplicasFromCounts(ms, counts, 100)).to.equal(undefined);
    expect(calculateStatus({ ms, machines: [failed], now: NOW }).preservedFailedReplicas).to.equal(1);
  });
});
