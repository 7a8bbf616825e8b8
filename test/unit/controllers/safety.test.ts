import { expect } from 'chai';

import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type MachineDeployment,
  type MachineSet,
} from '../../../lib/api/types.js';
import { countMachines } from '../../../lib/controllers/accounting.js';
import { OvershootSafetyController } from '../../../lib/controllers/safety/overshoot.js';
import {
  LoweredLimits,
  decideOvershoot,
  overshootCount,
  overshootThresholds,
  type OvershootAction,
} from '../../../lib/controllers/safety/overshoot-plan.js';
import { ConflictError, UnavailableError } from '../../../lib/kube/errors.js';
import { nullLogger } from '../../../lib/observability/logger.js';
import { NS, machine, machineDeployment, machineSet } from './builders.js';
import { ControllerTestEnv } from './env.js';
import { eventually } from '../helpers/eventually.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };

function ownedBy(ms: MachineSet, mcd: MachineDeployment): MachineSet {
  ms.metadata.ownerReferences = [
    {
      apiVersion: API_VERSION,
      kind: 'MachineDeployment',
      name: mcd.metadata.name ?? '',
      uid: mcd.metadata.uid ?? '',
      controller: true,
    },
  ];
  return ms;
}

describe('overshoot thresholds', () => {
  const cases: {
    name: string;
    ms: number;
    mcd?: { replicas: number; surge?: number | string };
    want: [number, number];
  }[] = [
    { name: 'standalone set: 2 x replicas + safetyUp', ms: 3, want: [8, 7] },
    { name: 'standalone set with 0 replicas', ms: 0, want: [2, 1] },
    {
      name: 'set of a deployment: replicas + surge + safetyUp',
      ms: 3,
      mcd: { replicas: 5, surge: 2 },
      want: [9, 8],
    },
    { name: 'percentage surge rounds up', ms: 1, mcd: { replicas: 10, surge: '25%' }, want: [15, 14] },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      let mcd: MachineDeployment | undefined;
      if (tc.mcd !== undefined) {
        mcd = machineDeployment('d', tc.mcd.replicas);
        if (mcd.spec?.strategy?.rollingUpdate !== undefined)
          mcd.spec.strategy.rollingUpdate.maxSurge = tc.mcd.surge ?? 0;
      }
      const t = overshootThresholds(machineSet('s', tc.ms), mcd, 2, 1);
      expect([t.high, t.low]).to.deep.equal(tc.want);
    });
  }
});

describe('overshoot decision', () => {
  // high 5, low 4
  const cases: {
    name: string;
    count: number;
    labelled?: boolean;
    conditioned?: boolean;
    want: OvershootAction;
  }[] = [
    { name: 'below high: nothing', count: 4, want: 'none' },
    { name: 'at high: freeze', count: 5, want: 'freeze' },
    { name: 'at high with only the label: complete the freeze', count: 5, labelled: true, want: 'freeze' },
    {
      name: 'frozen and still above low: stays frozen',
      count: 5,
      labelled: true,
      conditioned: true,
      want: 'frozen',
    },
    {
      name: 'label without condition above low: complete the freeze',
      count: 5,
      labelled: true,
      want: 'freeze',
    },
    { name: 'frozen, back at low: unfreeze', count: 4, labelled: true, conditioned: true, want: 'unfreeze' },
    { name: 'only a stale condition, at low: unfreeze', count: 3, conditioned: true, want: 'unfreeze' },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(
        decideOvershoot({
          count: tc.count,
          high: 5,
          low: 4,
          labelled: tc.labelled ?? false,
          conditioned: tc.conditioned ?? false,
        }),
      ).to.equal(tc.want);
    });
  }
});

describe('overshoot count', () => {
  it('counts only the machines that stay: not being deleted, not marked by the autoscaler, with the template labels', () => {
    const ms = machineSet('ms', 1);
    const owned = [
      machine('stays', { owner: ms }),
      machine('leaving', { owner: ms, deleting: true }),
      machine('marked', { owner: ms }),
      machine('relabelled', { owner: ms, labels: { app: 'other' } }),
    ];
    expect(overshootCount(ms, owned, new Set(['marked']))).to.equal(1);
  });

  it('counts a machine replaced for a voluntary reason beside its replacement, but not an interrupted one (one for one)', () => {
    const ms = machineSet('ms', 2);
    const owned = [
      machine('expired', { owner: ms, annotations: { 'machine.mcm-ts.io/replacing': 'expired' } }),
      machine('rebalanced', {
        owner: ms,
        annotations: { 'machine.mcm-ts.io/replacing': 'rebalance-recommended' },
      }),
      machine('interrupted', {
        owner: ms,
        annotations: {
          'machine.mcm-ts.io/replacing': 'interrupted',
          'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:01:30Z',
        },
      }),
      machine('new-1', { owner: ms }),
      machine('new-2', { owner: ms }),
    ];
    expect(overshootCount(ms, owned, new Set())).to.equal(4);
    expect(countMachines(owned, ms).stayingTemplated, 'the accounting agrees').to.equal(4);
  });
});

