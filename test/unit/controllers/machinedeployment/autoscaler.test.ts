import { expect } from 'chai';

import { isRFC3339, parseTriggerDeletion } from '../../../../lib/api/triggerdeletion.js';
import type { Machine } from '../../../../lib/api/types.js';
import {
  machineMarkPatch,
  machineUnmarkPatch,
  machinesGoing,
  planTriggerDeletion,
  type SetView,
} from '../../../../lib/controllers/machinedeployment/marks.js';
import { deployment, machineOf, NOW, NOW_RFC3339, ownedSet } from './fixtures.js';

const TRIGGER = 'node.machine.sapcloud.io/trigger-deletion-by-mcm';
const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';
const T1 = '2026-11-21T09:00:00Z';
const T2 = '2026-11-21T09:30:00+01:00';

describe('trigger-deletion-by-mcm parsing', () => {
  it('reads marked, legacy and malformed entries', () => {
    expect(parseTriggerDeletion(`a~${T1}, b ,,c~yesterday,d~${T1}~x,~${T1}`)).to.deep.equal([
      { kind: 'marked', name: 'a', time: T1 },
      { kind: 'legacy', name: 'b' },
      { kind: 'invalid', raw: 'c~yesterday', why: '"yesterday" is not an RFC 3339 time' },
      { kind: 'invalid', raw: `d~${T1}~x`, why: 'expected <machine>~<RFC3339 time>' },
      { kind: 'invalid', raw: `~${T1}`, why: 'expected <machine>~<RFC3339 time>' },
    ]);
    expect(parseTriggerDeletion(undefined)).to.deep.equal([]);
  });

  it('accepts RFC 3339 times only', () => {
    expect(isRFC3339(T1)).to.equal(true);
    expect(isRFC3339(T2)).to.equal(true);
    expect(isRFC3339('2026-11-21T09:00:00.123Z')).to.equal(true);
    expect(isRFC3339('2026-11-21 09:00:00')).to.equal(false);
    expect(isRFC3339('2026-13-41T09:00:00Z')).to.equal(false);
  });
});

describe('planTriggerDeletion', () => {
  const mcd = deployment('d', 2);
  const ms = ownedSet(mcd, 3);
  const foreign = ownedSet(deployment('other', 1), 1);
  const machines = new Map<string, Machine>(
    [
      machineOf(ms, 'm1'),
      machineOf(ms, 'm2'),
      machineOf(ms, 'failed', { phase: 'Failed' }),
      machineOf(ms, 'leaving', { deleting: true }),
      machineOf(foreign, 'theirs'),
    ].map((m) => [m.metadata.name ?? '', m]),
  );
  // Enough surplus for every mark: these cases are about cleaning the list.
  const view: SetView = { uid: ms.metadata.uid ?? '', replicas: 3, active: 9 };
  const plan = (annotations: Record<string, string>) =>
    planTriggerDeletion({
      mcd: { ...mcd, metadata: { ...mcd.metadata, annotations } },
      now: NOW,
      machine: (name) => machines.get(name),
      setOf: (m) => (m.metadata.ownerReferences?.[0]?.uid === ms.metadata.uid ? view : undefined),
      sets: [view],
      markedMachines: [],
    });

  it('changes nothing without the annotation', () => {
    expect(plan({})).to.deep.include({ value: undefined, changed: false, marks: [], unmark: [] });
  });

  it('keeps entries of live machines of this deployment and marks exactly them', () => {
    const p = plan({ [TRIGGER]: `m1~${T1},m2~${T2}` });
    expect(p).to.deep.include({ value: `m1~${T1},m2~${T2}`, changed: false, setScalerTime: undefined });
    expect(p.marks).to.deep.equal([
      { name: 'm1', time: T1 },
      { name: 'm2', time: T2 },
    ]);
  });

  it('drops malformed entries and those of missing, foreign, failed or terminating machines', () => {
    const p = plan({ [TRIGGER]: `m1~${T1},bad~nope,ghost~${T1},theirs~${T1},failed~${T1},leaving~${T1}` });
    expect(p.value).to.equal(`m1~${T1}`);
    expect(p.changed).to.equal(true);
    expect(p.marks.map((m) => m.name)).to.deep.equal(['m1']);
    expect(p.dropped.map((d) => d.why)).to.deep.equal([
      '"nope" is not an RFC 3339 time',
      'machine does not exist',
      'machine does not belong to this machine deployment',
      'machine has failed and is replaced anyway',
      'machine is already being deleted',
    ]);
  });

  it('removes the annotation once no entry is left', () => {
    const p = plan({ [TRIGGER]: `leaving~${T1}` });
    expect(p).to.deep.include({ value: undefined, changed: true });
    expect(p.marks).to.deep.equal([]);
  });

  it('gives legacy entries the recorded scaler time', () => {
    const p = plan({ [TRIGGER]: 'm1', [SCALER_TIME]: T1 });
    expect(p).to.deep.include({ value: `m1~${T1}`, changed: true, setScalerTime: undefined });
    expect(p.marks).to.deep.equal([{ name: 'm1', time: T1 }]);
  });

  it('records now as scaler time for legacy entries when none is recorded', () => {
    const p = plan({ [TRIGGER]: `m1,m2~${T1}` });
    expect(p).to.deep.include({
      value: `m1~${NOW_RFC3339},m2~${T1}`,
      changed: true,
      setScalerTime: NOW_RFC3339,
    });
  });

  it('lists a machine named twice once', () => {
    expect(plan({ [TRIGGER]: `m1~${T1},m1~${T2}` }).marks).to.deep.equal([{ name: 'm1', time: T1 }]);
  });
});

