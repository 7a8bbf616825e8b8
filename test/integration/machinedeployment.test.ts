import { expect } from 'chai';

import type { CoreEvent, Node } from '../../lib/kube/types.js';
import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineDeploymentStrategy,
  type MachineSet,
} from '../../lib/api/types.js';
import { isAvailable, isTerminating } from '../../lib/controllers/machines.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { startMachineEnv, type MachineEnv } from './env/machineenv.js';
import { unlessNotFound, until } from './env/until.js';

const NS = 'default';
/** Machines of this class fail instead of becoming Running (stand-in machine controller). */
const NEVER_READY = 'never-ready';
const TRIGGER = 'node.machine.sapcloud.io/trigger-deletion-by-mcm';
const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';

const rolling = (maxSurge: number, maxUnavailable: number): MachineDeploymentStrategy => ({
  type: 'RollingUpdate',
  rollingUpdate: { maxSurge, maxUnavailable },
});

function newDeployment(
  name: string,
  replicas: number,
  strategy: MachineDeploymentStrategy,
  extra: { className?: string; revisionHistoryLimit?: number } = {},
): MachineDeployment {
  const labels = { app: 'it-mcd', mcd: name };
  const mcd: MachineDeployment = {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      strategy,
      template: {
        metadata: { labels },
        spec: { class: { kind: 'MachineClass', name: extra.className ?? 'v1' } },
      },
    },
  };
  if (extra.revisionHistoryLimit !== undefined && mcd.spec !== undefined)
    mcd.spec.revisionHistoryLimit = extra.revisionHistoryLimit;
  return mcd;
}

const classOf = (o: { spec?: { class?: { name?: string } } | undefined }): string | undefined =>
  o.spec?.class?.name;
const setClass = (ms: MachineSet): string | undefined => ms.spec?.template?.spec?.class?.name;

interface Observed {
  total: number;
  available: number;
  classes: Set<string>;
}

/**
 * Watches one deployment's machines and checks the rollout limits at every state the apiserver
 * reports: machines that exist (terminating ones included) never exceed replicas + maxSurge, and
 * available ones never drop below replicas - maxUnavailable.
 */
class InvariantWatch {
  readonly violations: string[] = [];
  readonly created = new Set<string>();
  readonly deleted = new Set<string>();
  maxTotal = 0;
  minAvailable = Number.POSITIVE_INFINITY;
  /** Whether machines of two classes ever existed at the same time. */
  mixed = false;
  private readonly machines = new Map<string, Machine>();
  private readonly abort = new AbortController();
  private done: Promise<void> | undefined;

  constructor(
    private readonly env: MachineEnv,
    private readonly deployment: string,
    private readonly limits: { maxTotal: number; minAvailable: number },
  ) {}

  async start(): Promise<void> {
    const selector = `mcd=${this.deployment}`;
    const list = await this.env.client.list<Machine>(MachineResource, {
      namespace: NS,
      labelSelector: selector,
    });
    for (const m of list.items) this.machines.set(m.metadata.name ?? '', m);
    this.check('initial list');
    const stream = await this.env.client.watch<Machine>(MachineResource, {
      namespace: NS,
      resourceVersion: list.metadata.resourceVersion ?? '',
      labelSelector: selector,
      signal: this.abort.signal,
    });
    this.done = (async () => {
      for await (const ev of stream) {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'ADDED') this.created.add(name);
        if (ev.type === 'DELETED') {
          this.deleted.add(name);
          this.machines.delete(name);
        } else if (ev.type === 'ADDED' || ev.type === 'MODIFIED') {
          this.machines.set(name, ev.object);
        }
        this.check(`${ev.type} ${name}`);
      }
    })();
  }

  observed(): Observed {
    const all = [...this.machines.values()];
    return {
      total: all.length,
      available: all.filter((m) => !isTerminating(m) && isAvailable(m)).length,
      classes: new Set(all.map((m) => classOf(m) ?? '')),
    };
  }

  private check(after: string): void {
    const o = this.observed();
    this.maxTotal = Math.max(this.maxTotal, o.total);
    this.minAvailable = Math.min(this.minAvailable, o.available);
    if (o.classes.size > 1) this.mixed = true;
    if (o.total > this.limits.maxTotal) this.violations.push(`${o.total} machines after ${after}`);
    if (o.available < this.limits.minAvailable)
      this.violations.push(`${o.available} available after ${after}`);
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.done;
  }
}