describe('lowered overshoot limits', () => {
  const PERIOD = 60_000;
  type Step =
    | { lowered: [before: number, after: number]; at: number }
    | { start: number; at: number }
    | { check: [count: number, limit: number]; at: number; want: { high: number; recheckAt?: number } };
  // A deployment of 600 with maxSurge 1 hibernated: its sets' limit falls from 603 to 3.
  const cases: { name: string; safetyUp?: number; steps: Step[] }[] = [
    {
      name: 'holds the former limit until the set is checked, then the fewest machines seen plus the margin',
      steps: [
        { lowered: [603, 3], at: 0 },
        { check: [600, 3], at: 0, want: { high: 603, recheckAt: PERIOD } },
        { check: [550, 3], at: 30_000, want: { high: 602, recheckAt: 90_000 } },
        { check: [500, 3], at: 80_000, want: { high: 552, recheckAt: 140_000 } },
      ],
    },
    {
      name: 'a count rising by less than the margin is held, by the margin it meets the held limit',
      steps: [
        { lowered: [603, 3], at: 0 },
        { check: [450, 3], at: 0, want: { high: 603, recheckAt: PERIOD } },
        { check: [451, 3], at: 10_000, want: { high: 452, recheckAt: PERIOD } },
        { check: [452, 3], at: 15_000, want: { high: 452, recheckAt: PERIOD } },
      ],
    },
    {
      name: 'machines beyond even the former limit meet it at once',
      steps: [
        { lowered: [603, 3], at: 0 },
        { check: [603, 3], at: 0, want: { high: 603, recheckAt: PERIOD } },
      ],
    },
    {
      name: 'ends when the count is under the new limit',
      steps: [
        { lowered: [603, 3], at: 0 },
        { check: [100, 3], at: 0, want: { high: 603, recheckAt: PERIOD } },
        { check: [2, 3], at: 10_000, want: { high: 3 } },
        { check: [50, 3], at: 20_000, want: { high: 3 } },
      ],
    },
    {
      name: 'ends when the count has not fallen for a whole period',
      steps: [
        { lowered: [603, 3], at: 0 },
        { check: [500, 3], at: 0, want: { high: 603, recheckAt: PERIOD } },
        { check: [500, 3], at: 59_999, want: { high: 502, recheckAt: PERIOD } },
        { check: [500, 3], at: PERIOD, want: { high: 3 } },
      ],
    },
    {
      name: 'ignores a raised limit, and a limit raised above the held one wins',
      steps: [
        { lowered: [4, 7], at: 0 },
        { check: [6, 7], at: 1, want: { high: 7 } },
        { lowered: [7, 4], at: 0 },
        { check: [10, 9], at: 1, want: { high: 9, recheckAt: PERIOD } },
      ],
    },
    {
      name: 'a second scale-down keeps what the first one held, with a period from the second one on',
      steps: [
        { lowered: [603, 303], at: 0 },
        { check: [500, 303], at: 10_000, want: { high: 603, recheckAt: 70_000 } },
        { lowered: [303, 3], at: 20_000 },
        { check: [500, 3], at: 20_000, want: { high: 502, recheckAt: 80_000 } },
      ],
    },
    {
      name: 'at start, a set is held at the machines its status reported plus the margin',
      steps: [
        { start: 600, at: 0 },
        { check: [600, 3], at: 0, want: { high: 602, recheckAt: PERIOD } },
        { check: [550, 3], at: 30_000, want: { high: 602, recheckAt: 90_000 } },
        { check: [550, 3], at: 90_000, want: { high: 3 } },
      ],
    },
    {
      name: 'at start, a set whose status reported fewer machines than its limit is judged by the limit',
      steps: [
        { start: 3, at: 0 },
        { check: [3, 5], at: 0, want: { high: 5 } },
      ],
    },
    {
      name: 'with a margin of 0, a count that stays is not a rise',
      safetyUp: 0,
      steps: [
        { lowered: [10, 0], at: 0 },
        { check: [5, 0], at: 0, want: { high: 10, recheckAt: PERIOD } },
        { check: [5, 0], at: 1, want: { high: 6, recheckAt: PERIOD } },
      ],
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      const limits = new LoweredLimits({ safetyUp: tc.safetyUp ?? 2, periodMs: PERIOD });
      for (const [i, step] of tc.steps.entries()) {
        if ('lowered' in step) limits.lowered('ns/ms', ...step.lowered, step.at);
        else if ('start' in step) limits.heldAtStart('ns/ms', step.start, step.at);
        else expect(limits.check('ns/ms', ...step.check, step.at), `step ${i}`).to.deep.equal(step.want);
      }
    });
  }

  it('keeps sets apart and forgets a deleted one', () => {
    const limits = new LoweredLimits({ safetyUp: 2, periodMs: PERIOD });
    limits.lowered('ns/a', 603, 3, 0);
    expect(limits.check('ns/b', 500, 3, 0)).to.deep.equal({ high: 3 });
    limits.forget('ns/a');
    expect(limits.check('ns/a', 500, 3, 0)).to.deep.equal({ high: 3 });
  });
});

