import { expect } from 'chai';

import type { Machine, MachineSet } from '../../../lib/api/types.js';
import { MachineResource, MachineSetResource } from '../../../lib/api/types.js';
import { rfc3339 } from '../../../lib/controllers/conditions.js';
import { EXPECTATIONS_TTL_MS } from '../../../lib/controllers/expectations.js';
import { compareForDeletion, sortForDeletion } from '../../../lib/controllers/machines.js';
import {
  MACHINESET_COUNTS_STATUS_INTERVAL_MS,
  MachineSetController,
} from '../../../lib/controllers/machineset/controller.js';
import { planReplicas, slowStartBatch } from '../../../lib/controllers/machineset/replicas.js';
import { ConflictError, InvalidError, UnavailableError } from '../../../lib/kube/errors.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import { CapturingLogger, nullLogger } from '../../../lib/observability/logger.js';
import { eventually } from '../helpers/eventually.js';
import { NS, machine, machineSet } from './builders.js';
import { ControllerTestEnv } from './env.js';

const ctxFor = { log: nullLogger, signal: new AbortController().signal };

/** What a promise rejected with; undefined when it resolved. */
async function failureOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return err;
  }
}
const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);

describe('machine deletion order (compareForDeletion)', () => {
  const order = (ms: Machine[]): string[] =>
    [...ms].sort((a, b) => compareForDeletion(a, b, NOW)).map((m) => m.metadata.name ?? '');

  it('sortForDeletion gives the comparator’s order, ties kept in input order', () => {
    // A fixed pseudo-random fleet mixing every criterion, with many ties on each.
    let seed = 7;
    const next = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const phases = ['Running', 'Pending', 'Failed', 'Unknown', 'CrashLoopBackOff', 'Available', ''];
    const fleet = Array.from({ length: 400 }, (_, i) => {
      const annotations: Record<string, string> = {};
      if (next(3) === 0) annotations['machinepriority.machine.sapcloud.io'] = String(next(4));
      if (next(5) === 0)
        annotations['machine.sapcloud.io/marked-for-deletion-time'] = `2026-11-21T08:0${next(3)}:00Z`;
      const preserved = next(6) === 0;
      if (preserved && next(2) === 0) annotations['node.machine.sapcloud.io/preserve'] = 'auto-preserved';
      return machine(`m-${next(50)}`, {
        uid: `uid-${i}`,
        phase: phases[next(phases.length)] ?? 'Running',
        created: `2026-11-21T0${next(3)}:00:00Z`,
        annotations,
        ...(preserved ? { preserveExpiry: `2026-11-2${2 + next(2)}T00:00:00Z` } : {}),
      });
    });
    const uids = (ms: readonly Machine[]): string[] => ms.map((m) => m.metadata.uid ?? '');
    expect(uids(sortForDeletion(fleet, NOW))).to.deep.equal(
      uids([...fleet].sort((a, b) => compareForDeletion(a, b, NOW))),
    );
  });

  it('deletes non-preserved before preserved, auto-preserved before user-preserved', () => {
    expect(
      order([
        machine('user', {
          preserveExpiry: '2026-11-22T00:00:00Z',
          annotations: { 'node.machine.sapcloud.io/preserve': 'now' },
        }),
        machine('plain'),
        machine('auto', {
          preserveExpiry: '2026-11-23T00:00:00Z',
          annotations: { 'node.machine.sapcloud.io/preserve': 'auto-preserved' },
        }),
      ]),
    ).to.deep.equal(['plain', 'auto', 'user']);
  });

  it('deletes lower priority first, then marked (earliest mark first), then by phase, then oldest', () => {
    expect(
      order([
        machine('running-old', { created: '2026-11-20T00:00:00Z' }),
        machine('running-new', { created: '2026-11-21T00:00:00Z' }),
        machine('pending', { phase: 'Pending' }),
        machine('failed', { phase: 'Failed' }),
        machine('prio1', { annotations: { 'machinepriority.machine.sapcloud.io': '1' } }),
        machine('marked-late', {
          annotations: { 'machine.sapcloud.io/marked-for-deletion-time': '2026-11-21T09:05:00Z' },
        }),
        machine('marked-early', {
          annotations: { 'machine.sapcloud.io/marked-for-deletion-time': '2026-11-21T09:01:00Z' },
        }),
        machine('unknown', { phase: 'Unknown' }),
        machine('crashloop', { phase: 'CrashLoopBackOff' }),
      ]),
    ).to.deep.equal([
      'prio1',
      'marked-early',
      'marked-late',
      'failed',
      'crashloop',
      'unknown',
      'pending',
      'running-old',
      'running-new',
    ]);
  });

  it('treats an unparsable priority as the default 3', () => {
    expect(
      order([
        machine('bad', { annotations: { 'machinepriority.machine.sapcloud.io': 'x' } }),
        machine('two', { annotations: { 'machinepriority.machine.sapcloud.io': '2' } }),
      ]),
    ).to.deep.equal(['two', 'bad']);
  });
});