describe('planTriggerDeletion: a named machine goes; without a surplus behind it the deployment replaces it', () => {
  const EARLY = '2026-11-21T09:00:00Z';
  const LATE = '2026-11-21T09:05:00Z';
  const MARK = {
    'machinepriority.machine.sapcloud.io': '1',
    'machine.sapcloud.io/marked-for-deletion-time': EARLY,
  };

  interface Case {
    name: string;
    /** The deployment's spec.replicas. */
    replicas: number;
    /** The set's spec.replicas and how many machines (not being deleted) it has in the cache. */
    set: { replicas: number; active: number };
    trigger?: string;
    /** Machines that already carry a mark. */
    carrying?: string[];
    /** Marked (and kept in the annotation). */
    marks: string[];
    /** Deleted by the deployment controller: no set would delete them. */
    replace: string[];
    unmark: string[];
  }
  const cases: Case[] = [
    {
      name: 'the decrement that came with the mark backs it: the set deletes the machine',
      replicas: 2,
      set: { replicas: 3, active: 3 },
      trigger: `m1~${EARLY}`,
      marks: ['m1'],
      replace: [],
      unmark: [],
    },
    {
      name: 'it is still the set’s once the set was scaled down',
      replicas: 2,
      set: { replicas: 2, active: 3 },
      trigger: `m1~${EARLY}`,
      carrying: ['m1'],
      marks: ['m1'],
      replace: [],
      unmark: [],
    },
    {
      name: 'replicas raised again before the set shrank (gardener #1085): the machine is replaced, not kept cordoned',
      replicas: 3,
      set: { replicas: 3, active: 3 },
      trigger: `m1~${EARLY}`,
      carrying: ['m1'],
      marks: ['m1'],
      replace: ['m1'],
      unmark: [],
    },
    {
      name: 'a scale-up still to be created leaves no surplus: the machine is replaced',
      replicas: 4,
      set: { replicas: 3, active: 3 },
      trigger: `m1~${EARLY}`,
      carrying: ['m1'],
      marks: ['m1'],
      replace: ['m1'],
      unmark: [],
    },
    {
      name: 'raised while the set is deleting: left to the set, which deletes it now',
      replicas: 3,
      set: { replicas: 2, active: 3 },
      trigger: `m1~${EARLY}`,
      carrying: ['m1'],
      marks: ['m1'],
      replace: [],
      unmark: [],
    },
    {
      name: 'fewer surplus machines than marks: the newest mark is the set’s, the older one replaced',
      replicas: 2,
      set: { replicas: 3, active: 3 },
      trigger: `m2~${LATE},m1~${EARLY}`,
      carrying: ['m1'],
      marks: ['m1', 'm2'],
      replace: ['m1'],
      unmark: [],
    },
    {
      name: 'marks of the same second: the later entry is the newer',
      replicas: 2,
      set: { replicas: 3, active: 3 },
      trigger: `m1~${EARLY},m2~${EARLY}`,
      marks: ['m1', 'm2'],
      replace: ['m1'],
      unmark: [],
    },
    {
      name: 'a machine created but not yet in the cache counts toward the surplus',
      replicas: 2,
      set: { replicas: 3, active: 2 },
      trigger: `m1~${EARLY}`,
      marks: ['m1'],
      replace: [],
      unmark: [],
    },
    {
      name: 'a machine carrying a mark whose entry is gone is unmarked and stays',
      replicas: 3,
      set: { replicas: 3, active: 3 },
      carrying: ['m3'],
      marks: [],
      replace: [],
      unmark: ['m3'],
    },
    {
      name: 'two marks, two surplus machines: both are the set’s',
      replicas: 1,
      set: { replicas: 3, active: 3 },
      trigger: `m1~${EARLY},m2~${LATE}`,
      marks: ['m1', 'm2'],
      replace: [],
      unmark: [],
    },
  ];

  for (const c of cases) {
    it(c.name, () => {
      const mcd = deployment('d', c.replicas, {
        annotations: c.trigger === undefined ? {} : { [TRIGGER]: c.trigger },
      });
      const ms = ownedSet(mcd, c.set.replicas);
      const view: SetView = { uid: ms.metadata.uid ?? '', ...c.set };
      const all = ['m1', 'm2', 'm3'].map((name) =>
        machineOf(ms, name, (c.carrying ?? []).includes(name) ? { annotations: MARK } : {}),
      );
      const p = planTriggerDeletion({
        mcd,
        now: NOW,
        machine: (name) => all.find((m) => m.metadata.name === name),
        setOf: () => view,
        sets: [view],
        markedMachines: all.filter((m) => (c.carrying ?? []).includes(m.metadata.name ?? '')),
      });
      expect(p.marks.map((m) => m.name).sort(), 'marks').to.deep.equal(c.marks);
      expect(p.replace, 'machines the deployment replaces').to.deep.equal(c.replace);
      expect(p.unmark, 'machines to unmark').to.deep.equal(c.unmark);
      const kept = (p.value ?? '').split(',').filter((e) => e !== '');
      expect(kept.map((e) => e.split('~')[0]).sort(), 'annotation').to.deep.equal(c.marks);
    });
  }

  it('the server sees the same machines going as the controller keeps marked', () => {
    const mcd = deployment('d', 3, { annotations: { [TRIGGER]: `m1~${EARLY}` } });
    const ms = ownedSet(mcd, 3);
    const all = ['m1', 'm2', 'm3'].map((name) => machineOf(ms, name));
    // Without a surplus the named machine goes too (the deployment deletes it).
    expect([...machinesGoing({ mcd, sets: [ms], machines: all, now: NOW })]).to.deep.equal(['m1']);
    const lowered = deployment('d', 2, { annotations: { [TRIGGER]: `m1~${EARLY}` } });
    expect([...machinesGoing({ mcd: lowered, sets: [ms], machines: all, now: NOW })]).to.deep.equal(['m1']);
  });
});

