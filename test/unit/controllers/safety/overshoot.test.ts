// The overshoot safety during scale-downs that take many overshooting periods, driven with the
// fake clock through the running controller (informer events, its work queues, its requeues and
// its periodic check): hibernating a MachineSet of 600 machines whose machines go 50 at a time.

import { expect } from 'chai';

import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type MachineDeployment,
  type MachineSet,
} from '../../../../lib/api/types.js';
import { OvershootSafetyController } from '../../../../lib/controllers/safety/overshoot.js';
import { flushMicrotasks } from '../../../../lib/kube/clock.js';
import { eventually } from '../../helpers/eventually.js';
import { NS, machine, machineDeployment, machineSet } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

const MACHINES = 600;
const BATCH = 50;
const BATCH_EVERY_MS = 30_000;
const PERIOD_MS = 60_000; // the default --machine-safety-overshooting-period

describe('overshoot safety during a long scale-down', () => {
  let env: ControllerTestEnv;
  let safety: OvershootSafetyController;
  let ms: MachineSet;
  /** Machines not yet asked to go, in the order they go. */
  let staying: string[];
  let t0: number;

  /** A deployment of `replicas` (maxSurge 1) with one set of `replicas` and 600 machines. */
  function seed(replicas: number, status?: { replicas: number }): void {
    const mcd = machineDeployment('d', replicas);
    ms = machineSet('ms', replicas);
    ms.metadata.ownerReferences = [
      {
        apiVersion: API_VERSION,
        kind: 'MachineDeployment',
        name: 'd',
        uid: mcd.metadata.uid ?? '',
        controller: true,
      },
    ];
    if (status !== undefined) ms.status = status;
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, ms);
    staying = [];
    for (let i = 0; i < MACHINES; i++) {
      const name = `m${String(i).padStart(3, '0')}`;
      env.seed(MachineResource, machine(name, { owner: ms }));
      staying.push(name);
    }
  }

  async function start(): Promise<void> {
    safety = new OvershootSafetyController(env.ctx);
    await env.start();
    safety.start();
    t0 = env.clock.now();
    await idle();
  }

  /** The caches caught up and the controller has looked at everything it was told about. */
  async function idle(): Promise<void> {
    for (let i = 0; i < 2; i++) {
      await env.settle();
      await eventually(
        () => safety.sets.queue.len() === 0 && safety.deployments.queue.len() === 0,
        'safety queues drained',
      );
      await flushMicrotasks();
    }
  }

  /** Seconds since the controller started. */
  const at = (): number => (env.clock.now() - t0) / 1000;

  /** Hibernation: the deployment and, as its controller does, its set go to 0 replicas. */
  async function hibernate(): Promise<void> {
    await env.api.scale(MachineDeploymentResource, 'd', NS, 0);
    await env.api.scale(MachineSetResource, 'ms', NS, 0);
    await idle();
  }

  /** The set deletes the next `n` machines: they enter terminating (their finalizer keeps them). */
  async function terminate(n: number): Promise<void> {
    const names = staying.splice(0, n);
    await Promise.all(names.map((name) => env.api.delete(MachineResource, name, { namespace: NS })));
    await idle();
  }

  /** A second writer creates `n` machines under the set. */
  async function intrude(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const name = `intruder-${staying.length}-${i}`;
      await env.api.create(MachineResource, machine(name, { owner: ms }));
      staying.push(name);
    }
    await idle();
  }

  async function advance(delayMs: number): Promise<void> {
    await env.clock.advance(delayMs);
    await idle();
  }

  const frozen = (): boolean => {
    const got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    return (
      got?.metadata.labels?.freeze === 'True' ||
      (got?.status?.machineSetCondition ?? []).some((c) => c.type === 'Frozen')
    );
  };

  function expectNeverFrozen(): void {
    expect(
      frozen() || env.recorder.reasons().includes('FrozeMachineSet'),
      `frozen by ${at()} s with ${staying.length} machines staying`,
    ).to.equal(false);
    const mcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    expect(mcd?.metadata.labels?.freeze, 'deployment frozen').to.equal(undefined);
  }

  beforeEach(() => {
    env = new ControllerTestEnv({ overshootingPeriodMs: PERIOD_MS });
  });
  afterEach(async () => {
    await safety.stop();
    await env.stop();
  });

  it('hibernating 600 machines that go 50 every 30 s (6 minutes) never freezes the set', async () => {
    seed(MACHINES);
    await start();
    await hibernate();
    while (staying.length > 0) {
      await advance(BATCH_EVERY_MS);
      expectNeverFrozen();
      await terminate(BATCH);
      expectNeverFrozen();
    }
    expect(at(), 'the scale-down took six overshooting periods').to.equal(360);
    // Caught up: later periodic checks leave the set alone.
    await advance(3 * PERIOD_MS);
    expectNeverFrozen();
  });

  it('freezes a set whose machines rise by the margin (--safety-up) while it scales down slowly', async () => {
    seed(MACHINES);
    await start();
    await hibernate();
    for (let i = 0; i < 3; i++) {
      await advance(BATCH_EVERY_MS);
      await terminate(BATCH);
    }
    expect(staying.length).to.equal(450);
    await advance(10_000);
    await intrude(1);
    expectNeverFrozen(); // 451 < 450 + 2
    await advance(5_000);
    await intrude(1);
    await eventually(frozen, 'frozen as the count rose by the margin');
    expect(at(), 'at once, long before an overshooting period without progress').to.equal(105);
    const got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(got?.status?.machineSetCondition?.[0]?.message).to.contain('is 452 >= 452');
    expect(env.recorder.reasons()).to.deep.equal(['FrozeMachineSet']);
  });

  it('judges a scale-down stuck above the new limit for a whole period by the normal rule, woken by its own recheck', async () => {
    seed(MACHINES);
    await start();
    await hibernate();
    await advance(30_000);
    await terminate(BATCH);
    await advance(20_000);
    await terminate(BATCH); // the last machines to go, at 50 s
    // The periodic check runs at 60 s and 120 s: only the set's recheck can find it at 110 s.
    await advance(59_000);
    expect(at()).to.equal(109);
    expectNeverFrozen();
    await env.clock.advance(1_000);
    await eventually(frozen, 'frozen once no machine went for a period');
    expect(at()).to.equal(110);
    const got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    // The normal rule: 0 replicas + maxSurge 1 + safetyUp 2.
    expect(got?.status?.machineSetCondition?.[0]?.message).to.contain('is 500 >= 3');
  });

  it('after a restart in the middle of a scale-down, the set is never frozen while its machines keep going', async () => {
    // Hibernated before the start; the set's status still reports all its machines.
    seed(0, { replicas: MACHINES });
    await start();
    while (staying.length > 0) {
      await advance(BATCH_EVERY_MS);
      expectNeverFrozen();
      await terminate(BATCH);
      expectNeverFrozen();
    }
    await advance(3 * PERIOD_MS);
    expectNeverFrozen();
  });
});
