import { expect } from 'chai';

import type { MachineDeployment, MachineSet } from '../../../../lib/api/types.js';
import {
  ANNOTATIONS_NOT_COPIED,
  buildNewMachineSet,
  findNewMachineSet,
  isScalingEvent,
  maxRevision,
  newSetReplicas,
  occupied,
  planCleanup,
  planNewMachineSetSync,
  planScale,
  rolloutBounds,
  usable,
  type ScaleTarget,
  type SetState,
} from '../../../../lib/controllers/machinedeployment/sync.js';
import { deployment, ownedSet, state, withClass } from './fixtures.js';

const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';

describe('rolloutBounds resolves maxSurge/maxUnavailable with MCM rounding', () => {
  const cases: {
    name: string;
    replicas: number;
    surge: number | string;
    unavailable: number | string;
    want: [number, number];
  }[] = [
    { name: 'absolute values', replicas: 4, surge: 1, unavailable: 1, want: [1, 1] },
    { name: 'surge percentage rounds up', replicas: 10, surge: '25%', unavailable: 0, want: [3, 0] },
    { name: 'unavailable percentage rounds down', replicas: 10, surge: 0, unavailable: '25%', want: [0, 2] },
    { name: 'both zero allows one unavailable', replicas: 3, surge: '10%', unavailable: '10%', want: [1, 0] },
    {
      name: 'both resolving to zero allows one unavailable',
      replicas: 3,
      surge: 0,
      unavailable: '10%',
      want: [0, 1],
    },
    { name: 'unavailable capped at replicas', replicas: 2, surge: 0, unavailable: 5, want: [0, 2] },
    {
      name: 'zero replicas: nothing may be unavailable',
      replicas: 0,
      surge: 1,
      unavailable: 1,
      want: [1, 0],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const b = rolloutBounds(
        deployment('d', c.replicas, { maxSurge: c.surge, maxUnavailable: c.unavailable }),
      );
      expect([b.maxSurge, b.maxUnavailable]).to.deep.equal(c.want);
    });
  }

  it('Recreate neither surges nor allows unavailability; InPlaceUpdate never surges', () => {
    expect(rolloutBounds(deployment('d', 3, { strategy: { type: 'Recreate' } }))).to.deep.equal({
      maxSurge: 0,
      maxUnavailable: 0,
    });
    const inPlace = deployment('d', 3, {
      strategy: {
        type: 'InPlaceUpdate',
        inPlaceUpdate: { maxSurge: 2, maxUnavailable: 1, orchestrationType: 'Auto' },
      },
    });
    expect(rolloutBounds(inPlace)).to.deep.equal({ maxSurge: 0, maxUnavailable: 1 });
  });
});

describe('set accounting', () => {
  it('counts a set against the surge limit by the larger of spec and existing machines', () => {
    expect(
      occupied(state('a', 3, { machines: 4 })),
      'a machine still terminating after a scale-down',
    ).to.equal(4);
    expect(occupied(state('a', 3, { machines: 1 })), 'machines not created yet').to.equal(3);
  });

  it('counts a set as available only up to its spec', () => {
    expect(usable(state('a', 3, { available: 4 })), 'a requested scale-down is not counted twice').to.equal(
      3,
    );
    expect(usable(state('a', 3, { available: 1 }))).to.equal(1);
  });
});

describe('newSetReplicas (initial/next size of the new set)', () => {
  const cases: {
    name: string;
    replicas: number;
    surge: number;
    newSet: SetState;
    others: SetState[];
    want: number;
  }[] = [
    {
      name: 'first set gets all replicas',
      replicas: 3,
      surge: 1,
      newSet: state('n', 0, { machines: 0 }),
      others: [],
      want: 3,
    },
    {
      name: 'old set full: only the surge',
      replicas: 4,
      surge: 1,
      newSet: state('n', 0),
      others: [state('o', 4)],
      want: 1,
    },
    { name: 'surge 2', replicas: 4, surge: 2, newSet: state('n', 0), others: [state('o', 4)], want: 2 },
    {
      name: 'terminating old machines still count',
      replicas: 4,
      surge: 1,
      newSet: state('n', 1),
      others: [state('o', 3, { machines: 4 })],
      want: 1,
    },
    {
      name: 'never beyond replicas',
      replicas: 2,
      surge: 3,
      newSet: state('n', 1),
      others: [state('o', 0, { machines: 0 })],
      want: 2,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      expect(
        newSetReplicas({
          strategy: 'RollingUpdate',
          replicas: c.replicas,
          maxSurge: c.surge,
          newSet: c.newSet,
          allSets: [c.newSet, ...c.others],
        }),
      ).to.equal(c.want);
    });
  }

  it('Recreate sizes the new set to the replicas at once', () => {
    expect(
      newSetReplicas({
        strategy: 'Recreate',
        replicas: 5,
        maxSurge: 0,
        newSet: state('n', 0),
        allSets: [state('o', 5)],
      }),
    ).to.equal(5);
  });
});

