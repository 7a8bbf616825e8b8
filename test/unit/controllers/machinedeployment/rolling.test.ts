import { expect } from 'chai';

import { planRollingStep, type RollingStep } from '../../../../lib/controllers/machinedeployment/rolling.js';
import type { SetState } from '../../../../lib/controllers/machinedeployment/sets.js';
import { state } from './fixtures.js';

const changes = (step: RollingStep): Record<string, number> =>
  Object.fromEntries(step.changes.map((c) => [c.name, c.to]));

describe('planRollingStep', () => {
  const cases: {
    name: string;
    replicas: number;
    surge: number;
    unavailable: number;
    newSet: SetState;
    old: SetState[];
    direction: RollingStep['direction'];
    want: Record<string, number>;
  }[] = [
    {
      name: 'grows the new set by the surge',
      replicas: 4,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 0),
      old: [state('o', 4)],
      direction: 'up',
      want: { n: 1 },
    },
    {
      name: 'surge 2',
      replicas: 4,
      surge: 2,
      unavailable: 0,
      newSet: state('n', 0),
      old: [state('o', 4)],
      direction: 'up',
      want: { n: 2 },
    },
    {
      name: 'at the surge limit with unavailable new machines and maxUnavailable 0: waits',
      replicas: 4,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 1, { available: 0 }),
      old: [state('o', 4)],
      direction: 'none',
      want: {},
    },
    {
      name: 'new machine available: shrinks the old set by one',
      replicas: 4,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 1),
      old: [state('o', 4)],
      direction: 'down',
      want: { o: 3 },
    },
    {
      name: 'maxUnavailable 1 lets the old set shrink before new machines are available',
      replicas: 4,
      surge: 1,
      unavailable: 1,
      newSet: state('n', 1, { available: 0 }),
      old: [state('o', 4)],
      direction: 'down',
      want: { o: 3 },
    },
    {
      name: 'removes unhealthy old replicas first, within maxScaledDown',
      replicas: 4,
      surge: 1,
      unavailable: 1,
      newSet: state('n', 1, { available: 0 }),
      old: [state('o', 4, { available: 2 })],
      direction: 'down',
      want: { o: 3 },
    },
    {
      name: 'unhealthy replicas of the oldest set go first and cost no availability',
      replicas: 4,
      surge: 1,
      unavailable: 1,
      newSet: state('n', 0),
      old: [state('a', 2, { available: 0, created: 1 }), state('b', 3, { created: 2 })],
      direction: 'down',
      want: { a: 0 },
    },
    {
      name: 'machines still terminating keep the new set from growing',
      replicas: 4,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 1),
      old: [state('o', 3, { machines: 4, available: 3 })],
      direction: 'none',
      want: {},
    },
    {
      name: 'a requested scale-down is not counted twice as available',
      replicas: 4,
      surge: 1,
      unavailable: 1,
      newSet: state('n', 1),
      // spec already lowered to 3 but all 4 machines still exist and run
      old: [state('o', 3, { machines: 4, available: 4 })],
      direction: 'down',
      want: { o: 2 },
    },
    {
      name: 'shrinks the new set when it exceeds the replicas',
      replicas: 2,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 3),
      old: [state('o', 0, { machines: 0 })],
      direction: 'down',
      want: { n: 2 },
    },
    {
      name: 'nothing left to roll',
      replicas: 3,
      surge: 1,
      unavailable: 0,
      newSet: state('n', 3),
      old: [state('o', 0, { machines: 0, available: 0 })],
      direction: 'none',
      want: {},
    },
    {
      name: 'sets created within one second: the lower revision is the older',
      replicas: 2,
      surge: 0,
      unavailable: 1,
      newSet: state('n', 0, { revision: 3 }),
      old: [state('a', 1, { revision: 2 }), state('z', 1, { revision: 1 })],
      direction: 'down',
      want: { z: 0 },
    },
    {
      name: 'shrinks old sets oldest first',
      replicas: 4,
      surge: 0,
      unavailable: 2,
      newSet: state('n', 0),
      old: [state('b', 2, { created: 2 }), state('a', 2, { created: 1 })],
      direction: 'down',
      want: { a: 0 },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const step = planRollingStep({
        replicas: c.replicas,
        maxSurge: c.surge,
        maxUnavailable: c.unavailable,
        newSet: c.newSet,
        oldSets: c.old,
      });
      expect(step.direction).to.equal(c.direction);
      expect(changes(step)).to.deep.equal(c.want);
    });
  }
});

// ---------------------------------------------------------------------------------------------
// A rollout simulated against a model of the MachineSet controller and of machine lifecycles, with
// the order of events chosen at random. The surge and availability limits are checked after every
// single event, not only at the end.
// ---------------------------------------------------------------------------------------------

interface SimMachine {
  id: number;
  set: string;
  running: boolean;
  terminating: boolean;
}

