import { expect } from 'chai';

import type { ScaleTarget } from '../../../../lib/controllers/machinedeployment/pass.js';
import {
  isScalingEvent,
  newSetReplicas,
  planScale,
} from '../../../../lib/controllers/machinedeployment/scale.js';
import type { SetState } from '../../../../lib/controllers/machinedeployment/sets.js';
import { state } from './fixtures.js';

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