describe('MachineDeployment controller against a real kube-apiserver', function () {
  this.timeout(600_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(300_000);
    env = await startMachineEnv({
      standIn: {
        runningAfterMs: 200,
        terminateAfterMs: 200,
        nodes: true,
        fail: (m) => m.spec?.class?.name === NEVER_READY,
      },
    });
  });

  after(async () => {
    await (env as MachineEnv | undefined)?.stop();
  });

  const get = (name: string): Promise<MachineDeployment> =>
    env.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);

  async function machinesOf(name: string): Promise<Machine[]> {
    return (await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: `mcd=${name}` }))
      .items;
  }

  async function setsOf(name: string): Promise<MachineSet[]> {
    return (
      await env.client.list<MachineSet>(MachineSetResource, { namespace: NS, labelSelector: `mcd=${name}` })
    ).items;
  }

  async function patchSpec(
    name: string,
    spec: Record<string, unknown>,
    metadata?: Record<string, unknown>,
  ): Promise<void> {
    await env.client.patch(
      MachineDeploymentResource,
      name,
      { spec, ...(metadata === undefined ? {} : { metadata }) },
      { type: 'merge', namespace: NS },
    );
  }

  const setTemplateClass = (name: string, className: string): Promise<void> =>
    patchSpec(name, { template: { spec: { class: { name: className } } } });

  async function events(name: string): Promise<CoreEvent[]> {
    return (
      await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: `involvedObject.name=${name}`,
      })
    ).items;
  }

  /** Every machine runs the class, there are exactly `replicas`, and status reports completion. */
  async function complete(name: string, className: string, replicas: number): Promise<MachineDeployment> {
    return until(
      `${name}: ${replicas} running machines of class ${className} and a complete rollout`,
      async () => {
        const machines = await machinesOf(name);
        const ok =
          machines.length === replicas &&
          machines.every(
            (m) =>
              classOf(m) === className && m.status?.currentStatus?.phase === 'Running' && !isTerminating(m),
          );
        if (!ok) return undefined;
        const mcd = await get(name);
        const s = mcd.status;
        const progressing = s?.conditions?.find((c) => c.type === 'Progressing');
        const done =
          s?.updatedReplicas === replicas &&
          s.replicas === replicas &&
          s.availableReplicas === replicas &&
          s.observedGeneration === mcd.metadata.generation &&
          progressing?.reason === 'NewMachineSetAvailable';
        return done ? mcd : undefined;
      },
      90_000,
    );
  }

  it('scales a MachineDeployment up and down and reports status and the scale selector', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('scale', 2, rolling(1, 0)));
    const first = await complete('scale', 'v1', 2);
    expect(first.metadata.finalizers).to.include('machine.sapcloud.io/machine-controller-manager');
    expect(first.status).to.deep.include({
      labelSelector: 'app=it-mcd,mcd=scale',
      readyReplicas: 2,
      unavailableReplicas: 0,
    });
    expect(first.status?.conditions?.find((c) => c.type === 'Available')).to.deep.include({
      status: 'True',
      reason: 'MinimumReplicasAvailable',
    });

    await env.client.scale(MachineDeploymentResource, 'scale', NS, 4);
    await complete('scale', 'v1', 4);
    await env.client.scale(MachineDeploymentResource, 'scale', NS, 1);
    await complete('scale', 'v1', 1);
    const sets = await setsOf('scale');
    expect(sets).to.have.length(1);
    expect(sets[0]?.metadata.annotations?.['deployment.kubernetes.io/desired-replicas']).to.equal('1');
    const scale = await env.client.getScale(MachineDeploymentResource, 'scale', NS);
    expect(scale.status?.selector).to.equal('app=it-mcd,mcd=scale');
    expect((await events('scale')).map((e) => e.reason)).to.include('ScalingMachineSet');
  });

  for (const [surge, unavailable] of [
    [1, 1],
    [2, 0],
  ] as const) {
    it(`rolls 4 machines with maxSurge ${surge} / maxUnavailable ${unavailable} within both limits at every observed state`, async () => {
      const name = `roll-${surge}-${unavailable}`;
      await env.client.create(MachineDeploymentResource, newDeployment(name, 4, rolling(surge, unavailable)));
      await complete(name, 'v1', 4);
      const watch = new InvariantWatch(env, name, { maxTotal: 4 + surge, minAvailable: 4 - unavailable });
      await watch.start();
      try {
        await setTemplateClass(name, 'v2');
        const done = await complete(name, 'v2', 4);
        expect(done.metadata.annotations?.['deployment.kubernetes.io/revision']).to.equal('2');
      } finally {
        await watch.stop();
      }
      expect(watch.violations).to.deep.equal([]);
      expect(watch.mixed, 'old and new machines existed side by side').to.equal(true);
      expect(watch.maxTotal, 'the rollout used its surge').to.be.greaterThan(4);
      expect(watch.created.size, 'every machine replaced once').to.equal(4);
      const sets = await setsOf(name);
      expect(
        sets
          .map((s) => [
            setClass(s),
            s.spec?.replicas,
            s.metadata.annotations?.['deployment.kubernetes.io/revision'],
          ])
          .sort(),
      ).to.deep.equal([
        ['v1', 0, '1'],
        ['v2', 4, '2'],
      ]);
      const mcd = await get(name);
      expect(mcd.metadata.labels?.freeze, 'never frozen by the overshoot safety').to.equal(undefined);
    });
  }

  it('protects nodes from autoscaler scale-down and taints old nodes PreferNoSchedule during a rollout, and cleans up after', async () => {
    const name = 'nodes';
    await env.client.create(MachineDeploymentResource, newDeployment(name, 2, rolling(1, 0)));
    await complete(name, 'v1', 2);
    const oldNodes = (await machinesOf(name)).map((m) => m.metadata.labels?.node ?? '');
    expect(oldNodes.every((n) => n !== '')).to.equal(true);
    // A user's own scale-down protection on one node must survive the rollout.
    await env.client.patch(
      CoreResources.nodes,
      oldNodes[0] ?? '',
      { metadata: { annotations: { 'cluster-autoscaler.kubernetes.io/scale-down-disabled': 'true' } } },
      { type: 'merge' },
    );
    // New machines of this class never become available: the rollout stays in progress.
    await setTemplateClass(name, NEVER_READY);
    const nodeOf = (n: string): Promise<Node> => env.client.get<Node>(CoreResources.nodes, n);
    await until('old nodes protected and tainted', async () => {
      const nodes = await Promise.all(oldNodes.map(nodeOf));
      return nodes.every(
        (n) =>
          n.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled'] === 'true' &&
          (n.spec?.taints ?? []).some(
            (t) =>
              t.key === 'deployment.machine.sapcloud.io/prefer-no-schedule' &&
              t.effect === 'PreferNoSchedule',
          ),
      );
    });
    const byMcm = await Promise.all(oldNodes.map(nodeOf));
    expect(
      byMcm[1]?.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm'],
    ).to.equal('true');
    expect(
      byMcm[0]?.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm'],
    ).to.equal(undefined);

    // Roll forward to a good class: the rollout completes and MCM's own protection goes away.
    await setTemplateClass(name, 'v2');
    await complete(name, 'v2', 2);
    const newNodes = (await machinesOf(name)).map((m) => m.metadata.labels?.node ?? '');
    await until('protection removed from the nodes MCM annotated', async () => {
      const nodes = await Promise.all(newNodes.map(nodeOf));
      return nodes.every(
        (n) =>
          n.metadata.annotations?.['cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm'] ===
            undefined &&
          !(n.spec?.taints ?? []).some((t) => t.key === 'deployment.machine.sapcloud.io/prefer-no-schedule'),
      );
    });
  });

  it('Recreate deletes every old machine before creating new ones', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('recreate', 2, { type: 'Recreate' }));
    await complete('recreate', 'v1', 2);
    const watch = new InvariantWatch(env, 'recreate', { maxTotal: 2, minAvailable: 0 });
    await watch.start();
    try {
      await setTemplateClass('recreate', 'v2');
      await complete('recreate', 'v2', 2);
    } finally {
      await watch.stop();
    }
    expect(watch.violations).to.deep.equal([]);
    expect(watch.mixed, 'old and new machines never coexist').to.equal(false);
    expect(watch.minAvailable).to.equal(0);
  });

  it('rolls back to an earlier revision through spec.rollbackTo and clears it', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('rollback', 2, rolling(1, 0)));
    await complete('rollback', 'v1', 2);
    await setTemplateClass('rollback', 'v2');
    await complete('rollback', 'v2', 2);
    await patchSpec('rollback', { rollbackTo: { revision: 1 } });
    const done = await complete('rollback', 'v1', 2);
    expect(done.spec?.rollbackTo).to.equal(undefined);
    expect(classOf(done.spec?.template ?? {})).to.equal('v1');
    const v1 = (await setsOf('rollback')).find((s) => setClass(s) === 'v1');
    expect(v1?.metadata.annotations).to.deep.include({
      'deployment.kubernetes.io/revision': '3',
      'deployment.kubernetes.io/revision-history': '1',
    });
    const rollbackEvent = (await events('rollback')).find((e) => e.reason === 'DeploymentRollback');
    expect(rollbackEvent?.message).to.equal('Rolled back deployment "rollback" to revision 1');
  });

  /** Starts a rollout to `className` and pauses it as soon as the new set exists. */
  async function pauseMidRollout(name: string, className: string): Promise<MachineSet[]> {
    await setTemplateClass(name, className);
    await until(
      `new machine set of ${name}`,
      async () => (await setsOf(name)).some((s) => setClass(s) === className && (s.spec?.replicas ?? 0) > 0),
      30_000,
    );
    await patchSpec(name, { paused: true });
    await until(`${name} reported paused`, async () => {
      const mcd = await get(name);
      return mcd.status?.conditions?.find((c) => c.type === 'Progressing')?.reason === 'DeploymentPaused'
        ? mcd
        : undefined;
    });
    return setsOf(name);
  }

  it('stops a rollout while paused and continues it after resuming', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('pause', 3, rolling(1, 0)));
    await complete('pause', 'v1', 3);
    const atPause = await pauseMidRollout('pause', 'v2');
    const sizes = (sets: MachineSet[]): string[] =>
      sets.map((s) => `${setClass(s) ?? ''}=${s.spec?.replicas ?? 0}`).sort();
    expect(atPause.find((s) => setClass(s) === 'v1')?.spec?.replicas, 'paused mid-rollout').to.be.greaterThan(
      0,
    );

    // Long enough for several rollout steps (machines run 200 ms after creation) had it not been paused.
    const until3s = Date.now() + 3000;
    while (Date.now() < until3s) {
      expect(sizes(await setsOf('pause')), 'no progress while paused').to.deep.equal(sizes(atPause));
      await new Promise((r) => setTimeout(r, 250));
    }
    await patchSpec('pause', { paused: false });
    await complete('pause', 'v2', 3);
  });

  it('deletes old machine sets beyond revisionHistoryLimit', async () => {
    await env.client.create(
      MachineDeploymentResource,
      newDeployment('history', 1, rolling(1, 0), { revisionHistoryLimit: 1 }),
    );
    await complete('history', 'v1', 1);
    await setTemplateClass('history', 'v2');
    await complete('history', 'v2', 1);
    await setTemplateClass('history', 'v3');
    await complete('history', 'v3', 1);
    const left = await until('only the current and one old set', async () => {
      const sets = await setsOf('history');
      return sets.length === 2 ? sets : undefined;
    });
    expect(left.map(setClass).sort()).to.deep.equal(['v2', 'v3']);
  });

  it('spreads kubectl scale over the sets of a rollout in progress (proportional scaling)', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('proportional', 6, rolling(2, 0)));
    await complete('proportional', 'v1', 6);
    // Machines of this class never become available: the rollout stays at 6 old + 2 new.
    await setTemplateClass('proportional', NEVER_READY);
    const sizeOf = (sets: MachineSet[], c: string): number | undefined =>
      sets.find((s) => setClass(s) === c)?.spec?.replicas;
    await until('rollout stuck at 6 old + 2 new', async () => {
      const sets = await setsOf('proportional');
      return sizeOf(sets, 'v1') === 6 && sizeOf(sets, NEVER_READY) === 2 ? sets : undefined;
    });

    // Paused, the deployment only scales: what we read next is the proportional split itself,
    // not a rollout step that followed it.
    await patchSpec('proportional', { paused: true });
    await until('paused', async () =>
      (await get('proportional')).status?.conditions?.some(
        (c) => c.type === 'Progressing' && c.reason === 'DeploymentPaused',
      ),
    );
    const r = await env.cp.kubectl(['scale', 'machinedeployment', 'proportional', '--replicas=3', '-n', NS]);
    expect(r.code, r.stderr).to.equal(0);
    const after = await until('both sets resized for 3 replicas', async () => {
      const sets = await setsOf('proportional');
      return sets.every((s) => s.metadata.annotations?.['deployment.kubernetes.io/desired-replicas'] === '3')
        ? sets
        : undefined;
    });
    // 3 replicas + maxSurge 2 = 5 of the 8 the sets were sized for: 6*5/8 = 3.75 → 4 and 2*5/8 = 1.25 → 1.
    expect(sizeOf(after, 'v1')).to.equal(4);
    expect(sizeOf(after, NEVER_READY)).to.equal(1);
    for (const s of after)
      expect(s.metadata.annotations?.['deployment.kubernetes.io/max-replicas']).to.equal('5');

    // A new template rolls over both: the unavailable machines go first, then the old ones.
    await patchSpec('proportional', { paused: false, template: { spec: { class: { name: 'v2' } } } });
    await complete('proportional', 'v2', 3);
  });

  it('deletes exactly the machines named in trigger-deletion-by-mcm when replicas are lowered with it', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('targeted', 3, rolling(1, 0)));
    await complete('targeted', 'v1', 3);
    const original = (await machinesOf('targeted')).map((m) => m.metadata.name ?? '').sort();
    const victim = original[1] ?? '';
    const watch = new InvariantWatch(env, 'targeted', { maxTotal: 3, minAvailable: 0 });
    await watch.start();
    try {
      const now = new Date(Math.floor(Date.now() / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
      // What the autoscaler does: lower replicas and name the machine in one update.
      await patchSpec(
        'targeted',
        { replicas: 2 },
        { annotations: { [TRIGGER]: `${victim}~${now}`, [SCALER_TIME]: now } },
      );
      await until('the named machine gone', async () => {
        const names = (await machinesOf('targeted')).map((m) => m.metadata.name);
        return names.length === 2 && !names.includes(victim) ? names : undefined;
      });
      await complete('targeted', 'v1', 2);
    } finally {
      await watch.stop();
    }
    expect((await machinesOf('targeted')).map((m) => m.metadata.name).sort()).to.deep.equal(
      original.filter((n) => n !== victim),
    );
    expect([...watch.created], 'no replacement machine').to.deep.equal([]);
    expect([...watch.deleted]).to.deep.equal([victim]);
    const mcd = await until('trigger annotation cleared', async () => {
      const d = await get('targeted');
      return d.metadata.annotations?.[TRIGGER] === undefined ? d : undefined;
    });
    expect(mcd.metadata.annotations?.[SCALER_TIME]).to.be.a('string');
  });

  it('deletes its machine sets and machines when deleted, then goes away', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('gone', 2, rolling(1, 0)));
    await complete('gone', 'v1', 2);
    await env.client.delete(MachineDeploymentResource, 'gone', { namespace: NS });
    await until('deployment, sets and machines gone', async () => {
      const mcd = await unlessNotFound(get('gone'));
      return mcd === undefined &&
        (await setsOf('gone')).length === 0 &&
        (await machinesOf('gone')).length === 0
        ? true
        : undefined;
    });
  });
});