describe('machineMarkPatch', () => {
  const ms = ownedSet(deployment('d', 1), 1);
  it('sets priority 1 and the mark time, only when different', () => {
    expect(machineMarkPatch(machineOf(ms, 'a'), T1)).to.deep.equal({
      'machinepriority.machine.sapcloud.io': '1',
      'machine.sapcloud.io/marked-for-deletion-time': T1,
    });
    const marked = machineOf(ms, 'b', {
      annotations: {
        'machinepriority.machine.sapcloud.io': '1',
        'machine.sapcloud.io/marked-for-deletion-time': T1,
      },
    });
    expect(machineMarkPatch(marked, T1)).to.equal(undefined);
    expect(machineMarkPatch(marked, T2)).to.deep.include({
      'machine.sapcloud.io/marked-for-deletion-time': T2,
    });
  });
});

describe('machineUnmarkPatch', () => {
  const ms = ownedSet(deployment('d', 1), 1);
  it('removes the mark time and gives priority 1 back the default 3; another priority stays', () => {
    const ours = machineOf(ms, 'a', {
      annotations: {
        'machinepriority.machine.sapcloud.io': '1',
        'machine.sapcloud.io/marked-for-deletion-time': T1,
      },
    });
    expect(machineUnmarkPatch(ours)).to.deep.equal({
      'machine.sapcloud.io/marked-for-deletion-time': null,
      'machinepriority.machine.sapcloud.io': '3',
    });
    const userSet = machineOf(ms, 'b', {
      annotations: {
        'machinepriority.machine.sapcloud.io': '2',
        'machine.sapcloud.io/marked-for-deletion-time': T1,
      },
    });
    expect(machineUnmarkPatch(userSet)).to.deep.equal({
      'machine.sapcloud.io/marked-for-deletion-time': null,
    });
  });
});