describe('OvershootSafetyController', () => {
  let env: ControllerTestEnv;
  let safety: OvershootSafetyController;

  beforeEach(() => {
    env = new ControllerTestEnv();
  });
  afterEach(async () => {
    await env.stop();
  });

  async function start(): Promise<void> {
    safety = new OvershootSafetyController(env.ctx);
    await env.start();
    env.api.clearActions();
  }

  /** What `kubectl scale` does: a new spec.replicas, seen by the informers. */
  async function scaleDeployment(name: string, replicas: number): Promise<void> {
    const live = env.api.peek<MachineDeployment>(MachineDeploymentResource, name, NS);
    if (live?.spec === undefined) throw new Error(`no deployment ${name}`);
    live.spec.replicas = replicas;
    await env.api.update(MachineDeploymentResource, live);
    await env.settle();
  }

  it('freezes a set (label, condition, event) and its deployment when its machines reach the high threshold', async () => {
    const mcd = machineDeployment('d', 2); // maxSurge 1 -> high = 2 + 1 + 2 = 5
    const ms = ownedBy(machineSet('ms', 2), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 5; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    const gotMs = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(gotMs?.metadata.labels?.freeze).to.equal('True');
    expect(gotMs?.status?.machineSetCondition?.[0]).to.deep.include({
      type: 'Frozen',
      status: 'True',
      reason: 'OverShootingReplicaCount',
    });
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal('True');
    expect(gotMcd?.status?.conditions?.[0]).to.deep.include({
      type: 'Frozen',
      reason: 'OverShootingReplicaCount',
    });
    expect(env.recorder.reasons()).to.deep.equal(['FrozeMachineSet']);
  });

  it('labels first when freezing: a failed condition write leaves the set frozen, and the next pass completes the freeze', async () => {
    const mcd = machineDeployment('d', 2); // high = 5
    const ms = ownedBy(machineSet('ms', 2), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 5; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    env.api.react((a) =>
      a.verb === 'patch' && a.subresource === 'status' && a.resource.startsWith('machinesets')
        ? new UnavailableError('etcd leader changed', 503, 'ServiceUnavailable')
        : undefined,
    );
    let failure: unknown;
    try {
      await safety.reconcileSet(`${NS}/ms`, rctx);
    } catch (err) {
      failure = err;
    }
    expect(failure, 'the failed write reaches the work queue').to.be.instanceOf(UnavailableError);
    let got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(got?.metadata.labels?.freeze, 'the label that stops creation is on').to.equal('True');
    expect(got?.status?.machineSetCondition).to.equal(undefined);

    env.api.clearReactors();
    await env.settle();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(got?.status?.machineSetCondition?.[0]).to.deep.include({ type: 'Frozen', status: 'True' });
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal('True');
    expect(gotMcd?.status?.conditions?.[0]).to.deep.include({ type: 'Frozen' });
    expect(env.recorder.reasons(), 'one freeze, one event').to.deep.equal(['FrozeMachineSet']);
  });

  it('completes a deployment freeze that failed after its set was frozen', async () => {
    const mcd = machineDeployment('d', 2); // high = 5
    const ms = ownedBy(machineSet('ms', 2), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 5; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    env.api.react((a) =>
      a.verb === 'patch' && a.resource.startsWith('machinedeployments')
        ? new UnavailableError('connection reset', 0, 'ServiceUnavailable')
        : undefined,
    );
    await safety.reconcileSet(`${NS}/ms`, rctx).then(
      () => expect.fail('the deployment write failed, so the reconcile must fail'),
      () => undefined,
    );
    env.api.clearReactors();
    await env.settle();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal('True');
    expect(gotMcd?.status?.conditions?.[0]).to.deep.include({
      type: 'Frozen',
      reason: 'OverShootingReplicaCount',
    });
  });

  it('freezes only on the state it counted: a set changed since the cache saw it is a conflict, nothing is written', async () => {
    const ms = machineSet('ms', 0); // standalone: high = 2
    env.seed(MachineSetResource, ms);
    env.seed(MachineResource, machine('a', { owner: ms }), machine('b', { owner: ms }));
    await start();
    env.api.holdWatches();
    await env.api.scale(MachineSetResource, 'ms', NS, 5); // the cache still says 0 replicas
    env.api.clearActions();
    let failure: unknown;
    try {
      await safety.reconcileSet(`${NS}/ms`, rctx);
    } catch (err) {
      failure = err;
    }
    expect(failure).to.be.instanceOf(ConflictError);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.metadata.labels?.freeze).to.equal(
      undefined,
    );
    expect(env.recorder.reasons()).to.deep.equal([]);
    env.api.releaseWatches();
  });

  it('does not freeze below the threshold and does not count terminating machines', async () => {
    const ms = machineSet('ms', 1); // standalone: high = 4
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 3; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    for (let i = 0; i < 5; i++) env.seed(MachineResource, machine(`t${i}`, { owner: ms, deleting: true }));
    await start();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    expect(env.api.writes()).to.deep.equal([]);
  });

  it('unfreezes the set automatically once the count falls to the low threshold, then the deployment', async () => {
    const mcd = machineDeployment('d', 2);
    mcd.metadata.labels = { freeze: 'True' };
    mcd.status = { conditions: [{ type: 'Frozen', status: 'True', reason: 'OverShootingReplicaCount' }] };
    const ms = ownedBy(machineSet('ms', 2, { labels: { freeze: 'True' } }), mcd);
    ms.status = {
      machineSetCondition: [{ type: 'Frozen', status: 'True', reason: 'OverShootingReplicaCount' }],
    };
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 4; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms })); // low = 4
    await start();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    const gotMs = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(gotMs?.metadata.labels?.freeze).to.equal(undefined);
    expect(gotMs?.status?.machineSetCondition).to.equal(undefined);
    expect(env.recorder.reasons()).to.deep.equal(['UnfrozeMachineSet']);
    await env.settle();
    await safety.reconcileDeployment(`${NS}/d`, rctx);
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal(undefined);
    expect(gotMcd?.status?.conditions).to.equal(undefined);
  });

  it('keeps a deployment frozen while another of its sets is frozen', async () => {
    const mcd = machineDeployment('d', 2);
    mcd.metadata.labels = { freeze: 'True' };
    mcd.status = { conditions: [{ type: 'Frozen', status: 'True', reason: 'OverShootingReplicaCount' }] };
    const frozen = ownedBy(machineSet('a', 2, { labels: { freeze: 'True' } }), mcd);
    const fine = ownedBy(machineSet('b', 2), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, frozen, fine);
    await start();
    await safety.reconcileDeployment(`${NS}/d`, rctx);
    expect(env.api.writes()).to.deep.equal([]);
  });

  it('freezes a deployment whose set is frozen but which itself is not (state sync)', async () => {
    const mcd = machineDeployment('d', 2);
    const frozen = ownedBy(machineSet('a', 2, { labels: { freeze: 'True' } }), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, frozen);
    await start();
    await safety.reconcileDeployment(`${NS}/d`, rctx);
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal('True');
    expect(gotMcd?.status?.conditions?.[0]).to.deep.include({
      type: 'Frozen',
      reason: 'MachineDeploymentStateSync',
    });
  });

  it('unfreezes on the manual unfreeze annotation, and a deployment passes it on to its sets', async () => {
    const mcd = machineDeployment('d', 2);
    mcd.metadata.labels = { freeze: 'True' };
    mcd.metadata.annotations = { 'safety.machine.sapcloud.io/unfreeze': 'True' };
    const ms = ownedBy(machineSet('ms', 2, { labels: { freeze: 'True' } }), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    await start();
    await safety.reconcileDeployment(`${NS}/d`, rctx);
    const gotMcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(gotMcd?.metadata.labels?.freeze).to.equal(undefined);
    expect(gotMcd?.metadata.annotations?.['safety.machine.sapcloud.io/unfreeze']).to.equal(undefined);
    expect(
      env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.metadata.annotations?.[
        'safety.machine.sapcloud.io/unfreeze'
      ],
    ).to.equal('True');
    await env.settle();
    await safety.reconcileSet(`${NS}/ms`, rctx);
    const gotMs = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(gotMs?.metadata.labels?.freeze).to.equal(undefined);
    expect(gotMs?.metadata.annotations?.['safety.machine.sapcloud.io/unfreeze']).to.equal(undefined);
  });

  it('does not freeze a set whose deployment the autoscaler scaled down by the machines it marked', async () => {
    // 4 machines, replicas 4 -> 1 with three machines named: high = 1 + 1 + 2 = 4.
    const mcd = machineDeployment('d', 1);
    const ms = ownedBy(machineSet('ms', 4), mcd);
    mcd.metadata.annotations = {
      'node.machine.sapcloud.io/trigger-deletion-by-mcm':
        'm1~2026-11-21T09:59:00Z,m2~2026-11-21T09:59:00Z,m3~2026-11-21T09:59:00Z',
    };
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 4; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    const result = await safety.reconcileSet(`${NS}/ms`, rctx);
    expect(env.api.writes(), 'no freeze').to.deep.equal([]);
    expect(env.recorder.reasons()).to.deep.equal([]);
    expect(result, 'nothing to look at again').to.deep.equal({});
  });

  it('a plain scale-down in which no machine goes for a period is judged by the new limit: the machines still there overshoot', async () => {
    const mcd = machineDeployment('d', 4); // high 4 + 1 + 2 = 7
    const ms = ownedBy(machineSet('ms', 4), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 4; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    // kubectl scale --replicas=1: high 4, and the 4 machines are not deleted yet.
    await scaleDeployment('d', 1);
    env.api.clearActions();
    const held = await safety.reconcileSet(`${NS}/ms`, rctx);
    expect(env.api.writes(), 'no freeze while the scale-down may run').to.deep.equal([]);
    expect(held.requeueAfter, 'looked at again when the hold could end').to.equal(60_000);
    // Nothing deleted them within the period: now they are an overshoot.
    await env.clock.advance(60_000);
    await safety.reconcileSet(`${NS}/ms`, rctx);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.metadata.labels?.freeze).to.equal('True');
    expect(env.recorder.reasons()).to.deep.equal(['FrozeMachineSet']);
  });

  it('freezes machines beyond even the former limit at once', async () => {
    const mcd = machineDeployment('d', 4);
    const ms = ownedBy(machineSet('ms', 4), mcd);
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 7; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    await scaleDeployment('d', 1);
    await safety.reconcileSet(`${NS}/ms`, rctx);
    expect(env.recorder.reasons(), '7 machines >= 7, the former limit').to.deep.equal(['FrozeMachineSet']);
  });

  it('after a start, a set is held at the machines its status reported until none has gone for a period', async () => {
    const mcd = machineDeployment('d', 1); // high 4
    const ms = ownedBy(machineSet('ms', 1), mcd);
    ms.status = { replicas: 4 };
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    for (let i = 0; i < 4; i++) env.seed(MachineResource, machine(`m${i}`, { owner: ms }));
    await start();
    safety.start();
    try {
      await safety.reconcileSet(`${NS}/ms`, rctx);
      expect(env.recorder.reasons(), 'reported before the start').to.deep.equal([]);
      await env.clock.advance(60_000);
      await eventually(
        () => env.recorder.reasons().includes('FrozeMachineSet'),
        'frozen once no machine went for a period',
      );
    } finally {
      await safety.stop();
    }
  });

  it('checks every set and deployment each overshooting period', async () => {
    const ms = machineSet('ms', 0); // high = 2
    env.seed(MachineSetResource, ms);
    env.seed(MachineResource, machine('a', { owner: ms }), machine('b', { owner: ms }));
    await start();
    // Take the keys the initial list queued, so that only the periodic check can find the set.
    for (const c of [safety.sets, safety.deployments]) {
      while (c.queue.len() > 0) {
        const next = await c.queue.get();
        if (!next.shutdown) c.queue.done(next.item);
      }
    }
    safety.start();
    try {
      await env.clock.advance(59_000);
      await env.settle();
      expect(env.api.writes(), 'nothing before the period is over').to.deep.equal([]);
      await env.clock.advance(1_000);
      await eventually(
        () => env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.metadata.labels?.freeze === 'True',
        'the periodic check froze the set',
      );
    } finally {
      await safety.stop();
    }
  });
});
