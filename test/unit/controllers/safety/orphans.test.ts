import { expect } from 'chai';

import { MachineClassResource, MachineResource, type Machine } from '../../../../lib/api/types.js';
import { OrphanVmCollector, classifyVm, planOrphans } from '../../../../lib/controllers/safety/orphans.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { DEFAULT_SHAPE } from '../../../../lib/providers/virtual/spec.js';
import { providerIDOf } from '../../../../lib/providers/virtual/vm.js';
import { machine, virtualClass, virtualVm } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const pid = (name: string): string => providerIDOf(DEFAULT_SHAPE.zone, name);

function withVm(m: Machine, providerID: string | undefined): Machine {
  if (providerID !== undefined && m.spec !== undefined) m.spec.providerID = providerID;
  return m;
}

describe('classifyVm', () => {
  const cases: [string, Machine | undefined, boolean, string][] = [
    ['no machine: orphan candidate', undefined, false, 'no-machine'],
    ['no machine but its creation is running: kept', undefined, true, 'being-created'],
    ['machine records this VM', withVm(machine('a'), pid('a')), false, 'owned'],
    [
      'machine has no VM recorded yet (creation in flight)',
      withVm(machine('a', { phase: 'Creating' }), ''),
      false,
      'being-created',
    ],
    [
      'Pending machine recording another VM: still being created',
      withVm(machine('a', { phase: 'Pending' }), pid('other')),
      false,
      'being-created',
    ],
    [
      'CrashLoopBackOff machine recording another VM',
      withVm(machine('a', { phase: 'CrashLoopBackOff' }), pid('other')),
      false,
      'being-created',
    ],
    [
      'Running machine recording another VM: a duplicate (reported, never deleted)',
      withVm(machine('a', { phase: 'Running' }), pid('other')),
      false,
      'duplicate',
    ],
    [
      'Running machine recording another VM with a creation in flight',
      withVm(machine('a', { phase: 'Running' }), pid('other')),
      true,
      'being-created',
    ],
    [
      'machine being deleted that records this VM',
      withVm(machine('a', { phase: 'Terminating', deleting: true }), pid('a')),
      false,
      'owned',
    ],
  ];
  for (const [name, m, inFlight, want] of cases) {
    it(`${name} → ${want}`, () => {
      expect(classifyVm(pid('a'), m, inFlight)).to.equal(want);
    });
  }
});

describe('planOrphans', () => {
  it('only VMs whose machine is unknown are candidates; VMs seen under another class are skipped', () => {
    const machines = new Map<string, Machine>([
      ['owned', withVm(machine('owned'), pid('owned'))],
      ['creating', withVm(machine('creating', { phase: 'Creating' }), '')],
      ['dup', withVm(machine('dup'), pid('dup-first'))],
    ]);
    const plan = planOrphans(
      {
        [pid('owned')]: 'owned',
        [pid('creating')]: 'creating',
        [pid('dup')]: 'dup',
        [pid('ghost')]: 'ghost',
        [pid('inflight')]: 'inflight',
        [pid('seen')]: 'seen',
      },
      (n) => machines.get(n),
      (n) => n === 'inflight',
      new Set([pid('seen')]),
    );
    expect(plan.candidates).to.deep.equal([{ providerID: pid('ghost'), machineName: 'ghost' }]);
    expect(plan.duplicates).to.deep.equal([
      { providerID: pid('dup'), machineName: 'dup', recorded: pid('dup-first') },
    ]);
    expect(plan.kept).to.equal(4);
    expect(plan.creating, 'kept without a machine: its creation is running').to.equal(1);
  });
  it('leaves the VM of a machine deleted around the listing to a later pass', () => {
    const plan = planOrphans(
      { [pid('ghost')]: 'ghost', [pid('gone')]: 'gone' },
      () => undefined,
      () => false,
      new Set(),
      (n) => n === 'gone',
    );
    expect(plan.candidates).to.deep.equal([{ providerID: pid('ghost'), machineName: 'ghost' }]);
    expect(plan.settling).to.equal(1);
    expect(plan.kept).to.equal(1);
  });
});