describe('isScalingEvent', () => {
  const cases: {
    name: string;
    replicas: number;
    newSet: SetState | undefined;
    all: SetState[];
    want: boolean;
  }[] = [
    {
      name: 'no new set yet: a rollout, not scaling',
      replicas: 5,
      newSet: undefined,
      all: [state('o', 3, { desired: 3 })],
      want: false,
    },
    {
      name: 'desired annotation matches',
      replicas: 3,
      newSet: state('n', 3, { desired: 3 }),
      all: [state('n', 3, { desired: 3 })],
      want: false,
    },
    {
      name: 'desired annotation differs',
      replicas: 5,
      newSet: state('n', 3, { desired: 3 }),
      all: [state('n', 3, { desired: 3 })],
      want: true,
    },
    {
      name: 'inactive sets are ignored',
      replicas: 3,
      newSet: state('n', 3, { desired: 3 }),
      all: [state('n', 3, { desired: 3 }), state('o', 0, { desired: 7 })],
      want: false,
    },
    {
      name: 'scale from zero',
      replicas: 2,
      newSet: state('n', 0, { desired: 0 }),
      all: [state('n', 0, { desired: 0 })],
      want: true,
    },
    {
      name: 'missing annotation is not an event',
      replicas: 2,
      newSet: state('n', 3),
      all: [state('n', 3)],
      want: false,
    },
  ];
  for (const c of cases) {
    it(`${c.name} → ${c.want}`, () => {
      expect(isScalingEvent({ replicas: c.replicas, newSet: c.newSet, allSets: c.all })).to.equal(c.want);
    });
  }
});

