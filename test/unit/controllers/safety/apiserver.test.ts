import { expect } from 'chai';

import { MachineResource, type Machine } from '../../../../lib/api/types.js';
import {
  ApiServerSafety,
  HEALTH_TIMEOUT_RESET_DESCRIPTION,
  INITIAL_FREEZE_STATE,
  answered,
  planFreeze,
  type FreezeState,
  type ProbeResult,
} from '../../../../lib/controllers/safety/apiserver.js';
import {
  ConflictError,
  ForbiddenError,
  NotFoundError,
  TimeoutError,
  TooManyRequestsError,
  UnavailableError,
} from '../../../../lib/kube/errors.js';
import { machine } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

const timing = { periodMs: 60_000, timeoutMs: 30_000 };

describe('planFreeze', () => {
  const cases: {
    name: string;
    state: FreezeState;
    reachable: boolean;
    now: number;
    want: { frozen: boolean; since: number | undefined; action: string; next: number };
  }[] = [
    {
      name: 'reachable and not frozen: nothing, next probe after a period',
      state: INITIAL_FREEZE_STATE,
      reachable: true,
      now: 1000,
      want: { frozen: false, since: undefined, action: 'none', next: 60_000 },
    },
    {
      name: 'first failed probe starts the outage clock and probes every timeout/5',
      state: INITIAL_FREEZE_STATE,
      reachable: false,
      now: 1000,
      want: { frozen: false, since: 1000, action: 'none', next: 6000 },
    },
    {
      name: 'unreachable for less than the timeout: not frozen yet',
      state: { frozen: false, unreachableSince: 1000 },
      reachable: false,
      now: 30_999,
      want: { frozen: false, since: 1000, action: 'none', next: 6000 },
    },
    {
      name: 'unreachable for the timeout: freeze',
      state: { frozen: false, unreachableSince: 1000 },
      reachable: false,
      now: 31_000,
      want: { frozen: true, since: 1000, action: 'freeze', next: 6000 },
    },
    {
      name: 'frozen and still unreachable: stays frozen, keeps probing fast',
      state: { frozen: true, unreachableSince: 1000 },
      reachable: false,
      now: 500_000,
      want: { frozen: true, since: 1000, action: 'none', next: 6000 },
    },
    {
      name: 'frozen and reachable again: unfreeze',
      state: { frozen: true, unreachableSince: 1000 },
      reachable: true,
      now: 500_000,
      want: { frozen: false, since: undefined, action: 'unfreeze', next: 60_000 },
    },
    {
      name: 'a short blip that recovers before the timeout clears the outage clock',
      state: { frozen: false, unreachableSince: 1000 },
      reachable: true,
      now: 20_000,
      want: { frozen: false, since: undefined, action: 'none', next: 60_000 },
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      const d = planFreeze(tc.state, tc.reachable, tc.now, timing);
      expect({
        frozen: d.state.frozen,
        since: d.state.unreachableSince,
        action: d.action,
        next: d.nextProbeMs,
      }).to.deep.equal(tc.want);
    });
  }
});

describe('answered (probe outcome)', () => {
  const cases: [string, unknown, boolean][] = [
    ['no error', undefined, true],
    ['NotFound (the expected answer)', new NotFoundError('x', 404, 'NotFound'), true],
    ['Forbidden: the server answers', new ForbiddenError('x', 403, 'Forbidden'), true],
    ['TooManyRequests: the server answers', new TooManyRequestsError('x', 429, '', undefined, 1000), true],
    ['connection refused (no response)', new UnavailableError('x', 0, 'ServiceUnavailable'), false],
    ['503 (etcd down behind it)', new UnavailableError('x', 503, 'ServiceUnavailable'), false],
    ['timeout', new TimeoutError('x', 0, 'Timeout'), false],
    ['any other error', new Error('socket hang up'), false],
  ];
  for (const [name, err, want] of cases) {
    it(`${name} → ${want ? 'reachable' : 'unreachable'}`, () => {
      expect(answered(err)).to.equal(want);
    });
  }
});