describe('MachineDeployment controller with a lagging cache (watch events 300 ms late)', function () {
  this.timeout(300_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(300_000);
    env = await startMachineEnv({ standIn: { runningAfterMs: 200, terminateAfterMs: 200 }, watchLagMs: 300 });
  });

  after(async () => {
    await (env as MachineEnv | undefined)?.stop();
  });

  it('rolls 4 machines with maxSurge 1 / maxUnavailable 1 within both limits at every observed state', async () => {
    await env.client.create(MachineDeploymentResource, newDeployment('lagging', 4, rolling(1, 1)));
    const running = async (className: string): Promise<Machine[]> =>
      until(`4 running ${className} machines`, async () => {
        const ms = (
          await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: 'mcd=lagging' })
        ).items;
        return ms.length === 4 &&
          ms.every((m) => classOf(m) === className && m.status?.currentStatus?.phase === 'Running')
          ? ms
          : undefined;
      });
    await running('v1');
    const watch = new InvariantWatch(env, 'lagging', { maxTotal: 5, minAvailable: 3 });
    await watch.start();
    try {
      await env.client.patch(
        MachineDeploymentResource,
        'lagging',
        { spec: { template: { spec: { class: { name: 'v2' } } } } },
        { type: 'merge', namespace: NS },
      );
      await running('v2');
      // Let a late decision taken on stale data show up before judging.
      await new Promise((r) => setTimeout(r, 2000));
    } finally {
      await watch.stop();
    }
    expect(watch.violations).to.deep.equal([]);
    expect(watch.created.size, 'every machine replaced exactly once').to.equal(4);
  });
});