describe('planScale (distributing a change of replicas)', () => {
  const sizes = (targets: ScaleTarget[]): Record<string, number> =>
    Object.fromEntries(targets.map((t) => [t.name, t.replicas]));
  const cases: {
    name: string;
    replicas: number;
    surge?: number;
    rolling?: boolean;
    newSet?: SetState;
    old: SetState[];
    statusReplicas?: number;
    want: Record<string, number>;
  }[] = [
    {
      name: 'single active set takes all replicas',
      replicas: 5,
      newSet: state('n', 3),
      old: [state('o', 0)],
      want: { n: 5 },
    },
    {
      name: 'no active set: the new set takes them',
      replicas: 2,
      newSet: state('n', 0),
      old: [state('o', 0, { created: 5 })],
      want: { n: 2 },
    },
    {
      name: 'no active set and no new set: the newest old set',
      replicas: 2,
      old: [state('older', 0, { created: 1 }), state('newer', 0, { created: 2 })],
      want: { newer: 2 },
    },
    {
      name: 'saturated new set: old sets to zero',
      replicas: 3,
      newSet: state('n', 3, { desired: 3 }),
      old: [state('o', 2)],
      want: { o: 0 },
    },
    {
      // allowed = 3 + 1 = 4; 8 → 4; max-replicas 8: o 6*4/8 = 3 (-3), n 2*4/8 = 1 (-1)
      name: 'scale down proportionally to the max-replicas annotation',
      replicas: 3,
      surge: 1,
      newSet: state('n', 2, { maxReplicas: 8, created: 2 }),
      old: [state('o', 6, { maxReplicas: 8, created: 1 })],
      want: { o: 3, n: 1 },
    },
    {
      // allowed = 2 + 1 = 3, total 5 → -2; fractions: a round(2*3/5)=1 → -1, b round(2*3/5)=1 → -1, c round(1*3/5)=1 → 0
      name: 'equal sizes: the older set first, rounding leftovers from the largest',
      replicas: 2,
      surge: 1,
      newSet: state('c', 1, { maxReplicas: 5, created: 3 }),
      old: [state('a', 2, { maxReplicas: 5, created: 1 }), state('b', 2, { maxReplicas: 5, created: 2 })],
      want: { a: 1, b: 1, c: 1 },
    },
    {
      // allowed 6+1 = 7, total 10 → -3; a round(5*7/10)=4 (-1), b (-1); leftover -1 from the largest (older) a
      name: 'what rounding leaves over is taken from the largest set',
      replicas: 6,
      surge: 1,
      newSet: state('b', 5, { maxReplicas: 10, created: 2 }),
      old: [state('a', 5, { maxReplicas: 10, created: 1 })],
      want: { a: 3, b: 4 },
    },
    {
      name: 'scaling to zero empties every active set',
      replicas: 0,
      surge: 1,
      newSet: state('n', 2, { created: 2 }),
      old: [state('o', 3, { created: 1 })],
      want: { o: 0, n: 0 },
    },
    {
      name: 'scale up goes to the new set only',
      replicas: 6,
      surge: 1,
      newSet: state('n', 1, { created: 2 }),
      old: [state('o', 4, { created: 1 })],
      want: { o: 4, n: 3 },
    },
    {
      name: 'scale up counts machines that still terminate',
      replicas: 6,
      surge: 1,
      newSet: state('n', 1, { created: 2 }),
      old: [state('o', 4, { created: 1, machines: 5 })],
      want: { o: 4, n: 2 },
    },
    {
      name: 'without max-replicas annotation the status replicas are the base',
      replicas: 2,
      surge: 0,
      newSet: state('n', 2, { created: 2 }),
      old: [state('o', 2, { created: 1 })],
      statusReplicas: 4,
      want: { o: 1, n: 1 },
    },
    {
      name: 'Recreate with two active sets is left alone',
      replicas: 2,
      rolling: false,
      newSet: state('n', 1),
      old: [state('o', 3)],
      want: {},
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const got = planScale({
        replicas: c.replicas,
        maxSurge: c.surge ?? 0,
        rolling: c.rolling ?? true,
        newSet: c.newSet,
        oldSets: c.old,
        statusReplicas: c.statusReplicas ?? 0,
      });
      expect(sizes(got)).to.deep.equal(c.want);
    });
  }

  it('never distributes more than replicas + maxSurge when shrinking', () => {
    for (let replicas = 0; replicas <= 8; replicas++) {
      const got = planScale({
        replicas,
        maxSurge: 2,
        rolling: true,
        newSet: state('n', 5, { maxReplicas: 12, created: 2 }),
        oldSets: [state('o', 7, { maxReplicas: 12, created: 1 })],
        statusReplicas: 12,
      });
      const total = got.reduce((n, t) => n + t.replicas, 0);
      expect(total, `replicas ${replicas}`).to.equal(replicas === 0 ? 0 : replicas + 2);
      for (const t of got) expect(t.replicas).to.be.at.least(0);
    }
  });
});

describe('planCleanup (revisionHistoryLimit)', () => {
  const mcd = deployment('d', 1);
  const old = (
    className: string,
    created: string,
    extra: Partial<{ spec: number; status: number; observed: number }> = {},
  ): MachineSet => {
    const ms = ownedSet(mcd, extra.spec ?? 0, { className, created, statusReplicas: extra.status ?? 0 });
    if (ms.status !== undefined) ms.status.observedGeneration = extra.observed ?? 1;
    return ms;
  };
  const names = (sets: MachineSet[]): string[] => sets.map((s) => s.spec?.template?.spec?.class?.name ?? '');

  it('keeps every old set without a limit', () => {
    expect(planCleanup([old('a', '2026-01-01T00:00:00Z')], undefined)).to.deep.equal([]);
  });

  it('deletes the oldest sets beyond the limit', () => {
    const sets = [
      old('c', '2026-01-03T00:00:00Z'),
      old('a', '2026-01-01T00:00:00Z'),
      old('b', '2026-01-02T00:00:00Z'),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['a', 'b']);
    expect(names(planCleanup(sets, 0))).to.deep.equal(['a', 'b', 'c']);
    expect(planCleanup(sets, 3)).to.deep.equal([]);
  });

  it('orders by revision: sets created within the same second are told apart', () => {
    const sameSecond = '2026-01-01T00:00:00Z';
    const sets = [
      ownedSet(mcd, 0, { className: 'a-newest', revision: 3, created: sameSecond, statusReplicas: 0 }),
      ownedSet(mcd, 0, { className: 'z-oldest', revision: 1, created: sameSecond, statusReplicas: 0 }),
      ownedSet(mcd, 0, { className: 'm-middle', revision: 2, created: sameSecond, statusReplicas: 0 }),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['z-oldest', 'm-middle']);
  });

  it('skips sets that still have replicas, machines, an unobserved spec or are being deleted', () => {
    const deleting = old('d', '2026-01-04T00:00:00Z');
    deleting.metadata.deletionTimestamp = '2026-01-05T00:00:00Z';
    const sets = [
      old('spec', '2026-01-01T00:00:00Z', { spec: 1 }),
      old('status', '2026-01-02T00:00:00Z', { status: 1 }),
      old('unobserved', '2026-01-03T00:00:00Z', { observed: 0 }),
      deleting,
      old('ok', '2026-01-05T00:00:00Z'),
      old('kept', '2026-01-06T00:00:00Z'),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['ok']);
  });
});

