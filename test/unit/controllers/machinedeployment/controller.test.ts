import { expect } from 'chai';

import type { KubeObject, Node } from '../../../../lib/kube/types.js';
import {
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../../../lib/api/types.js';
import { MachineDeploymentController } from '../../../../lib/controllers/machinedeployment/controller.js';
import type { ControllerSettings } from '../../../../lib/controllers/context.js';
import { MachineSetController } from '../../../../lib/controllers/machineset/controller.js';
import { ConflictError, UnavailableError } from '../../../../lib/kube/errors.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { ControllerTestEnv } from '../env.js';
import { deployment, machineOf, machinesOf, node, NS, ownedSet, withClass } from './fixtures.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const KEY = `${NS}/d`;
const TRIGGER = 'node.machine.sapcloud.io/trigger-deletion-by-mcm';
const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';

describe('MachineDeploymentController.reconcile', () => {
  let env: ControllerTestEnv;
  let controller: MachineDeploymentController;

  afterEach(async () => {
    await env.stop();
  });

  async function setup(
    objs: { mcd?: MachineDeployment; sets?: MachineSet[]; machines?: Machine[]; nodes?: Node[] },
    opts: { withTarget?: boolean; settings?: Partial<ControllerSettings> } = {},
  ): Promise<void> {
    env = new ControllerTestEnv(opts.settings ?? {}, { withTarget: opts.withTarget ?? true });
    if (objs.mcd !== undefined) env.seed(MachineDeploymentResource, objs.mcd);
    for (const ms of objs.sets ?? []) env.seed(MachineSetResource, ms);
    for (const m of objs.machines ?? []) env.seed(MachineResource, m);
    for (const n of objs.nodes ?? []) env.seed(CoreResources.nodes, n);
    controller = new MachineDeploymentController(env.ctx);
    await env.start();
    env.api.clearActions();
  }

  async function reconcile(): Promise<number | undefined> {
    const result = await controller.reconcile(KEY, rctx);
    await env.settle();
    return result.requeueAfter;
  }

  const sets = (): MachineSet[] => env.api.all<MachineSet>(MachineSetResource, NS);
  const setOfClass = (className: string): MachineSet | undefined =>
    sets().find((s) => s.spec?.template?.spec?.class?.name === className);
  const replicasOfClass = (className: string): number | undefined => setOfClass(className)?.spec?.replicas;
  const current = (): MachineDeployment => {
    const mcd = env.api.peek<MachineDeployment>(MachineDeploymentResource, 'd', NS);
    if (mcd === undefined) throw new Error('deployment is gone');
    return mcd;
  };
  const condition = (type: string) => current().status?.conditions?.find((c) => c.type === type);

  async function updateDeployment(fn: (mcd: MachineDeployment) => void): Promise<void> {
    const mcd = current();
    fn(mcd);
    await env.api.update(MachineDeploymentResource, mcd);
    await env.settle();
  }

  /** What the machine controller does once a machine's VM is gone. */
  async function removeMachine(name: string): Promise<void> {
    const m = env.api.peek<Machine>(MachineResource, name, NS);
    if (m === undefined) return;
    m.metadata.finalizers = [];
    const updated = await env.api.update(MachineResource, m);
    await env.api.delete(MachineResource, name, {
      namespace: NS,
      preconditions: { uid: updated.metadata.uid ?? '' },
    });
    await env.settle();
  }

  async function addMachines(
    ms: MachineSet | undefined,
    prefix: string,
    count: number,
    phase = 'Running',
  ): Promise<void> {
    if (ms === undefined) throw new Error('no such machine set');
    for (const m of machinesOf(ms, prefix, count, { phase })) {
      const { uid: _uid, ...metadata } = m.metadata;
      await env.api.create<KubeObject>(MachineResource, { ...m, metadata });
    }
    await env.settle();
  }

  /** The machines a MachineSet controller pass over `ms` deletes. */
  let machineSets: { env: typeof env; controller: MachineSetController } | undefined;
  async function deletedBySetController(ms: MachineSet | undefined): Promise<(string | undefined)[]> {
    // One controller per environment: its metrics are registered once.
    if (machineSets?.env !== env) machineSets = { env, controller: new MachineSetController(env.ctx) };
    env.api.clearActions();
    await machineSets.controller.reconcile(`${NS}/${ms?.metadata.name ?? ''}`, rctx);
    return env.api
      .writes()
      .filter((w) => w.verb === 'delete' && w.resource.startsWith('machines.'))
      .map((w) => w.name);
  }

  async function setStatus(ms: MachineSet | undefined, replicas: number, available: number): Promise<void> {
    if (ms === undefined) throw new Error('no such machine set');
    await env.api.updateStatus(MachineSetResource, {
      ...ms,
      status: {
        replicas,
        availableReplicas: available,
        readyReplicas: available,
        observedGeneration: ms.metadata.generation ?? 1,
      },
    });
    await env.settle();
  }

  it('creates the first machine set with hash label, revision and replica annotations, and reports it', async () => {
    await setup({ mcd: deployment('d', 3) });
    await reconcile();
    const created = sets();
    expect(created).to.have.length(1);
    const ms = created[0] as MachineSet;
    const hash = ms.metadata.labels?.['machine-template-hash'];
    expect(hash).to.match(/^\d+$/);
    expect(ms.metadata.name).to.match(/^d-[a-z0-9]{5}$/);
    expect(ms.spec?.selector?.matchLabels).to.deep.equal({
      app: 'worker',
      pool: 'd',
      'machine-template-hash': hash,
    });
    expect(ms.spec?.template?.metadata?.labels).to.deep.equal({
      app: 'worker',
      pool: 'd',
      name: 'd',
      'machine-template-hash': hash,
    });
    expect(ms.spec?.replicas).to.equal(3);
    expect(ms.metadata.annotations).to.deep.equal({
      'deployment.kubernetes.io/revision': '1',
      'deployment.kubernetes.io/desired-replicas': '3',
      'deployment.kubernetes.io/max-replicas': '4',
    });
    expect(ms.metadata.ownerReferences?.[0]).to.deep.include({
      kind: 'MachineDeployment',
      name: 'd',
      uid: 'uid-d',
      controller: true,
    });
    const mcd = current();
    expect(mcd.metadata.finalizers).to.deep.equal(['machine.sapcloud.io/machine-controller-manager']);
    expect(mcd.metadata.annotations?.['deployment.kubernetes.io/revision']).to.equal('1');
    expect(condition('Progressing')).to.deep.include({ status: 'True', reason: 'NewMachineSetCreated' });
    expect(mcd.status).to.deep.include({
      observedGeneration: 1,
      labelSelector: 'app=worker,pool=d',
      replicas: 0,
    });
    expect(env.recorder.events).to.deep.include({
      subject: { kind: 'MachineDeployment', namespace: NS, name: 'd' },
      type: 'Normal',
      reason: 'ScalingMachineSet',
      message: `Scaled up machine set ${ms.metadata.name ?? ''} to 3`,
    });

    env.api.clearActions();
    await reconcile();
    expect(env.api.writes(), 'nothing to do the second time').to.deep.equal([]);
  });

  it('rolls with maxSurge 1 / maxUnavailable 1: one surge machine and one old machine down, then waits for it to go', async () => {
    const v1 = deployment('d', 4, {
      className: 'small',
      maxSurge: 1,
      maxUnavailable: 1,
      annotations: { 'deployment.kubernetes.io/revision': '1' },
    });
    const old = ownedSet(v1, 4, { revision: 1 });
    await setup({ mcd: withClass(v1, 'large'), sets: [old], machines: machinesOf(old, 'old', 4) });

    await reconcile();
    expect(replicasOfClass('large'), 'new set within the surge').to.equal(1);
    expect(replicasOfClass('small'), 'one old machine may be unavailable').to.equal(3);
    expect(setOfClass('large')?.metadata.annotations?.['deployment.kubernetes.io/revision']).to.equal('2');
    expect(current().metadata.annotations?.['deployment.kubernetes.io/revision']).to.equal('2');
    expect(env.recorder.events.map((e) => e.message)).to.include(
      `Scaled down machine set ${old.metadata.name ?? ''} to 3`,
    );

    env.api.clearActions();
    await reconcile();
    expect(replicasOfClass('large'), 'the old machine still exists: no room to surge').to.equal(1);
    expect(replicasOfClass('small'), 'the new machine is not available: no further scale-down').to.equal(3);
    expect(env.api.writes().filter((w) => w.resource.startsWith('machinesets'))).to.deep.equal([]);

    await removeMachine('old-0');
    await reconcile();
    expect(replicasOfClass('large')).to.equal(2);
    expect(replicasOfClass('small')).to.equal(3);
  });

  it('rolls with maxSurge 2 / maxUnavailable 0: old machines go only once new ones are available', async () => {
    const v1 = deployment('d', 4, { maxSurge: 2, maxUnavailable: 0 });
    const old = ownedSet(v1, 4, { revision: 1 });
    await setup({ mcd: withClass(v1, 'large'), sets: [old], machines: machinesOf(old, 'old', 4) });

    await reconcile();
    expect(replicasOfClass('large')).to.equal(2);
    await addMachines(setOfClass('large'), 'new', 2, 'Pending');
    await reconcile();
    expect(replicasOfClass('small'), 'new machines pending').to.equal(4);

    for (const name of ['new-0', 'new-1']) {
      const m = env.api.peek<Machine>(MachineResource, name, NS) as Machine;
      await env.api.updateStatus(MachineResource, { ...m, status: { currentStatus: { phase: 'Running' } } });
    }
    await env.settle();
    await reconcile();
    expect(replicasOfClass('small'), 'two new machines available').to.equal(2);
  });

  it('Recreate removes every old machine before creating the new set', async () => {
    const v1 = deployment('d', 2, { strategy: { type: 'Recreate' } });
    const old = ownedSet(v1, 2, { revision: 1 });
    await setup({ mcd: withClass(v1, 'large'), sets: [old], machines: machinesOf(old, 'old', 2) });

    await reconcile();
    expect(replicasOfClass('small')).to.equal(0);
    expect(setOfClass('large')).to.equal(undefined);

    await reconcile();
    await removeMachine('old-0');
    await reconcile();
    expect(setOfClass('large'), 'one old machine left').to.equal(undefined);

    await removeMachine('old-1');
    await setStatus(setOfClass('small'), 0, 0);
    await reconcile();
    expect(replicasOfClass('large')).to.equal(2);
    expect(setOfClass('large')?.metadata.annotations?.['deployment.kubernetes.io/revision']).to.equal('2');
  });

  it('rolls back to the previous revision and clears rollbackTo', async () => {
    const v1 = deployment('d', 2, {
      className: 'v1',
      annotations: { 'deployment.kubernetes.io/revision': '2' },
    });
    const s1 = ownedSet(v1, 0, {
      className: 'v1',
      revision: 1,
      statusReplicas: 0,
      annotations: { note: 'from-v1' },
    });
    const s2 = ownedSet(v1, 2, { className: 'v2', revision: 2 });
    const mcd = withClass(v1, 'v2');
    if (mcd.spec !== undefined) mcd.spec.rollbackTo = { revision: 0 };
    await setup({ mcd, sets: [s1, s2] });

    await reconcile();
    const after = current();
    expect(after.spec?.template.spec?.class?.name).to.equal('v1');
    expect(after.spec?.rollbackTo).to.equal(undefined);
    expect(after.spec?.template.metadata?.labels).to.not.have.property('machine-template-hash');
    expect(after.metadata.annotations).to.deep.include({
      note: 'from-v1',
      'deployment.kubernetes.io/revision': '2',
    });
    expect(env.recorder.events.find((e) => e.reason === 'DeploymentRollback')).to.deep.include({
      type: 'Normal',
      message: 'Rolled back deployment "d" to revision 1',
    });

    // The rollout that follows makes the v1 set the new one again, with a higher revision.
    await reconcile();
    expect(setOfClass('v1')?.metadata.annotations).to.deep.include({
      'deployment.kubernetes.io/revision': '3',
      'deployment.kubernetes.io/revision-history': '1',
    });
    expect(replicasOfClass('v1')).to.equal(1);
  });

  it('reports a rollback to a missing revision or to the same template, clearing rollbackTo', async () => {
    const v1 = deployment('d', 1);
    const s1 = ownedSet(v1, 1, { revision: 1 });
    const mcd = structuredClone(v1);
    if (mcd.spec !== undefined) mcd.spec.rollbackTo = { revision: 7 };
    await setup({ mcd, sets: [s1] });
    await reconcile();
    expect(env.recorder.events.map((e) => [e.type, e.reason])).to.deep.include([
      'Warning',
      'DeploymentRollbackRevisionNotFound',
    ]);
    expect(current().spec?.rollbackTo).to.equal(undefined);

    await updateDeployment((d) => {
      if (d.spec !== undefined) d.spec.rollbackTo = { revision: 1 };
    });
    await reconcile();
    expect(env.recorder.events.map((e) => [e.type, e.reason])).to.deep.include([
      'Warning',
      'DeploymentRollbackTemplateUnchanged',
    ]);
    expect(current().spec?.rollbackTo).to.equal(undefined);
    expect(current().spec?.template.spec?.class?.name).to.equal('small');
  });

  it('does not grow the new set into free surge room while paused mid-rollout', async () => {
    // replicas 3, maxSurge 1: old 2 + new 1 leaves room for one more, which must stay unused.
    const v1 = deployment('d', 3);
    const v2 = withClass(v1, 'large');
    if (v2.spec !== undefined) v2.spec.paused = true;
    const old = ownedSet(v1, 2, { revision: 1 });
    const fresh = ownedSet(v2, 1, { revision: 2, created: '2026-11-21T00:00:00Z' });
    await setup({
      mcd: v2,
      sets: [old, fresh],
      machines: [...machinesOf(old, 'old', 2), ...machinesOf(fresh, 'new', 1)],
    });
    await reconcile();
    expect(replicasOfClass('small')).to.equal(2);
    expect(replicasOfClass('large')).to.equal(1);
    expect(
      env.api.writes().filter((w) => w.resource.startsWith('machinesets') && w.verb !== 'update'),
    ).to.deep.equal([]);
  });

  it('pausing stops the rollout but not scaling; resuming continues it', async () => {
    const v1 = deployment('d', 2);
    const old = ownedSet(v1, 2, { revision: 1 });
    const paused = withClass(v1, 'large');
    if (paused.spec !== undefined) paused.spec.paused = true;
    await setup({ mcd: paused, sets: [old], machines: machinesOf(old, 'old', 2) });

    await reconcile();
    expect(setOfClass('large'), 'no rollout while paused').to.equal(undefined);
    expect(condition('Progressing')).to.deep.include({ status: 'Unknown', reason: 'DeploymentPaused' });

    await updateDeployment((d) => {
      if (d.spec !== undefined) d.spec.replicas = 3;
    });
    await reconcile();
    expect(replicasOfClass('small'), 'scaled while paused').to.equal(3);
    expect(setOfClass('small')?.metadata.annotations?.['deployment.kubernetes.io/desired-replicas']).to.equal(
      '3',
    );

    await updateDeployment((d) => {
      if (d.spec !== undefined) d.spec.paused = false;
    });
    await reconcile();
    expect(replicasOfClass('large'), 'rollout resumed').to.equal(1);
    expect(condition('Progressing')?.reason).to.be.oneOf(['DeploymentResumed', 'NewMachineSetCreated']);
  });

  it('deletes old sets beyond revisionHistoryLimit once the rollout is complete, oldest first', async () => {
    const mcd = deployment('d', 1, { className: 'v4', revisionHistoryLimit: 1 });
    const cur = ownedSet(mcd, 1, { revision: 4, created: '2026-11-20T04:00:00Z' });
    const old = (className: string, revision: number, created: string): MachineSet =>
      ownedSet(mcd, 0, { className, revision, created, statusReplicas: 0 });
    await setup({
      mcd,
      sets: [
        cur,
        old('v1', 1, '2026-11-20T01:00:00Z'),
        old('v2', 2, '2026-11-20T02:00:00Z'),
        old('v3', 3, '2026-11-20T03:00:00Z'),
      ],
    });
    await reconcile();
    expect(
      sets()
        .map((s) => s.spec?.template?.spec?.class?.name)
        .sort(),
    ).to.deep.equal(['v3', 'v4']);
  });

  it('keeps all old sets while the rollout is incomplete', async () => {
    const mcd = deployment('d', 1, { className: 'v2', revisionHistoryLimit: 0 });
    const cur = ownedSet(mcd, 1, { revision: 2, statusReplicas: 1, statusAvailable: 0 });
    await setup({ mcd, sets: [cur, ownedSet(mcd, 0, { className: 'v1', revision: 1, statusReplicas: 0 })] });
    await reconcile();
    expect(sets()).to.have.length(2);
  });

  it('marks exactly the machines the autoscaler named, and the MachineSet controller deletes exactly those', async () => {
    const mcd = deployment('d', 3, { annotations: { 'deployment.kubernetes.io/revision': '1' } });
    const ms = ownedSet(mcd, 3, { revision: 1, desired: 3 });
    await setup({ mcd, sets: [ms], machines: machinesOf(ms, 'm', 3) });
    const markTime = '2026-11-21T09:59:00Z';
    // The autoscaler lowers replicas and names the machine in one update.
    await updateDeployment((d) => {
      if (d.spec !== undefined) d.spec.replicas = 2;
      d.metadata.annotations = {
        ...(d.metadata.annotations ?? {}),
        [TRIGGER]: `m-1~${markTime},ghost~${markTime},broken`,
        [SCALER_TIME]: markTime,
      };
    });

    await reconcile();
    expect(
      current().metadata.annotations?.[TRIGGER],
      'unknown machines dropped, legacy entry timed',
    ).to.equal(`m-1~${markTime}`);
    const marked = env.api
      .all<Machine>(MachineResource, NS)
      .filter((m) => m.metadata.annotations?.['machinepriority.machine.sapcloud.io'] === '1');
    expect(marked.map((m) => m.metadata.name)).to.deep.equal(['m-1']);
    expect(marked[0]?.metadata.annotations?.['machine.sapcloud.io/marked-for-deletion-time']).to.equal(
      markTime,
    );
    expect(replicasOfClass('small'), 'scaling waits until the cache shows the marks').to.equal(3);

    await reconcile();
    const scaled = setOfClass('small');
    expect(scaled?.spec?.replicas).to.equal(2);
    expect(scaled?.metadata.annotations?.[SCALER_TIME], 'scaler time arrives with the new size').to.equal(
      markTime,
    );

    expect(await deletedBySetController(scaled)).to.deep.equal(['m-1']);

    await env.settle();
    await reconcile();
    expect(
      current().metadata.annotations ?? {},
      'entry of a terminating machine dropped',
    ).to.not.have.property(TRIGGER);
  });

  it('deletes a machine named for deletion itself once replicas rise again before it went (gardener #1085), and a later request deletes the machine it names', async () => {
    const mcd = deployment('d', 3, { annotations: { 'deployment.kubernetes.io/revision': '1' } });
    const ms = ownedSet(mcd, 3, { revision: 1, desired: 3 });
    await setup({ mcd, sets: [ms], machines: machinesOf(ms, 'm', 3) });
    const deleteNodes = (name: string, time: string): Promise<void> =>
      updateDeployment((d) => {
        if (d.spec !== undefined) d.spec.replicas = (d.spec.replicas ?? 0) - 1;
        const trigger = d.metadata.annotations?.[TRIGGER];
        d.metadata.annotations = {
          ...(d.metadata.annotations ?? {}),
          [TRIGGER]: [trigger, `${name}~${time}`].filter((e) => e !== undefined).join(','),
          [SCALER_TIME]: time,
        };
      });
    const priority = (name: string): string | undefined =>
      env.api.peek<Machine>(MachineResource, name, NS)?.metadata.annotations?.[
        'machinepriority.machine.sapcloud.io'
      ];
    const machineDeletes = (): (string | undefined)[] =>
      env.api
        .writes()
        .filter((w) => w.verb === 'delete' && w.resource.startsWith('machines.'))
        .map((w) => w.name);

    await deleteNodes('m-0', '2026-11-21T09:58:00Z');
    await reconcile();
    expect(priority('m-0'), 'marked').to.equal('1');
    // IncreaseSize(+1) before the set shrank: the set has no surplus to delete m-0 from, but the
    // autoscaler has prepared m-0's node for removal and counts it as gone.
    await updateDeployment((d) => {
      if (d.spec !== undefined) d.spec.replicas = 3;
    });
    env.api.clearActions();
    await reconcile();
    expect(machineDeletes(), 'the deployment controller deletes the named machine').to.deep.equal(['m-0']);
    expect(
      env.recorder.events
        .filter((e) => e.reason === 'ReplacingMarkedMachine')
        .map((e) => e.message.includes('m-0')),
    ).to.deep.equal([true]);
    expect(replicasOfClass('small'), 'the set keeps its replicas').to.equal(3);
    await reconcile();
    expect(
      current().metadata.annotations ?? {},
      'entry dropped once the machine is going',
    ).to.not.have.property(TRIGGER);
    // The set replaces it (and deletes nothing).
    expect(await deletedBySetController(setOfClass('small'))).to.deep.equal([]);
    expect(
      env.api.writes().filter((w) => w.verb === 'create' && w.resource.startsWith('machines.')),
      'a replacement created',
    ).to.have.length(1);
    await env.settle();

    await deleteNodes('m-1', '2026-11-21T09:59:00Z');
    await reconcile();
    await reconcile();
    const scaled = setOfClass('small');
    expect(scaled?.spec?.replicas).to.equal(2);
    expect(await deletedBySetController(scaled), 'the machine named last goes').to.deep.equal(['m-1']);
  });

  it('without a target cluster, reports InPlaceUpdate as unsupported and keeps scaling without rolling', async () => {
    const v1 = deployment('d', 2, {
      strategy: {
        type: 'InPlaceUpdate',
        inPlaceUpdate: { maxSurge: 1, maxUnavailable: 0, orchestrationType: 'Auto' },
      },
    });
    const old = ownedSet(v1, 2, { revision: 1 });
    const changed = withClass(v1, 'large');
    if (changed.spec !== undefined) changed.spec.replicas = 3;
    await setup({ mcd: changed, sets: [old], machines: machinesOf(old, 'old', 2) }, { withTarget: false });
    await reconcile();
    expect(setOfClass('large'), 'never rolled').to.equal(undefined);
    expect(replicasOfClass('small'), 'still scaled').to.equal(3);
    expect(condition('Progressing')).to.deep.include({
      status: 'False',
      reason: 'InPlaceUpdateNotSupported',
    });
    expect(condition('Progressing')?.message).to.contain('--target-kubeconfig=none');
    expect(
      env.recorder.events.filter((e) => e.reason === 'InPlaceUpdateNotSupported').map((e) => e.type),
    ).to.deep.equal(['Warning']);
    await reconcile();
    expect(
      env.recorder.events.filter((e) => e.reason === 'InPlaceUpdateNotSupported'),
      'reported once',
    ).to.have.length(1);
  });

  it('gives a new InPlaceUpdate deployment its first machine set', async () => {
    await setup({
      mcd: deployment('d', 2, {
        strategy: {
          type: 'InPlaceUpdate',
          inPlaceUpdate: { maxSurge: 1, maxUnavailable: 0, orchestrationType: 'Manual' },
        },
      }),
    });
    await reconcile();
    expect(sets().map((s) => s.spec?.replicas)).to.deep.equal([2]);
  });

  it('reports an invalid spec in a Warning event and a ReplicaFailure condition, and does nothing else', async () => {
    const mcd = deployment('d', 2);
    if (mcd.spec !== undefined) mcd.spec.selector = { matchLabels: { app: 'other' } };
    await setup({ mcd });
    await reconcile();
    expect(sets()).to.deep.equal([]);
    const event = env.recorder.events[0];
    expect(event).to.deep.include({ type: 'Warning', reason: 'InvalidSpec' });
    expect(event?.message).to.contain('spec.selector');
    expect(condition('ReplicaFailure')).to.deep.include({ status: 'True', reason: 'InvalidSpec' });
    expect(condition('ReplicaFailure')?.message).to.equal(event?.message);
    expect(current().metadata.finalizers, 'not even the finalizer').to.equal(undefined);
  });

  it('clears the InvalidSpec condition once the spec is valid again', async () => {
    const mcd = deployment('d', 1);
    mcd.status = {
      conditions: [{ type: 'ReplicaFailure', status: 'True', reason: 'InvalidSpec', message: 'x' }],
    };
    await setup({ mcd });
    await reconcile();
    expect(condition('ReplicaFailure')).to.equal(undefined);
  });

  it('warns about an empty selector and only records the observed generation', async () => {
    const mcd = deployment('d', 1, { generation: 4 });
    if (mcd.spec !== undefined) mcd.spec.selector = {};
    await setup({ mcd });
    await reconcile();
    expect(env.recorder.events.map((e) => [e.type, e.reason])).to.deep.equal([['Warning', 'SelectingAll']]);
    expect(current().status?.observedGeneration).to.equal(4);
    expect(sets()).to.deep.equal([]);
  });

  it('requeues exactly at the progress deadline and then reports ProgressDeadlineExceeded', async () => {
    const v1 = deployment('d', 2, { progressDeadlineSeconds: 90 });
    const old = ownedSet(v1, 2, { revision: 1 });
    await setup({ mcd: withClass(v1, 'large'), sets: [old], machines: machinesOf(old, 'old', 2) });
    const after = await reconcile();
    expect(after).to.equal(90_000);
    await env.clock.advance(30_000);
    expect(await reconcile(), 'no progress: the same deadline').to.equal(60_000);
    await env.clock.advance(60_000);
    await reconcile();
    expect(condition('Progressing')).to.deep.include({ status: 'False', reason: 'ProgressDeadlineExceeded' });
  });

  it('taints old nodes, protects all nodes from autoscaler scale-down, and undoes both on completion', async () => {
    const v1 = deployment('d', 2, { annotations: { 'deployment.kubernetes.io/revision': '1' } });
    const old = ownedSet(v1, 2, { revision: 1 });
    const userOwned = node('user', {
      metadata: {
        name: 'user',
        annotations: { 'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true' },
      },
    });
    await setup({
      mcd: withClass(v1, 'large'),
      sets: [old],
      machines: [machineOf(old, 'old-0', { node: 'n-old' }), machineOf(old, 'old-1', { node: 'user' })],
      nodes: [
        node('n-old', { spec: { taints: [{ key: 'dedicated', value: 'x', effect: 'NoSchedule' }] } }),
        userOwned,
      ],
    });
    await reconcile();
    const oldNode = env.target.peek<Node>(CoreResources.nodes, 'n-old');
    expect(oldNode?.spec?.taints).to.deep.equal([
      { key: 'dedicated', value: 'x', effect: 'NoSchedule' },
      { key: 'deployment.machine.sapcloud.io/prefer-no-schedule', value: 'True', effect: 'PreferNoSchedule' },
    ]);
    expect(oldNode?.metadata.annotations).to.deep.equal({
      'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true',
      'cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm': 'true',
    });
    expect(
      env.target.peek<Node>(CoreResources.nodes, 'user')?.metadata.annotations,
      "a user's annotation is left alone",
    ).to.deep.equal({
      'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true',
    });
    const taintPatch = env.target
      .writes()
      .find((w) => w.name === 'n-old' && JSON.stringify(w.body).includes('taints'));
    expect(taintPatch?.patchType).to.equal('merge');
    expect(
      (taintPatch?.body as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion,
      'conditional taint patch',
    ).to.be.a('string');
    expect(
      setOfClass('small')?.metadata.annotations?.['deployment.machine.sapcloud.io/prefer-no-schedule'],
    ).to.equal('True');

    // Finish the rollout by hand; the new set's node carries the taint (as after a rollback).
    const newSet = setOfClass('large') as MachineSet;
    await env.api.update(MachineSetResource, {
      ...newSet,
      spec: { ...newSet.spec, replicas: 2 },
      metadata: {
        ...newSet.metadata,
        annotations: {
          ...(newSet.metadata.annotations ?? {}),
          'deployment.machine.sapcloud.io/prefer-no-schedule': 'True',
        },
      },
    });
    await env.settle();
    await addMachines(setOfClass('large'), 'new', 2);
    const newMachine = env.api.peek<Machine>(MachineResource, 'new-0', NS) as Machine;
    await env.api.update(MachineResource, {
      ...newMachine,
      metadata: { ...newMachine.metadata, labels: { ...newMachine.metadata.labels, node: 'n-new' } },
    });
    env.seed(
      CoreResources.nodes,
      node('n-new', {
        metadata: {
          name: 'n-new',
          annotations: {
            'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true',
            'cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm': 'true',
          },
        },
        spec: {
          taints: [
            {
              key: 'deployment.machine.sapcloud.io/prefer-no-schedule',
              value: 'True',
              effect: 'PreferNoSchedule',
            },
          ],
        },
      }),
    );
    await removeMachine('old-0');
    await removeMachine('old-1');
    const oldSet = setOfClass('small') as MachineSet;
    await env.api.update(MachineSetResource, { ...oldSet, spec: { ...oldSet.spec, replicas: 0 } });
    await env.settle();
    await setStatus(setOfClass('small'), 0, 0);
    await setStatus(setOfClass('large'), 2, 2);
    await reconcile();

    const newNode = env.target.peek<Node>(CoreResources.nodes, 'n-new');
    expect(newNode?.spec?.taints ?? [], 'taint removed from the new set').to.deep.equal([]);
    expect(newNode?.metadata.annotations ?? {}, 'scale-down protection lifted').to.deep.equal({});
    expect(setOfClass('large')?.metadata.annotations).to.not.have.property(
      'deployment.machine.sapcloud.io/prefer-no-schedule',
    );
    expect(env.target.peek<Node>(CoreResources.nodes, 'user')?.metadata.annotations).to.deep.equal({
      'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true',
    });
    expect(condition('Progressing')).to.deep.include({ status: 'True', reason: 'NewMachineSetAvailable' });
  });

  it('goes on rolling when a node cannot be patched, then fails the pass so the key backs off', async () => {
    const v1 = deployment('d', 2, { annotations: { 'deployment.kubernetes.io/revision': '1' } });
    const old = ownedSet(v1, 2, { revision: 1 });
    await setup({
      mcd: withClass(v1, 'large'),
      sets: [old],
      machines: [machineOf(old, 'old-0', { node: 'n-old' })],
      nodes: [node('n-old')],
    });
    const refused = new UnavailableError('admission webhook unavailable', 503, 'ServiceUnavailable');
    env.target.react((a) => (a.verb === 'patch' && a.name === 'n-old' ? refused : undefined));
    const error = await controller.reconcile(KEY, rctx).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error, 'the failure reaches the work queue').to.be.instanceOf(Error);
    expect((error as Error).message).to.contain('n-old');
    expect((error as Error).cause).to.equal(refused);
    await env.settle();
    expect(replicasOfClass('large'), 'the rollout step was taken').to.equal(1);
    expect(
      setOfClass('small')?.metadata.annotations,
      'the old set is not marked done while its node is not tainted',
    ).to.not.have.property('deployment.machine.sapcloud.io/prefer-no-schedule');

    env.target.clearReactors();
    await reconcile();
    expect(env.target.peek<Node>(CoreResources.nodes, 'n-old')?.spec?.taints?.[0]?.key).to.equal(
      'deployment.machine.sapcloud.io/prefer-no-schedule',
    );
  });

  it('leaves nodes alone without a target cluster', async () => {
    const v1 = deployment('d', 1);
    const old = ownedSet(v1, 1, { revision: 1 });
    await setup(
      { mcd: withClass(v1, 'large'), sets: [old], machines: [machineOf(old, 'old-0', { node: 'n-old' })] },
      { withTarget: false },
    );
    await reconcile();
    expect(env.target.writes()).to.deep.equal([]);
    expect(setOfClass('small')?.metadata.annotations).to.not.have.property(
      'deployment.machine.sapcloud.io/prefer-no-schedule',
    );
    expect(replicasOfClass('large')).to.equal(1);
  });

  it('scales a rollout in progress proportionally when replicas are lowered', async () => {
    const v1 = deployment('d', 6, {
      maxSurge: 2,
      maxUnavailable: 0,
      annotations: { 'deployment.kubernetes.io/revision': '2' },
    });
    const old = ownedSet(v1, 6, {
      revision: 1,
      className: 'small',
      created: '2026-11-20T01:00:00Z',
      annotations: { 'deployment.kubernetes.io/max-replicas': '8' },
    });
    const v2 = withClass(v1, 'large');
    const cur = ownedSet(v2, 2, {
      revision: 2,
      created: '2026-11-20T02:00:00Z',
      annotations: { 'deployment.kubernetes.io/max-replicas': '8' },
    });
    if (v2.spec !== undefined) v2.spec.replicas = 3;
    await setup({
      mcd: v2,
      sets: [old, cur],
      machines: [...machinesOf(old, 'old', 6), ...machinesOf(cur, 'new', 2)],
    });
    await reconcile();
    // allowed = 3 + 2 = 5 of 8: old 6*5/8 = 3.75 → 4, new 2*5/8 = 1.25 → 1
    expect(replicasOfClass('small')).to.equal(4);
    expect(replicasOfClass('large')).to.equal(1);
    for (const s of sets()) {
      expect(s.metadata.annotations).to.deep.include({
        'deployment.kubernetes.io/desired-replicas': '3',
        'deployment.kubernetes.io/max-replicas': '5',
      });
    }
  });

  it('does not create a second new set while its own creation is not yet in the cache', async () => {
    const mcd = deployment('d', 2);
    mcd.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup({ mcd });
    env.api.holdWatches(); // the cache lags behind the controller's writes
    await controller.reconcile(KEY, rctx);
    // A stale deployment in the cache makes its writes conflict: a requeue, never a second set.
    await controller.reconcile(KEY, rctx).catch((err: unknown) => {
      if (!(err instanceof ConflictError)) throw err;
    });
    env.api.releaseWatches();
    await env.settle();
    expect(sets()).to.have.length(1);
    expect(current().status?.collisionCount).to.equal(undefined);
    await reconcile();
    expect(sets()).to.have.length(1);
  });

  it('counts a name collision with a foreign set and retries with another name', async () => {
    const mcd = deployment('d', 1);
    const squatter = ownedSet(deployment('d', 1, { className: 'foreign' }), 1);
    const expectedName = ownedSet(mcd, 1).metadata.name ?? '';
    squatter.metadata.name = expectedName;
    squatter.metadata.uid = 'uid-squatter';
    squatter.metadata.ownerReferences = [];
    squatter.metadata.labels = { other: 'x' };
    await setup({ mcd, sets: [squatter] });
    let failed: unknown;
    try {
      await controller.reconcile(KEY, rctx);
    } catch (err) {
      failed = err;
    }
    expect(failed).to.be.instanceOf(Error);
    await env.settle();
    expect(current().status?.collisionCount).to.equal(1);
    await reconcile();
    const ours = sets().filter((s) => s.metadata.uid !== 'uid-squatter');
    expect(ours).to.have.length(1);
    expect(ours[0]?.metadata.name).to.not.equal(expectedName);
  });

  it('deletes its machine sets when deleted and lets go once they are gone', async () => {
    const mcd = deployment('d', 1);
    mcd.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    const ms = ownedSet(mcd, 1);
    ms.metadata.finalizers = ['machine.sapcloud.io/machine-controller-manager'];
    await setup({ mcd, sets: [ms] });
    await env.api.delete(MachineDeploymentResource, 'd', { namespace: NS });
    await env.settle();
    await reconcile();
    expect(
      env.api
        .writes()
        .filter((w) => w.verb === 'delete' && w.resource.startsWith('machinesets'))
        .map((w) => w.name),
    ).to.deep.equal([ms.metadata.name]);
    const gone = env.api.peek<MachineSet>(MachineSetResource, ms.metadata.name ?? '', NS) as MachineSet;
    await env.api.update(MachineSetResource, { ...gone, metadata: { ...gone.metadata, finalizers: [] } });
    await env.settle();
    await reconcile();
    expect(env.api.peek(MachineDeploymentResource, 'd', NS)).to.equal(undefined);
  });

  it('adopts a matching orphan set and releases an owned set it no longer selects', async () => {
    const mcd = deployment('d', 2);
    const orphan = ownedSet(mcd, 2, { revision: 1 });
    orphan.metadata.ownerReferences = [];
    const stray = ownedSet(mcd, 0, { className: 'stray' });
    stray.metadata.labels = { app: 'elsewhere' };
    await setup({ mcd, sets: [orphan, stray] });
    await reconcile();
    expect(setOfClass('small')?.metadata.ownerReferences?.[0]?.uid).to.equal('uid-d');
    expect(setOfClass('stray')?.metadata.ownerReferences).to.equal(undefined);
    expect(sets(), 'the adopted set is the new one: nothing created').to.have.length(2);
  });
});