describe('planReplicas', () => {
  const ms = machineSet('ms', 2);

  it('creates the missing machines, bounded by the burst', () => {
    expect(planReplicas(machineSet('ms', 500), [], NOW, 100).create).to.equal(100);
  });

  it('does not count terminating machines and replaces them', () => {
    const plan = planReplicas(
      ms,
      [machine('a', { owner: ms }), machine('b', { owner: ms, deleting: true })],
      NOW,
      100,
    );
    expect(plan.create).to.equal(1);
  });

  it('creates a machine in the place of one being replaced, and deletes it once the machines that stay are available', () => {
    const replacing = { 'machine.mcm-ts.io/replacing': 'expired' };
    const a = machine('a', { owner: ms, annotations: replacing });
    const b = machine('b', { owner: ms });
    // The replacement first: 2 replicas, 1 staying.
    expect(planReplicas(ms, [a, b], NOW, 100)).to.deep.include({ create: 1, delete: [] });
    // The replacement is there but not available yet: nothing goes.
    const c = machine('c', { owner: ms, phase: 'Pending' });
    expect(planReplicas(ms, [a, b, c], NOW, 100)).to.deep.include({ create: 0, delete: [] });
    // Available: the replaced machine goes, and only it.
    const ready = machine('c', { owner: ms });
    expect(planReplicas(ms, [a, b, ready], NOW, 100).delete).to.deep.equal([
      { machine: a, reason: 'replaced' },
    ]);
    // A replaced machine that is not available itself goes as soon as its replacement exists.
    const broken = machine('a', { owner: ms, annotations: replacing, phase: 'Unknown' });
    expect(planReplicas(ms, [broken, b, c], NOW, 100).delete).to.deep.equal([
      { machine: broken, reason: 'replaced' },
    ]);
  });

  it('scales down machines being replaced first, and keeps the others within the replicas', () => {
    const replacing = { 'machine.mcm-ts.io/replacing': 'expired' };
    const one = machineSet('ms', 1);
    const a = machine('a', { owner: one, annotations: replacing, created: '2026-11-21T09:30:00Z' });
    const b = machine('b', { owner: one });
    const c = machine('c', { owner: one, phase: 'Pending' });
    // Scaled from 2 to 1 while a is replaced and its replacement c boots: a goes (b is available).
    expect(planReplicas(one, [a, b, c], NOW, 100).delete.map((d) => d.machine.metadata.name)).to.deep.equal([
      'a',
      'c',
    ]);
    expect(sortForDeletion([b, a], NOW).map((m) => m.metadata.name)).to.deep.equal(['a', 'b']);
  });

  it('an interrupted machine gets its replacement at once and goes once the replacement is available, its pods moving once', () => {
    const interrupted = {
      'machine.mcm-ts.io/replacing': 'interrupted',
      'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:01:30Z',
    };
    const deadline = Date.parse('2026-11-21T10:01:30Z');
    const lead = { interruptionDrainLeadMs: 30_000 };
    const a = machine('a', { owner: ms, annotations: interrupted });
    const b = machine('b', { owner: ms });
    // The replacement at once; the machine stays (its node serves its pods) until the deadline nears.
    expect(planReplicas(ms, [a, b], NOW, 100, lead)).to.deep.include({
      create: 1,
      delete: [],
      recheckAt: deadline - 30_000,
    });
    // Its replacement exists but is not available yet: it still stays.
    const c = machine('c', { owner: ms, phase: 'Pending' });
    expect(planReplicas(ms, [a, b, c], NOW, 100, lead)).to.deep.include({ create: 0, delete: [] });
    // The replacement is available: the machine goes now, its pods onto a node ready for them.
    const ready = machine('c', { owner: ms });
    expect(planReplicas(ms, [a, b, ready], NOW, 100, lead).delete).to.deep.equal([
      { machine: a, reason: 'interrupted' },
    ]);
    // Not available by the deadline minus the lead: it goes then, so its drain ends by the deadline.
    expect(planReplicas(ms, [a, b, c], deadline - 30_000, 100, lead).delete).to.deep.equal([
      { machine: a, reason: 'interrupted' },
    ]);
    expect(planReplicas(ms, [a, b, c], deadline - 30_001, 100, lead).delete).to.deep.equal([]);
    // An interrupted machine that is not available itself (nothing it serves) goes at once.
    const unknown = machine('a', { owner: ms, annotations: interrupted, phase: 'Unknown' });
    expect(planReplicas(ms, [unknown, b], NOW, 100, lead)).to.deep.include({
      create: 1,
      delete: [{ machine: unknown, reason: 'interrupted' }],
    });
    // Its replacement's creation fails (no capacity: CrashLoopBackOff): nothing is on its way for
    // it, so it goes now and its pods look for room elsewhere while the VM still runs.
    const stuck = machine('c', { owner: ms, phase: 'CrashLoopBackOff' });
    expect(planReplicas(ms, [a, b, stuck], NOW, 100, lead).delete).to.deep.equal([
      { machine: a, reason: 'interrupted' },
    ]);
    // A machine beside it that is not on its way up (Unknown: its node stopped reporting) stands in
    // for no replacement: the interrupted machine goes at once.
    const unhealthy = machine('c', { owner: ms, phase: 'Unknown' });
    expect(planReplicas(ms, [a, b, unhealthy], NOW, 100, lead).delete).to.deep.equal([
      { machine: a, reason: 'interrupted' },
    ]);
    // Replacing without a deadline (expiry) waits for its replacement, deadline or not.
    const expired = machine('a', { owner: ms, annotations: { 'machine.mcm-ts.io/replacing': 'expired' } });
    expect(planReplicas(ms, [expired, b, c], deadline, 100, lead).delete).to.deep.equal([]);
  });

  it('a replaced machine a pod vetoes stays through a scale-down too: the scale-down takes another', () => {
    const three = machineSet('ms', 2);
    three.metadata.annotations = { [SCALER]: '2026-11-21T09:10:00Z' };
    const vetoed = machine('a', { owner: three, annotations: { 'machine.mcm-ts.io/replacing': 'expired' } });
    const b = markedBy(three, 'b', '2026-11-21T09:05:00Z');
    const c = machine('c', { owner: three });
    const replacement = machine('r', { owner: three });
    const vetoOf = (m: Machine): string | undefined =>
      m === vetoed ? 'pod apps/job (karpenter.sh/do-not-disrupt=true)' : undefined;
    const plan = planReplicas(three, [vetoed, b, c, replacement], NOW, 100, { vetoOf });
    expect(plan.held?.map((h) => h.machine.metadata.name)).to.deep.equal(['a']);
    expect(plan.delete.map((d) => [d.machine.metadata.name, d.reason])).to.deep.equal([['b', 'scale-down']]);
  });

  it('one replacement available lets one interrupted machine go, not all of a pool interrupted at once', () => {
    const interrupted = {
      'machine.mcm-ts.io/replacing': 'interrupted',
      'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:01:30Z',
    };
    const three = machineSet('ms', 3);
    const old = ['a', 'b', 'c'].map((n) => machine(n, { owner: three, annotations: interrupted }));
    const fresh = [machine('d', { owner: three }), machine('e', { owner: three, phase: 'Pending' })];
    const plan = planReplicas(three, [...old, ...fresh], NOW, 100, { interruptionDrainLeadMs: 30_000 });
    expect(plan.create).to.equal(1);
    expect(plan.delete.map((d) => d.machine.metadata.name)).to.deep.equal(['a']);
  });

  it('an interrupted machine goes at once while the set is frozen or scale-up-disabled: no replacement is on its way', () => {
    const interrupted = {
      'machine.mcm-ts.io/replacing': 'interrupted',
      'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:01:30Z',
    };
    const frozen = machineSet('f', 2, { labels: { freeze: 'True' } });
    const a = machine('a', { owner: frozen, annotations: interrupted });
    const b = machine('b', { owner: frozen });
    expect(planReplicas(frozen, [a, b], NOW, 100, { interruptionDrainLeadMs: 30_000 })).to.deep.include({
      create: 0,
      scaleUpBlocked: 'frozen',
      delete: [{ machine: a, reason: 'interrupted' }],
    });
    // A deadline alone (a Failed machine whose VM stopped) is not a replacement: the usual rules.
    const failedOnly = machine('a', {
      owner: ms,
      phase: 'Failed',
      annotations: { 'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:00:00Z' },
    });
    expect(planReplicas(ms, [failedOnly, b], NOW, 100)).to.deep.include({
      create: 0,
      delete: [{ machine: failedOnly, reason: 'failed' }],
    });
  });

  it('does not create while frozen or scale-up-disabled', () => {
    expect(planReplicas(machineSet('f', 3, { labels: { freeze: 'True' } }), [], NOW, 100)).to.deep.include({
      create: 0,
      scaleUpBlocked: 'frozen',
    });
    expect(
      planReplicas(
        machineSet('d', 3, { labels: { 'node.machine.sapcloud.io/scale-up-disabled': 'true' } }),
        [],
        NOW,
        100,
      ),
    ).to.deep.include({ create: 0, scaleUpBlocked: 'scale-up-disabled' });
  });

  const SCALER = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';
  const markedBy = (set: MachineSet, name: string, at: string): Machine =>
    machine(name, {
      owner: set,
      annotations: {
        'machinepriority.machine.sapcloud.io': '1',
        'machine.sapcloud.io/marked-for-deletion-time': at,
      },
    });

  it('deletes machines the autoscaler marked at or before the scaler time beyond the replicas', () => {
    const set = machineSet('ms', 2);
    set.metadata.annotations = { [SCALER]: '2026-11-21T09:10:00Z' };
    const moved = (name: string): Machine =>
      machine(name, { owner: set, labels: { 'node.machine.sapcloud.io/update-result': 'successful' } });
    // The two machines moved in by an in-place update are not removable, so there is no surplus
    // among the removable ones; the marked machine still goes, leaving 3 for 2 replicas.
    const plan = planReplicas(
      set,
      [
        moved('moved-1'),
        moved('moved-2'),
        markedBy(set, 'old-mark', '2026-11-21T09:05:00Z'),
        markedBy(set, 'new-mark', '2026-11-21T09:15:00Z'),
      ],
      NOW,
      100,
    );
    expect(plan.delete.map((d) => [d.machine.metadata.name, d.reason])).to.deep.equal([
      ['old-mark', 'marked-by-autoscaler'],
    ]);
    expect(plan.create).to.equal(0);
  });

  it('never deletes a marked machine the replicas do not account for yet (three DeleteNodes in one second)', () => {
    // The fault suite's race: DeleteNodes 5→4→3→2 within 23 ms. The deployment marked m1 and m2
    // and scaled the set 5→3 (scaler time of that second); then it marked m3 with a time of the
    // same second, before the set's replicas went 3→2. Mark and scaler time have one-second
    // precision, so "mark not newer than scaler time" holds for m3 as well.
    let clock = Date.UTC(2026, 10, 21, 10, 0, 0) + 400;
    const tick = (ms: number): string => {
      clock += ms;
      return rfc3339(clock);
    };
    const set = machineSet('ms', 5);
    let machines = ['m1', 'm2', 'm3', 'm4', 'm5'].map((n) => machine(n, { owner: set }));
    const mark = (name: string, at: string): void => {
      machines = machines.map((m) => (m.metadata.name === name ? markedBy(set, name, at) : m));
    };
    const deleting = (names: string[]): void => {
      machines = machines.map((m) =>
        names.includes(m.metadata.name ?? '')
          ? { ...m, metadata: { ...m.metadata, deletionTimestamp: rfc3339(clock) } }
          : m,
      );
    };
    const names = (plan: ReturnType<typeof planReplicas<Machine>>): string[] =>
      plan.delete.map((d) => d.machine.metadata.name ?? '');

    mark('m1', tick(0));
    mark('m2', tick(10));
    set.spec = { ...set.spec, replicas: 3 };
    set.metadata.annotations = { [SCALER]: rfc3339(clock) };
    const first = planReplicas(set, machines, clock, 100);
    expect(names(first)).to.have.members(['m1', 'm2']);
    deleting(names(first));

    mark('m3', tick(13));
    expect(machines.find((m) => m.metadata.name === 'm3')?.metadata.annotations).to.deep.include({
      'machine.sapcloud.io/marked-for-deletion-time': set.metadata.annotations[SCALER],
    });
    const early = planReplicas(set, machines, clock, 100);
    expect(names(early), 'deleted before the replicas account for it').to.deep.equal([]);
    expect(early.create).to.equal(0);

    set.spec = { ...set.spec, replicas: 2 };
    const lowered = planReplicas(set, machines, clock, 100);
    expect(names(lowered)).to.deep.equal(['m3']);
    deleting(names(lowered));
    expect(planReplicas(set, machines, clock, 100)).to.deep.include({ create: 0, delete: [] });
  });

  it('deletes Failed machines unless preserved', () => {
    const plan = planReplicas(
      ms,
      [
        machine('failed', { owner: ms, phase: 'Failed' }),
        machine('kept', {
          owner: ms,
          phase: 'Failed',
          annotations: { 'node.machine.sapcloud.io/preserve': 'when-failed' },
        }),
      ],
      NOW,
      100,
    );
    expect(plan.delete.map((d) => d.machine.metadata.name)).to.deep.equal(['failed']);
  });

  it('ignores machines just transferred by an in-place update when scaling down', () => {
    const plan = planReplicas(
      machineSet('ms', 1),
      [
        machine('a'),
        machine('moved', { labels: { 'node.machine.sapcloud.io/update-result': 'successful' } }),
      ],
      NOW,
      100,
    );
    expect(plan.delete).to.have.length(0);
    expect(plan.create).to.equal(0);
  });
});