describe('MachineDeployment controller without a target cluster (--target-kubeconfig=none)', function () {
  this.timeout(300_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(300_000);
    env = await startMachineEnv({
      standIn: { runningAfterMs: 200, terminateAfterMs: 200 },
      config: { targetKubeconfig: 'none' },
    });
  });

  after(async () => {
    await env.stop();
  });

  const get = (name: string): Promise<MachineDeployment> =>
    env.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);
  const machinesOf = async (name: string): Promise<Machine[]> =>
    (await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: `mcd=${name}` })).items;
  const events = async (name: string): Promise<CoreEvent[]> =>
    (
      await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: `involvedObject.name=${name}`,
      })
    ).items;
  const setTemplateClass = (name: string, className: string): Promise<unknown> =>
    env.client.patch(
      MachineDeploymentResource,
      name,
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: className } } } } },
      { type: 'merge', namespace: NS },
    );

  it('reports InPlaceUpdate, which needs nodes to drain and update, as unsupported in status and events, and still scales', async () => {
    await env.client.create(
      MachineDeploymentResource,
      newDeployment('inplace', 2, {
        type: 'InPlaceUpdate',
        inPlaceUpdate: { maxSurge: 1, maxUnavailable: 0, orchestrationType: 'Auto' },
      }),
    );
    const cond = await until('Progressing=False InPlaceUpdateNotSupported', async () => {
      const c = (await get('inplace')).status?.conditions?.find((x) => x.type === 'Progressing');
      return c?.reason === 'InPlaceUpdateNotSupported' ? c : undefined;
    });
    expect(cond.status).to.equal('False');
    expect(cond.message).to.contain('--target-kubeconfig=none');
    const warning = await until('Warning event', async () =>
      (await events('inplace')).find((e) => e.reason === 'InPlaceUpdateNotSupported'),
    );
    expect(warning.type).to.equal('Warning');
    await until('2 running machines', async () => {
      const ms = await machinesOf('inplace');
      return ms.length === 2 && ms.every((m) => m.status?.currentStatus?.phase === 'Running')
        ? ms
        : undefined;
    });
    await setTemplateClass('inplace', 'v2');
    await env.client.scale(MachineDeploymentResource, 'inplace', NS, 3);
    const machines = await until('3 running machines', async () => {
      const ms = await machinesOf('inplace');
      return ms.length === 3 && ms.every((m) => m.status?.currentStatus?.phase === 'Running')
        ? ms
        : undefined;
    });
    expect(new Set(machines.map(classOf)), 'template change not rolled out').to.deep.equal(new Set(['v1']));
  });
});