describe('OrphanVmCollector (in-memory API, virtual provider)', () => {
  let env: ControllerTestEnv;
  let collector: OrphanVmCollector;
  let frozen: boolean;
  let inFlight: Set<string>;

  beforeEach(async () => {
    env = new ControllerTestEnv();
    frozen = false;
    inFlight = new Set();
    env.seed(MachineClassResource, virtualClass('small'));
    env.seed(
      MachineResource,
      withVm(machine('owned'), pid('owned')),
      withVm(machine('creating', { phase: 'Creating' }), ''),
      withVm(machine('pending', { phase: 'Pending' }), pid('pending')),
    );
    env.seed(
      CoreResources.nodes,
      virtualVm('owned', 'owned'),
      virtualVm('creating', 'creating'),
      virtualVm('pending', 'pending'),
      virtualVm('ghost', 'ghost'),
      virtualVm('inflight', 'inflight'),
    );
    const providers = env.virtualProviders();
    collector = new OrphanVmCollector(env.ctx, {
      providers,
      periodMs: 60_000,
      frozen: () => frozen,
      creationInFlight: (key) => inFlight.has(key),
    });
    await env.start();
    env.api.clearActions();
    env.target.clearActions();
  });

  afterEach(async () => {
    await env.stop();
  });

  it('deletes the VM without a machine and keeps every VM whose machine exists or is being created', async () => {
    inFlight.add('default/inflight');
    await collector.reconcile(rctx);
    expect(env.nodeNames()).to.deep.equal(['creating', 'inflight', 'owned', 'pending']);
    const deletes = env.target.writes().filter((w) => w.verb === 'delete');
    expect(deletes.map((d) => d.name)).to.deep.equal(['ghost']);
    expect(env.recorder.events.map((e) => [e.reason, e.subject.kind, e.subject.name])).to.deep.equal([
      ['OrphanVMDeleted', 'MachineClass', 'small'],
    ]);
    const collected = await env.registry
      .getSingleMetric('mcm_machine_safety_orphan_vms_collected_total')
      ?.get();
    expect(collected?.values[0]).to.deep.include({ value: 1, labels: { provider: 'virtual' } });
  });

  it('collects the VM of a class that no longer exists through the provider’s own inventory, keeping VMs whose machine exists', async () => {
    // VM created, providerID write lost, machine deleted, class deleted: ListMachines cannot
    // reach these VMs any more, having no class to list them through.
    env.target.seed(
      CoreResources.nodes,
      virtualVm('lost', 'lost', 'deleted-class'),
      virtualVm('creating-elsewhere', 'creating', 'deleted-class'),
    );
    await env.settle();
    await collector.reconcile(rctx);
    expect(env.nodeNames()).to.not.include('lost');
    expect(env.nodeNames(), 'its machine exists (being created)').to.include('creating-elsewhere');
    expect(
      env.target
        .writes()
        .filter((w) => w.verb === 'delete')
        .map((w) => w.name)
        .sort(),
    ).to.deep.equal(['ghost', 'inflight', 'lost']);
  });

  it('re-reads the machine live before deleting: a machine the cache has not seen yet keeps its VM', async () => {
    env.api.holdWatches();
    await env.api.create(MachineResource, withVm(machine('ghost', { phase: 'Creating' }), ''));
    expect(env.informers.machines.get('default', 'ghost'), 'the cache lags').to.equal(undefined);
    await collector.reconcile(rctx);
    expect(env.nodeNames()).to.include('ghost');
    expect(env.api.actions.some((a) => a.verb === 'get' && a.name === 'ghost')).to.equal(true);
    env.api.releaseWatches();
  });

  it('does nothing while the machine controller is frozen', async () => {
    frozen = true;
    await collector.reconcile(rctx);
    expect(env.nodeNames()).to.include('ghost');
    expect(env.target.writes()).to.have.length(0);
  });

  it('does not delete again the VM of a machine deleted just before or while it listed the VMs', async () => {
    // The machine's deletion flow deleted its VM before the machine went; a listing taken around
    // then may still show the VM (at 1,000 machines on AWS 5 % of them got a second
    // TerminateInstances this way). Here the VM stays, as a listing that predates its deletion.
    await env.api.patch(
      MachineResource,
      'owned',
      { metadata: { finalizers: null } },
      { type: 'merge', namespace: 'default' },
    );
    await env.api.delete(MachineResource, 'owned', { namespace: 'default' });
    await env.settle();
    expect(env.informers.machines.get('default', 'owned'), 'the delete event arrived').to.equal(undefined);
    env.target.clearActions();
    await collector.reconcile(rctx);
    expect(
      env.target
        .writes()
        .filter((w) => w.verb === 'delete')
        .map((w) => w.name),
    ).to.deep.equal(['ghost', 'inflight']);
    // A VM its deletion left behind is collected by a pass that listed after the deletion settled.
    await env.clock.advance(5_000);
    await collector.reconcile(rctx);
    expect(env.nodeNames()).to.not.include('owned');
  });

  it('a machine deletion triggers a pass a few seconds later', async () => {
    collector.controller.start();
    await env.api.delete(MachineResource, 'owned', { namespace: 'default' });
    await env.settle();
    // the machine had a finalizer: it is only being deleted; remove it so it goes
    await env.api.patch(
      MachineResource,
      'owned',
      { metadata: { finalizers: null } },
      { type: 'merge', namespace: 'default' },
    );
    await env.settle();
    expect(env.nodeNames()).to.include('ghost');
    await env.clock.advance(5_000);
    await collector.controller.stop({ drain: true });
    expect(env.nodeNames()).to.not.include('ghost');
    expect(env.nodeNames(), 'the VM of the deleted machine is an orphan now too').to.not.include('owned');
  });
});