describe('slowStartBatch', () => {
  it('runs batches of 1, 2, 4 and stops after the first failing batch', async () => {
    const calls: number[] = [];
    const result = await slowStartBatch(20, (i) => {
      calls.push(i);
      return i === 4 ? Promise.reject(new Error('quota')) : Promise.resolve();
    });
    // batches: [0], [1,2], [3..6] (fails at 4) -> stop
    expect(calls.sort((a, b) => a - b)).to.deep.equal([0, 1, 2, 3, 4, 5, 6]);
    expect(result.succeeded).to.equal(6);
    expect((result.error as Error).message).to.equal('quota');
  });
});

describe('MachineSetController.reconcile', () => {
  let env: ControllerTestEnv;
  let controller: MachineSetController;

  beforeEach(() => {
    env = new ControllerTestEnv();
  });

  afterEach(async () => {
    await env.stop();
  });

  async function setup(...objs: (Machine | MachineSet)[]): Promise<void> {
    for (const o of objs) env.seed(o.kind === 'MachineSet' ? MachineSetResource : MachineResource, o);
    controller = new MachineSetController(env.ctx);
    await env.start();
    env.api.clearActions();
  }

  const owned = (name: string): Machine[] =>
    env.api.all<Machine>(MachineResource, NS).filter((m) => m.metadata.ownerReferences?.[0]?.name === name);
  /** Names of the machines deleted since the last clearActions(), in call order. */
  const deletedMachines = (): (string | undefined)[] =>
    env.api
      .writes()
      .filter((w) => w.verb === 'delete' && w.resource.startsWith('machines.'))
      .map((w) => w.name);

  it('creates missing machines from the template with a controller reference and records events', async () => {
    const ms = machineSet('ms', 3);
    await setup(ms);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    const machines = owned('ms');
    expect(machines).to.have.length(3);
    for (const m of machines) {
      expect(m.metadata.generateName).to.equal('ms-');
      expect(m.metadata.labels).to.deep.equal(ms.spec?.template?.metadata?.labels);
      expect(m.metadata.ownerReferences?.[0]).to.deep.include({
        kind: 'MachineSet',
        uid: 'uid-ms',
        controller: true,
        blockOwnerDeletion: true,
      });
      expect(m.spec?.class?.name).to.equal('small');
    }
    expect(env.recorder.reasons().filter((r) => r === 'SuccessfulCreate')).to.have.length(3);
  });

  it('creates machines without the machine finalizer unless the machine controller runs beside it', async () => {
    const ms = machineSet('ms', 1);
    await setup(ms);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(owned('ms')[0]?.metadata.finalizers).to.equal(undefined);
  });

  it('creates machines with the machine finalizer when the machine controller runs beside it', async () => {
    await env.stop();
    env = new ControllerTestEnv({ finalizeNewMachines: true });
    const ms = machineSet('ms', 2);
    await setup(ms);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    const machines = owned('ms');
    expect(machines).to.have.length(2);
    for (const m of machines)
      expect(m.metadata.finalizers).to.deep.equal(['machine.sapcloud.io/machine-controller-manager']);
  });

  it('does not create a second round while its own creations are not yet in the cache', async () => {
    const ms = machineSet('ms', 3);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup(ms);
    env.api.holdWatches(); // the cache lags behind the controller's writes
    // With a stale cache, writes to the MachineSet itself conflict (a requeue); creations must not repeat.
    const tolerant = (): Promise<unknown> =>
      controller.reconcile(`${NS}/ms`, ctxFor).catch((err: unknown) => {
        if (!(err instanceof ConflictError)) throw err;
      });
    await tolerant();
    await tolerant();
    await tolerant();
    expect(env.informers.machines.size(), 'cache still empty').to.equal(0);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(3);
    env.api.releaseWatches();
    await env.settle();
    expect(controller.expectations.satisfied(`${NS}/ms`)).to.equal(true);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(owned('ms')).to.have.length(3);
  });

  it('adds its finalizer and writes status with replica counts, selector and observed generation', async () => {
    const ms = machineSet('ms', 2);
    await setup(ms, machine('a', { owner: ms }), machine('b', { owner: ms, phase: 'Pending' }));
    await controller.reconcile(`${NS}/ms`, ctxFor);
    const got = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS);
    expect(got?.metadata.finalizers).to.include('machine.sapcloud.io/machine-controller-manager');
    expect(got?.status).to.deep.include({
      replicas: 2,
      readyReplicas: 1,
      availableReplicas: 1,
      fullyLabeledReplicas: 2,
      observedGeneration: 1,
      labelSelector: 'app=worker,pool=ms',
    });
  });

  it('writes nothing when status and machines are already as desired', async () => {
    const ms = machineSet('ms', 1);
    await setup(ms, machine('a', { owner: ms }));
    await controller.reconcile(`${NS}/ms`, ctxFor);
    await env.settle();
    env.api.clearActions();
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.writes()).to.deep.equal([]);
  });

  it('scales down in deletion order, marks the machines Terminating and records events', async () => {
    const ms = machineSet('ms', 2);
    await setup(
      ms,
      machine('old', { owner: ms, created: '2026-11-20T00:00:00Z' }),
      machine('new', { owner: ms, created: '2026-11-21T00:00:00Z' }),
      machine('pending', { owner: ms, phase: 'Pending' }),
      machine('prio', { owner: ms, annotations: { 'machinepriority.machine.sapcloud.io': '1' } }),
    );
    await controller.reconcile(`${NS}/ms`, ctxFor);
    const deleted = deletedMachines();
    expect(deleted.sort()).to.deep.equal(['pending', 'prio']);
    const statusPatches = env.api.writes().filter((w) => w.verb === 'patch' && w.subresource === 'status');
    expect(statusPatches.map((w) => w.name).sort()).to.deep.equal(['pending', 'prio']);
    expect(env.api.peek<Machine>(MachineResource, 'prio', NS)?.status?.currentStatus?.phase).to.equal(
      'Terminating',
    );
    expect(env.recorder.reasons().filter((r) => r === 'SuccessfulDelete')).to.have.length(2);
  });

  describe('marking the machines it deletes Terminating', () => {
    const MACHINE_CONTROLLER_STATUS = {
      currentStatus: { phase: 'Terminating' },
      deletionStep: 'DrainNode',
      lastOperation: { type: 'Delete', state: 'Processing', description: 'Drain of node n waits' },
    };
    const isMark = (w: { verb: string; subresource?: string | undefined; body?: unknown }): boolean =>
      w.verb === 'patch' &&
      w.subresource === 'status' &&
      (w.body as Machine).status?.lastOperation?.description === 'Deleting machine from cloud provider';

    /** Writes what the machine controller's first deletion pass writes, once, when `when` holds. */
    function machineControllerWrites(
      name: string,
      when: (a: { verb: string; name?: string | undefined; subresource?: string | undefined }) => boolean,
    ): void {
      let done = false;
      env.api.react((a) => {
        if (done || a.name !== name || !a.resource.startsWith('machines.') || !when(a)) return undefined;
        done = true;
        void env.api.patch(
          MachineResource,
          name,
          { status: MACHINE_CONTROLLER_STATUS },
          { type: 'merge', namespace: NS, subresource: 'status' },
        );
        return undefined;
      });
    }

    async function scaleDownOne(): Promise<void> {
      const ms = machineSet('ms', 1);
      await setup(
        ms,
        machine('keep', { owner: ms, created: '2026-11-21T00:00:00Z' }),
        machine('go', { owner: ms, annotations: { 'machinepriority.machine.sapcloud.io': '1' } }),
      );
    }

    it('makes the mark conditional on the resourceVersion its DELETE returned', async () => {
      await scaleDownOne();
      const seen: { rv?: string | undefined; precondition?: string | undefined }[] = [];
      env.api.react((a) => {
        if (isMark(a)) {
          seen.push({
            rv: env.api.peek<Machine>(MachineResource, 'go', NS)?.metadata.resourceVersion,
            precondition: (a.body as Machine).metadata.resourceVersion,
          });
        }
        return undefined;
      });
      await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(seen).to.have.length(1);
      expect(seen[0]?.precondition).to.be.a('string').and.equal(seen[0]?.rv);
      expect(env.api.peek<Machine>(MachineResource, 'go', NS)?.status?.currentStatus?.phase).to.equal(
        'Terminating',
      );
    });

    it('does not overwrite the deletion status the machine controller wrote after the DELETE, and takes the conflict quietly', async () => {
      await scaleDownOne();
      machineControllerWrites('go', isMark);
      const logger = new CapturingLogger();
      await controller.reconcile(`${NS}/ms`, { ...ctxFor, log: logger });
      const status = env.api.peek<Machine>(MachineResource, 'go', NS)?.status;
      expect(status?.deletionStep).to.equal('DrainNode');
      expect(status?.lastOperation?.description).to.equal('Drain of node n waits');
      expect(logger.lines.filter((l) => l.level === 'warn' || l.level === 'error')).to.deep.equal([]);
    });

    it('does not mark a machine whose DELETE shows the machine controller marked it already', async () => {
      await scaleDownOne();
      machineControllerWrites('go', (a) => a.verb === 'delete');
      await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(env.api.writes().filter(isMark)).to.deep.equal([]);
      expect(env.api.peek<Machine>(MachineResource, 'go', NS)?.status?.deletionStep).to.equal('DrainNode');
    });

    it('leaves the mark to the machine controller when it runs in the same process, and counts the machine as not ready', async () => {
      await env.stop();
      env = new ControllerTestEnv({ finalizeNewMachines: true });
      await scaleDownOne();
      await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(deletedMachines()).to.deep.equal(['go']);
      expect(env.api.writes().filter((w) => w.verb === 'patch' && w.subresource === 'status')).to.deep.equal(
        [],
      );
      await env.settle();
      // The first pass wrote the status a moment ago: a change of counts alone waits for the
      // interval (the set is requeued for its end), then goes out.
      const early = await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(early.requeueAfter).to.equal(MACHINESET_COUNTS_STATUS_INTERVAL_MS);
      expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status?.readyReplicas).to.equal(2);
      await env.clock.advance(MACHINESET_COUNTS_STATUS_INTERVAL_MS);
      await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status).to.deep.include({
        replicas: 2,
        readyReplicas: 1,
        availableReplicas: 1,
      });
    });

    it('does not hold back the counts after a status write that failed', async () => {
      await env.stop();
      env = new ControllerTestEnv({ finalizeNewMachines: true });
      await scaleDownOne();
      await controller.reconcile(`${NS}/ms`, ctxFor); // deletes one, writes the counts before it
      await env.settle();
      await env.clock.advance(MACHINESET_COUNTS_STATUS_INTERVAL_MS);
      let refuse = true;
      env.api.react((a) =>
        refuse && a.resource.startsWith('machinesets.') && a.subresource === 'status'
          ? new ConflictError('the object has been modified', 409, 'Conflict')
          : undefined,
      );
      const error = await failureOf(controller.reconcile(`${NS}/ms`, ctxFor));
      expect(error, 'the write of the new counts was refused').to.be.instanceOf(ConflictError);
      refuse = false;
      // Nothing was written since the first pass a second ago: the retry goes out at once.
      await controller.reconcile(`${NS}/ms`, ctxFor);
      expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status).to.deep.include({
        replicas: 2,
        readyReplicas: 1,
      });
    });
  });

  it('does not delete again while its own deletions are not yet in the cache', async () => {
    const ms = machineSet('ms', 1);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup(ms, machine('a', { owner: ms }), machine('b', { owner: ms }), machine('c', { owner: ms }));
    env.api.holdWatches(); // the cache lags behind the controller's writes
    const tolerant = (): Promise<unknown> =>
      controller.reconcile(`${NS}/ms`, ctxFor).catch((err: unknown) => {
        if (!(err instanceof ConflictError)) throw err;
      });
    await tolerant();
    const deletes = (): number => env.api.writes().filter((w) => w.verb === 'delete').length;
    expect(deletes()).to.equal(2);
    expect(controller.expectations.pending(`${NS}/ms`)).to.deep.equal({ adds: 0, deletes: 2 });
    await tolerant();
    await tolerant();
    expect(deletes(), 'no second round on a stale cache').to.equal(2);
    env.api.releaseWatches();
    await env.settle();
    expect(controller.expectations.satisfied(`${NS}/ms`)).to.equal(true);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletes()).to.equal(2);
  });

  it('adopts matching orphans and releases machines it no longer selects', async () => {
    const ms = machineSet('ms', 2);
    const orphan = machine('orphan', { labels: { ...ms.spec?.template?.metadata?.labels } });
    const stray = machine('stray', { owner: ms, labels: { app: 'other' } });
    await setup(ms, orphan, stray, machine('a', { owner: ms }));
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.peek<Machine>(MachineResource, 'orphan', NS)?.metadata.ownerReferences?.[0]?.uid).to.equal(
      'uid-ms',
    );
    expect(env.api.peek<Machine>(MachineResource, 'stray', NS)?.metadata.ownerReferences).to.equal(undefined);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(0);
  });

  it('propagates node template and machine configuration changes to its machines in place', async () => {
    const ms = machineSet('ms', 1);
    const m = machine('a', { owner: ms });
    await setup(ms, m);
    const updated = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS) as MachineSet;
    if (updated.spec?.template?.spec !== undefined) {
      updated.spec.template.spec.nodeTemplate = { metadata: { labels: { role: 'gpu' } } };
      updated.spec.template.spec.drainTimeout = '5m';
    }
    await env.api.update(MachineSetResource, updated);
    await env.settle();
    env.api.clearActions();
    await controller.reconcile(`${NS}/ms`, ctxFor);
    const got = env.api.peek<Machine>(MachineResource, 'a', NS);
    expect(got?.spec?.nodeTemplate).to.deep.equal({ metadata: { labels: { role: 'gpu' } } });
    expect(got?.spec?.drainTimeout).to.equal('5m');
    expect(env.api.writes().filter((w) => w.verb === 'create' || w.verb === 'delete')).to.deep.equal([]);
  });

  it('replaces a Failed machine but keeps a preserved one, and lists failed machines in status', async () => {
    const ms = machineSet('ms', 2);
    await setup(
      ms,
      machine('failed', { owner: ms, phase: 'Failed', lastOpState: 'Failed' }),
      machine('kept', {
        owner: ms,
        phase: 'Failed',
        lastOpState: 'Failed',
        preserveExpiry: '2026-11-25T00:00:00Z',
        annotations: { 'node.machine.sapcloud.io/preserve': 'now' },
      }),
    );
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines()).to.deep.equal(['failed']);
    const status = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status;
    expect(status?.failedMachines?.map((f) => f.name)).to.deep.equal(['failed']);
    expect(status?.preservedFailedReplicas).to.equal(1);
  });

  it('reports a failed creation in events and the ReplicaFailure condition and stops after the first batch', async () => {
    await setup(machineSet('ms', 5));
    env.api.react((a) =>
      a.verb === 'create' && a.resource.startsWith('machines')
        ? new InvalidError('quota exceeded', 422, 'Invalid')
        : undefined,
    );
    const error = await failureOf(controller.reconcile(`${NS}/ms`, ctxFor));
    expect(error).to.be.instanceOf(Error);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(1);
    expect(env.recorder.events.find((e) => e.reason === 'FailedCreate')?.message).to.contain(
      'quota exceeded',
    );
    const cond = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status?.machineSetCondition?.[0];
    expect(cond).to.deep.include({ type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate' });
    expect(controller.expectations.satisfied(`${NS}/ms`)).to.equal(true);
  });

  const INTERRUPTED = {
    'machine.mcm-ts.io/replacing': 'interrupted',
    'machine.mcm-ts.io/interruption-deadline': '2026-11-21T10:01:30Z',
  };

  it('creates the replacement of an interrupted machine at once and deletes the machine when its deadline nears (requeued for it)', async () => {
    const ms = machineSet('ms', 2);
    await setup(ms, machine('a', { owner: ms, annotations: INTERRUPTED }), machine('b', { owner: ms }));
    const first = await controller.reconcile(`${NS}/ms`, ctxFor);
    const verbs = (): string[] =>
      env.api
        .writes()
        .filter((w) => w.resource.startsWith('machines.') && (w.verb === 'create' || w.verb === 'delete'))
        .map((w) => w.verb);
    expect(verbs(), 'the replacement, the machine kept').to.deep.equal(['create']);
    // The default lead is 30 s: the deadline is 90 s away.
    expect(first.requeueAfter).to.equal(60_000);
    await env.clock.advance(60_000);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines()).to.deep.equal(['a']);
  });

  it('deletes an interrupted machine at once while frozen (no replacement), and when its replacement cannot be created, once its deadline nears', async () => {
    const frozen = machineSet('ms', 2, { labels: { freeze: 'True' } });
    await setup(
      frozen,
      machine('a', { owner: frozen, annotations: INTERRUPTED }),
      machine('b', { owner: frozen }),
    );
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(0);
    expect(deletedMachines()).to.deep.equal(['a']);

    await env.stop();
    env = new ControllerTestEnv();
    const ms = machineSet('ms', 2);
    await setup(ms, machine('a', { owner: ms, annotations: INTERRUPTED }), machine('b', { owner: ms }));
    env.api.react((a) =>
      a.verb === 'create' && a.resource.startsWith('machines')
        ? new InvalidError('quota exceeded', 422, 'Invalid')
        : undefined,
    );
    await env.clock.advance(60_000);
    const error = await failureOf(controller.reconcile(`${NS}/ms`, ctxFor));
    expect(error, 'the failed creation is reported').to.be.instanceOf(Error);
    expect(deletedMachines()).to.deep.equal(['a']);
  });

  it('keeps a machine replaced for expiry while a pod on its node vetoes disruption, and deletes it when the pod goes', async () => {
    const ms = machineSet('ms', 2);
    const expired = { 'machine.mcm-ts.io/replacing': 'expired' };
    await setup(
      ms,
      machine('a', {
        owner: ms,
        annotations: expired,
        labels: { ...ms.spec?.template?.metadata?.labels, node: 'node-a' },
      }),
      machine('b', { owner: ms }),
      machine('c', { owner: ms }),
    );
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'job', namespace: 'apps', annotations: { 'karpenter.sh/do-not-disrupt': 'true' } },
      spec: { nodeName: 'node-a', containers: [] },
      status: { phase: 'Running' },
    };
    env.target.seed(CoreResources.pods, pod);
    await eventually(() => env.informers.drain?.pods.list().length === 1);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines(), 'held by the pod').to.deep.equal([]);
    expect(env.recorder.events.find((e) => e.reason === 'DisruptionVetoed')?.message).to.contain('apps/job');
    await env.target.delete(CoreResources.pods, 'job', { namespace: 'apps' });
    await eventually(() => env.informers.drain?.pods.list().length === 0);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines()).to.deep.equal(['a']);
  });

  it('does not create machines while frozen', async () => {
    await setup(machineSet('ms', 3, { labels: { freeze: 'True' } }));
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(0);
  });

  it('reports an invalid spec as a Warning event and a ReplicaFailure condition without touching machines', async () => {
    const ms = machineSet('ms', 3);
    if (ms.spec !== undefined) ms.spec.selector = { matchLabels: { app: 'other' } };
    await setup(ms);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.recorder.events[0]).to.deep.include({ type: 'Warning', reason: 'InvalidSpec' });
    const cond = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status?.machineSetCondition?.[0];
    expect(cond).to.deep.include({ type: 'ReplicaFailure', reason: 'InvalidSpec' });
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(0);
  });

  it('reports a failed deletion while being deleted in status and rethrows it with its cause (backoff)', async () => {
    const ms = machineSet('ms', 2);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup(ms, machine('a', { owner: ms }), machine('b', { owner: ms }));
    await env.api.delete(MachineSetResource, 'ms', { namespace: NS });
    await env.settle();
    const refused = new UnavailableError('etcdserver: request timed out', 503, 'ServiceUnavailable');
    env.api.react((a) =>
      a.verb === 'delete' && a.resource.startsWith('machines.') && a.name === 'b' ? refused : undefined,
    );
    const error = await failureOf(controller.reconcile(`${NS}/ms`, ctxFor));
    expect(error, 'the failure reaches the work queue').to.be.instanceOf(Error);
    expect((error as Error).cause).to.equal(refused);
    expect(env.recorder.events.find((e) => e.reason === 'FailedDelete')?.message).to.contain('timed out');
    const cond = env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.status?.machineSetCondition?.[0];
    expect(cond).to.deep.include({ type: 'ReplicaFailure', status: 'True', reason: 'FailedDelete' });
  });

  it('keeps the cause of a failed creation on the error it rethrows', async () => {
    await setup(machineSet('ms', 1));
    const refused = new InvalidError('quota exceeded', 422, 'Invalid');
    env.api.react((a) => (a.verb === 'create' && a.resource.startsWith('machines') ? refused : undefined));
    const error = await controller.reconcile(`${NS}/ms`, ctxFor).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect((error as Error | undefined)?.cause).to.equal(refused);
  });

  /**
   * Creates `replicas` machines while the machine watch lags, then deletes the set; only the
   * MachineSet watch catches up, so the cache shows the deleted set but none of its new machines.
   */
  async function deleteWhileCreationsUnseen(replicas: number): Promise<void> {
    const ms = machineSet('ms', replicas);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup(ms);
    env.api.holdWatches();
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.writes().filter((w) => w.verb === 'create')).to.have.length(replicas);
    await env.api.delete(MachineSetResource, 'ms', { namespace: NS });
    env.api.releaseWatches(MachineSetResource);
    await eventually(
      () => env.informers.machineSets.get(NS, 'ms')?.metadata.deletionTimestamp !== undefined,
      'the cache shows the set being deleted',
    );
    expect(env.informers.machines.size(), 'its machines are not in the cache yet').to.equal(0);
  }

  it('keeps its finalizer while being deleted until its own creations show up in the cache, then deletes them', async () => {
    await deleteWhileCreationsUnseen(2);
    const result = await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)?.metadata.finalizers).to.deep.equal([
      'machine.sapcloud.io/machine-controller-manager',
    ]);
    expect(result.requeueAfter, 'looks again by the time the expectations expire').to.be.within(
      1000,
      EXPECTATIONS_TTL_MS + 1,
    );

    env.api.releaseWatches();
    await env.settle();
    const created = owned('ms').map((m) => m.metadata.name);
    expect(created).to.have.length(2);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines().sort()).to.deep.equal(created.sort());
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS), 'still there for them').to.not.equal(
      undefined,
    );
  });

  it('removes its finalizer while being deleted once unseen creations expire (a lost watch event)', async () => {
    await deleteWhileCreationsUnseen(1);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)).to.not.equal(undefined);
    await env.clock.advance(EXPECTATIONS_TTL_MS + 1);
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)).to.equal(undefined);
  });

  it('deletes all its machines when deleted, then removes its finalizer', async () => {
    const ms = machineSet('ms', 2);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup(ms, machine('a', { owner: ms }), machine('b', { owner: ms }));
    await env.api.delete(MachineSetResource, 'ms', { namespace: NS });
    await env.settle();
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(deletedMachines().sort()).to.deep.equal(['a', 'b']);
    // The machines' own finalizers are removed by the machine controller; simulate that.
    for (const name of ['a', 'b']) {
      const m = env.api.peek<Machine>(MachineResource, name, NS) as Machine;
      m.metadata.finalizers = [];
      await env.api.update(MachineResource, m);
    }
    await env.settle();
    await controller.reconcile(`${NS}/ms`, ctxFor);
    expect(env.api.peek<MachineSet>(MachineSetResource, 'ms', NS)).to.equal(undefined);
  });
});