describe('new machine set identity and bookkeeping', () => {
  it('finds the oldest set whose template matches, ignoring in-place fields', () => {
    const mcd = deployment('d', 2);
    const older = ownedSet(mcd, 1, { created: '2026-01-01T00:00:00Z' });
    older.metadata.name = 'older';
    older.metadata.uid = 'uid-older';
    const newer = ownedSet(mcd, 1, { created: '2026-01-02T00:00:00Z' });
    const other = ownedSet(mcd, 1, { className: 'large' });
    const changedInPlace = structuredClone(mcd);
    if (changedInPlace.spec?.template.spec !== undefined) {
      changedInPlace.spec.template.spec.nodeTemplate = { metadata: { labels: { x: 'y' } } };
      changedInPlace.spec.template.spec.drainTimeout = '1h';
    }
    expect(findNewMachineSet(changedInPlace, [newer, other, older])?.metadata.name).to.equal('older');
    expect(findNewMachineSet(withClass(mcd, 'huge'), [newer, other, older])).to.equal(undefined);
  });

  it('builds the new set with hash label and selector, owner, revision and replica annotations', () => {
    const mcd = deployment('d', 4, {
      maxSurge: 2,
      annotations: {
        team: 'a',
        'deployment.kubernetes.io/revision': '7',
        'node.machine.sapcloud.io/trigger-deletion-by-mcm': 'm~2026-01-01T00:00:00Z',
        'kubectl.kubernetes.io/last-applied-configuration': '{}',
        [SCALER_TIME]: '2026-01-01T00:00:00Z',
      },
    });
    if (mcd.spec !== undefined) {
      mcd.spec.minReadySeconds = 30;
      mcd.spec.autoPreserveFailedMachineMax = 2;
    }
    const ms = buildNewMachineSet(mcd, { hash: '42', revision: 3, replicas: 2, maxSurge: 2 });
    expect(ms.metadata.name).to.match(/^d-[a-z0-9]{1,5}$/);
    expect(ms.metadata.labels?.['machine-template-hash']).to.equal('42');
    expect(ms.spec?.selector?.matchLabels?.['machine-template-hash']).to.equal('42');
    expect(ms.spec?.template?.metadata?.labels?.['machine-template-hash']).to.equal('42');
    expect(ms.metadata.ownerReferences?.[0]).to.deep.include({
      kind: 'MachineDeployment',
      name: 'd',
      uid: 'uid-d',
      controller: true,
    });
    expect(ms.metadata.annotations).to.deep.equal({
      team: 'a',
      [SCALER_TIME]: '2026-01-01T00:00:00Z',
      'deployment.kubernetes.io/revision': '3',
      'deployment.kubernetes.io/desired-replicas': '4',
      'deployment.kubernetes.io/max-replicas': '6',
    });
    expect(ms.spec).to.deep.include({ replicas: 2, minReadySeconds: 30, autoPreserveFailedMachineMax: 2 });
    expect(
      mcd.spec?.template.metadata?.labels?.['machine-template-hash'],
      'the deployment is not changed',
    ).to.equal(undefined);
  });

  it('does not copy the skip-listed annotations', () => {
    expect([...ANNOTATIONS_NOT_COPIED].sort()).to.deep.equal([
      'deployment.kubernetes.io/desired-replicas',
      'deployment.kubernetes.io/max-replicas',
      'deployment.kubernetes.io/revision',
      'deployment.kubernetes.io/revision-history',
      'deployment.machine.sapcloud.io/prefer-no-schedule',
      'kubectl.kubernetes.io/last-applied-configuration',
      'node.machine.sapcloud.io/trigger-deletion-by-mcm',
      'safety.machine.sapcloud.io/unfreeze',
    ]);
  });

  it('computes the highest revision, ignoring unparsable ones', () => {
    const mcd = deployment('d', 1);
    const a = ownedSet(mcd, 0, { revision: 3 });
    const b = ownedSet(mcd, 0, {
      className: 'x',
      annotations: { 'deployment.kubernetes.io/revision': 'garbage' },
    });
    const c = ownedSet(mcd, 0, { className: 'y', revision: 5 });
    expect(maxRevision([a, b, c])).to.equal(5);
    expect(maxRevision([])).to.equal(0);
  });

  describe('planNewMachineSetSync', () => {
    const base = (): { mcd: MachineDeployment; ms: MachineSet } => {
      const mcd = deployment('d', 3, {
        annotations: { team: 'a', 'deployment.kubernetes.io/revision': '2' },
      });
      return { mcd, ms: ownedSet(mcd, 3, { revision: 2, desired: 3, annotations: { team: 'a' } }) };
    };

    it('changes nothing when the set is in line', () => {
      const { mcd, ms } = base();
      expect(planNewMachineSetSync(mcd, ms, 2).changed).to.equal(false);
    });

    it('raises the revision and records the replaced one in the history (a rollback to this set)', () => {
      const { mcd, ms } = base();
      const first = planNewMachineSetSync(mcd, ms, 5);
      expect(first.changed).to.equal(true);
      expect(first.next.metadata.annotations).to.deep.include({
        'deployment.kubernetes.io/revision': '5',
        'deployment.kubernetes.io/revision-history': '2',
      });
      const second = planNewMachineSetSync(mcd, first.next, 8);
      expect(second.next.metadata.annotations?.['deployment.kubernetes.io/revision-history']).to.equal('2,5');
    });

    it('copies node template, machine configuration, class kind and set options in place', () => {
      const { mcd, ms } = base();
      const spec = mcd.spec;
      if (spec?.template.spec === undefined) throw new Error('fixture');
      spec.template.spec.nodeTemplate = { metadata: { labels: { role: 'gpu' } } };
      spec.template.spec.drainTimeout = '3m';
      spec.template.spec.class = { kind: 'OtherKind', name: 'small' };
      spec.minReadySeconds = 10;
      spec.autoPreserveFailedMachineMax = 1;
      const { changed, next } = planNewMachineSetSync(mcd, ms, 2);
      expect(changed).to.equal(true);
      expect(next.spec?.template?.spec?.nodeTemplate).to.deep.equal({
        metadata: { labels: { role: 'gpu' } },
      });
      expect(next.spec?.template?.spec?.drainTimeout).to.equal('3m');
      expect(next.spec?.template?.spec?.class).to.deep.equal({ kind: 'OtherKind', name: 'small' });
      expect(next.spec).to.deep.include({
        minReadySeconds: 10,
        autoPreserveFailedMachineMax: 1,
        replicas: 3,
      });
      expect(next.spec?.template?.metadata?.labels?.['machine-template-hash'], 'hash label stays').to.be.a(
        'string',
      );
    });

    it('copies new deployment annotations but not the skip list', () => {
      const { mcd, ms } = base();
      mcd.metadata.annotations = {
        ...(mcd.metadata.annotations ?? {}),
        extra: 'x',
        'safety.machine.sapcloud.io/unfreeze': 'True',
        'deployment.machine.sapcloud.io/prefer-no-schedule': 'True',
      };
      const { next } = planNewMachineSetSync(mcd, ms, 2);
      expect(next.metadata.annotations?.extra).to.equal('x');
      expect(next.metadata.annotations).to.not.have.property('safety.machine.sapcloud.io/unfreeze');
      expect(next.metadata.annotations).to.not.have.property(
        'deployment.machine.sapcloud.io/prefer-no-schedule',
      );
    });

    it('gives the scaler time only to a set already sized for the current replicas', () => {
      const { mcd, ms } = base();
      mcd.metadata.annotations = {
        ...(mcd.metadata.annotations ?? {}),
        [SCALER_TIME]: '2026-01-01T00:00:00Z',
      };
      expect(planNewMachineSetSync(mcd, ms, 2).next.metadata.annotations?.[SCALER_TIME]).to.equal(
        '2026-01-01T00:00:00Z',
      );
      if (mcd.spec !== undefined) mcd.spec.replicas = 2;
      expect(
        planNewMachineSetSync(mcd, ms, 2).next.metadata.annotations?.[SCALER_TIME],
        'desired-replicas still 3',
      ).to.equal(undefined);
    });
  });
});