/** Deterministic PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Planner = typeof planRollingStep;

interface SimResult {
  violations: string[];
  converged: boolean;
}

function simulateRollout(opts: {
  replicas: number;
  surge: number;
  unavailable: number;
  seed: number;
  planner?: Planner;
  /** Give the planner a false view of the world (to prove the checker catches its mistakes). */
  view?: (s: SetState) => SetState;
}): SimResult {
  const { replicas, surge, unavailable } = opts;
  const random = prng(opts.seed);
  const specs = new Map<string, { replicas: number; created: number }>([
    ['old', { replicas, created: 1 }],
    ['new', { replicas: 0, created: 2 }],
  ]);
  let nextId = 0;
  let machines: SimMachine[] = Array.from({ length: replicas }, () => ({
    id: nextId++,
    set: 'old',
    running: true,
    terminating: false,
  }));
  const violations: string[] = [];

  const stateOf = (name: string): SetState => {
    const spec = specs.get(name) ?? { replicas: 0, created: 0 };
    const own = machines.filter((m) => m.set === name);
    const s: SetState = {
      name,
      created: spec.created,
      replicas: spec.replicas,
      machines: own.length,
      available: own.filter((m) => m.running && !m.terminating).length,
    };
    return opts.view === undefined ? s : opts.view(s);
  };
  const check = (after: string): void => {
    const total = machines.length;
    const available = machines.filter((m) => m.running && !m.terminating).length;
    if (total > replicas + surge) violations.push(`${total} machines after ${after}`);
    if (available < replicas - unavailable) violations.push(`${available} available after ${after}`);
  };
  const deploymentStep = (): void => {
    const step = (opts.planner ?? planRollingStep)({
      replicas,
      maxSurge: surge,
      maxUnavailable: unavailable,
      newSet: stateOf('new'),
      oldSets: [stateOf('old')],
    });
    for (const c of step.changes) {
      const spec = specs.get(c.name);
      if (spec !== undefined) spec.replicas = c.to;
    }
  };
  // The MachineSet controller: create what is missing, delete surplus not-running machines first.
  const machineSetStep = (name: string): void => {
    const want = specs.get(name)?.replicas ?? 0;
    const active = machines.filter((m) => m.set === name && !m.terminating);
    for (let i = active.length; i < want; i++)
      machines.push({ id: nextId++, set: name, running: false, terminating: false });
    const surplus = active.length - want;
    if (surplus > 0) {
      const order = [...active].sort((a, b) => Number(a.running) - Number(b.running) || a.id - b.id);
      for (const m of order.slice(0, surplus)) m.terminating = true;
    }
  };
  const machineStep = (m: SimMachine): void => {
    if (m.terminating) machines = machines.filter((x) => x !== m);
    else m.running = true;
  };
  const done = (): boolean =>
    machines.length === replicas &&
    machines.every((m) => m.set === 'new' && m.running && !m.terminating) &&
    specs.get('old')?.replicas === 0;

  for (let i = 0; i < 5000 && !done(); i++) {
    const pending = machines.filter((m) => m.terminating || !m.running);
    const actions: [string, () => void][] = [
      ['deployment step', deploymentStep],
      [
        'old set sync',
        () => {
          machineSetStep('old');
        },
      ],
      [
        'new set sync',
        () => {
          machineSetStep('new');
        },
      ],
      ...pending.map((m): [string, () => void] => [
        `machine ${m.id} ${m.terminating ? 'gone' : 'running'}`,
        () => {
          machineStep(m);
        },
      ]),
    ];
    const [what, act] = actions[Math.floor(random() * actions.length)] ??
      actions[0] ?? ['none', () => undefined];
    act();
    check(what);
  }
  return { violations, converged: done() };
}

const BOUNDS: [number, number][] = [
  [1, 0],
  [0, 1],
  [1, 1],
  [2, 0],
  [2, 1],
  [0, 2],
  [3, 3],
];

describe('rolling update simulated event by event', () => {
  it('never exceeds replicas + maxSurge machines nor drops below replicas - maxUnavailable available ones, and completes', () => {
    for (let replicas = 1; replicas <= 5; replicas++) {
      for (const [surge, unavailable] of BOUNDS) {
        for (let seed = 0; seed < 12; seed++) {
          const result = simulateRollout({
            replicas,
            surge,
            unavailable: Math.min(unavailable, replicas),
            seed,
          });
          const label = `replicas ${replicas}, maxSurge ${surge}, maxUnavailable ${unavailable}, seed ${seed}`;
          expect(result.violations, label).to.deep.equal([]);
          expect(result.converged, `${label} converged`).to.equal(true);
        }
      }
    }
  });

  it('the checker catches a planner that surges one machine too many', () => {
    const overshooting: Planner = (args) => planRollingStep({ ...args, maxSurge: args.maxSurge + 1 });
    const found = [0, 1, 2, 3, 4, 5].some(
      (seed) =>
        simulateRollout({ replicas: 4, surge: 1, unavailable: 0, seed, planner: overshooting }).violations
          .length > 0,
    );
    expect(found).to.equal(true);
  });

  it('counting only spec replicas (ignoring machines still terminating) would exceed the surge limit', () => {
    const specOnly = (s: SetState): SetState => ({ ...s, machines: s.replicas });
    const found = [0, 1, 2, 3, 4, 5, 6, 7].some(
      (seed) =>
        simulateRollout({ replicas: 4, surge: 1, unavailable: 0, seed, view: specOnly }).violations.length >
        0,
    );
    expect(found).to.equal(true);
  });

  it('counting available machines of a set beyond its spec would break availability', () => {
    // A planner that believes every existing available machine stays: what MachineSet status shows
    // until the MachineSet controller has deleted the surplus.
    const statusLike: Planner = (args) => {
      const step = planRollingStep(args);
      if (step.direction !== 'down') return step;
      const available = [args.newSet, ...args.oldSets].reduce((n, s) => n + s.available, 0);
      const budget = available - (args.replicas - args.maxUnavailable);
      const old = args.oldSets[0];
      if (old === undefined || budget <= 0) return step;
      return {
        direction: 'down',
        changes: [{ name: old.name, from: old.replicas, to: Math.max(0, old.replicas - budget) }],
      };
    };
    const found = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].some((seed) =>
      simulateRollout({ replicas: 4, surge: 1, unavailable: 1, seed, planner: statusLike }).violations.some(
        (v) => v.includes('available'),
      ),
    );
    expect(found).to.equal(true);
  });
});