describe('ApiServerSafety', () => {
  let env: ControllerTestEnv;
  let reachable: boolean;
  let unfrozen: number;
  let safety: ApiServerSafety;

  const gauge = async (): Promise<number> => {
    const m = await env.registry.getSingleMetric('mcm_machine_controller_frozen')?.get();
    return m?.values[0]?.value ?? -1;
  };

  beforeEach(async () => {
    env = new ControllerTestEnv();
    env.seed(
      MachineResource,
      machine('unknown-1', { phase: 'Unknown' }),
      machine('running-1', { phase: 'Running' }),
      machine('unknown-deleting', { phase: 'Unknown', deleting: true }),
    );
    reachable = true;
    unfrozen = 0;
    safety = new ApiServerSafety(env.ctx, {
      periodMs: 10_000,
      timeoutMs: 5_000,
      onUnfreeze: () => unfrozen++,
      prober: (): Promise<ProbeResult> =>
        Promise.resolve({
          control: reachable,
          target: true,
          errors: reachable ? [] : ['control: connect ECONNREFUSED'],
        }),
    });
    await env.start();
    env.api.clearActions();
    safety.start();
    await env.clock.advance(0);
  });

  afterEach(async () => {
    await safety.stop();
    await env.stop();
  });

  it('freezes only once the API server has been unreachable for the timeout, and the gauge says so', async () => {
    expect(safety.isFrozen()).to.equal(false);
    expect(await gauge()).to.equal(0);
    reachable = false;
    await env.clock.advance(10_000); // periodic probe: first failure
    expect(safety.isFrozen(), 'not frozen at the first failed probe').to.equal(false);
    await env.clock.advance(4_000);
    expect(safety.isFrozen(), 'not frozen before the timeout').to.equal(false);
    await env.clock.advance(1_000);
    expect(safety.isFrozen(), 'frozen after 5 s unreachable').to.equal(true);
    expect(await gauge()).to.equal(1);
    expect(env.api.writes(), 'nothing written while frozen').to.have.length(0);
  });

  it('on recovery resets Unknown machines to Running (not deleting or Running ones), then unfreezes and re-enqueues', async () => {
    reachable = false;
    await env.clock.advance(10_000 + 6_000);
    expect(safety.isFrozen()).to.equal(true);
    reachable = true;
    await env.clock.advance(1_000); // fast probe while frozen (timeout/5)
    expect(safety.isFrozen()).to.equal(false);
    expect(await gauge()).to.equal(0);
    expect(unfrozen).to.equal(1);
    const writes = env.api.writes();
    expect(writes.map((w) => w.name)).to.deep.equal(['unknown-1']);
    expect(writes[0]?.subresource).to.equal('status');
    const m = env.api.peek<Machine>(MachineResource, 'unknown-1', 'default');
    expect(m?.status?.currentStatus?.phase).to.equal('Running');
    expect(m?.status?.currentStatus?.lastUpdateTime, 'the health clock restarts now').to.equal(
      new Date(env.clock.now()).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    );
    expect(m?.status?.lastOperation).to.include({
      type: 'HealthCheck',
      state: 'Successful',
      description: HEALTH_TIMEOUT_RESET_DESCRIPTION,
    });
    expect(env.recorder.reasons()).to.deep.equal(['HealthTimeoutReset']);
  });

  it('stays frozen when the reset cannot be written, and finishes it on a later probe', async () => {
    reachable = false;
    await env.clock.advance(16_000);
    reachable = true;
    let failing = true;
    env.api.react((a) =>
      failing && a.verb === 'patch'
        ? new UnavailableError('etcd not ready', 503, 'ServiceUnavailable')
        : undefined,
    );
    await env.clock.advance(1_000);
    expect(safety.isFrozen(), 'frozen while Unknown machines could not be reset').to.equal(true);
    expect(unfrozen).to.equal(0);
    failing = false;
    await env.clock.advance(1_000);
    expect(safety.isFrozen()).to.equal(false);
    expect(
      env.api.peek<Machine>(MachineResource, 'unknown-1', 'default')?.status?.currentStatus?.phase,
    ).to.equal('Running');
  });

  it('a conflicting reset re-reads the machine and retries', async () => {
    reachable = false;
    await env.clock.advance(16_000);
    reachable = true;
    let conflicts = 1;
    env.api.react((a) => {
      if (a.verb === 'patch' && conflicts > 0) {
        conflicts--;
        return new ConflictError('changed', 409, 'Conflict');
      }
      return undefined;
    });
    await env.clock.advance(1_000);
    expect(safety.isFrozen()).to.equal(false);
    expect(
      env.api.peek<Machine>(MachineResource, 'unknown-1', 'default')?.status?.currentStatus?.phase,
    ).to.equal('Running');
  });
});
