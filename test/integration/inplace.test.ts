import { expect } from 'chai';

import { Label, MachinePhase } from '../../lib/api/constants.js';
import {
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../lib/api/types.js';
import { isTerminating } from '../../lib/controllers/machines.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Node, Pod } from '../../lib/kube/types.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const inPlace = (orchestrationType: 'Auto' | 'Manual', maxUnavailable = 1, maxSurge = 0) => ({
  strategy: {
    type: 'InPlaceUpdate' as const,
    inPlaceUpdate: { maxSurge, maxUnavailable, orchestrationType },
  },
});

function pod(name: string, node: string): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS, labels: { app: 'workload' } },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'app', image: 'registry.invalid/app:1' }],
    },
  };
}

/**
 * Follows one deployment's machines, their nodes and the pods on them through watches, and
 * records what the in-place update must never do: take more machines out of service at once than
 * maxUnavailable (a machine is out of service from the moment its node is cordoned or selected
 * until it is Running on a schedulable node again), create or delete a machine, or update a node
 * whose pods were not drained yet.
 */
class InPlaceWatch {
  maxOutOfService = 0;
  readonly created = new Set<string>();
  readonly deleted = new Set<string>();
  /** Node → when its update result appeared, and when each of its pods was deleted. */
  readonly updatedAt = new Map<string, number>();
  readonly podGoneAt = new Map<string, number>();
  /** Machine → the phases it went through, in order. */
  readonly phases = new Map<string, string[]>();
  private readonly machines = new Map<string, Machine>();
  private readonly nodes = new Map<string, Node>();
  private readonly abort = new AbortController();
  private readonly loops: Promise<void>[] = [];

  constructor(
    private readonly env: LifecycleEnv,
    private readonly app: string,
  ) {}

  private outOfService(): number {
    let n = 0;
    for (const m of this.machines.values()) {
      if (isTerminating(m)) continue;
      const node = this.nodes.get(m.metadata.labels?.[Label.Node] ?? '');
      const cordoned = node?.spec?.unschedulable === true;
      const selected = node?.metadata.labels?.[Label.SelectedForUpdate] !== undefined;
      if (phaseOf(m) !== MachinePhase.Running || cordoned || selected) n++;
    }
    return n;
  }

  private record(): void {
    this.maxOutOfService = Math.max(this.maxOutOfService, this.outOfService());
  }

  async start(): Promise<void> {
    const c = this.env.client;
    const signal = this.abort.signal;
    const machines = await c.list<Machine>(MachineResource, {
      namespace: NS,
      labelSelector: `app=${this.app}`,
    });
    for (const m of machines.items) this.machines.set(m.metadata.name ?? '', m);
    const nodes = await c.list<Node>(CoreResources.nodes);
    for (const n of nodes.items) this.nodes.set(n.metadata.name ?? '', n);
    const pods = await c.list<Pod>(CoreResources.pods, { namespace: NS });
    const machineStream = await c.watch<Machine>(MachineResource, {
      namespace: NS,
      labelSelector: `app=${this.app}`,
      resourceVersion: machines.metadata.resourceVersion ?? '',
      signal,
    });
    const nodeStream = await c.watch<Node>(CoreResources.nodes, {
      resourceVersion: nodes.metadata.resourceVersion ?? '',
      signal,
    });
    const podStream = await c.watch<Pod>(CoreResources.pods, {
      namespace: NS,
      resourceVersion: pods.metadata.resourceVersion ?? '',
      signal,
    });
    this.loops.push(
      (async () => {
        for await (const ev of machineStream) {
          const name = ev.object.metadata.name ?? '';
          if (ev.type === 'ADDED') this.created.add(name);
          if (ev.type === 'DELETED' || isTerminating(ev.object)) this.deleted.add(name);
          if (ev.type === 'DELETED') this.machines.delete(name);
          else if (ev.type === 'ADDED' || ev.type === 'MODIFIED') {
            this.machines.set(name, ev.object);
            const seen = this.phases.get(name) ?? [];
            if (seen.at(-1) !== phaseOf(ev.object)) this.phases.set(name, [...seen, phaseOf(ev.object)]);
          }
          this.record();
        }
      })(),
      (async () => {
        for await (const ev of nodeStream) {
          const name = ev.object.metadata.name ?? '';
          if (ev.type === 'DELETED') this.nodes.delete(name);
          else if (ev.type === 'ADDED' || ev.type === 'MODIFIED') {
            this.nodes.set(name, ev.object);
            if (ev.object.metadata.labels?.[Label.UpdateResult] !== undefined && !this.updatedAt.has(name))
              this.updatedAt.set(name, Date.now());
          }
          this.record();
        }
      })(),
      (async () => {
        for await (const ev of podStream) {
          const name = ev.object.metadata.name ?? '';
          const going = ev.type === 'DELETED' || ev.object.metadata.deletionTimestamp !== undefined;
          if (going && !this.podGoneAt.has(name)) this.podGoneAt.set(name, Date.now());
        }
      })(),
    );
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await Promise.all(this.loops);
  }
}

async function machineSets(env: LifecycleEnv, app: string): Promise<MachineSet[]> {
  return (
    await env.client.list<MachineSet>(MachineSetResource, { namespace: NS, labelSelector: `app=${app}` })
  ).items;
}

async function runningMachines(env: LifecycleEnv, app: string, n: number): Promise<Machine[]> {
  return until(
    `${n} Running machines of ${app}`,
    async () => {
      const ms = (await env.machines(app)).filter(
        (m) => phaseOf(m) === MachinePhase.Running && !isTerminating(m),
      );
      return ms.length === n ? ms : undefined;
    },
    120_000,
  );
}

async function changeClass(env: LifecycleEnv, name: string, className: string): Promise<void> {
  await env.client.patch(
    MachineDeploymentResource,
    name,
    { spec: { template: { spec: { class: { kind: 'MachineClass', name: className } } } } },
    { type: 'merge', namespace: NS },
  );
}

/** The set whose template names the class, once it exists. */
async function setOfClass(env: LifecycleEnv, app: string, className: string): Promise<MachineSet> {
  return until(`the machine set of ${app} with class ${className}`, async () =>
    (await machineSets(env, app)).find((s) => s.spec?.template?.spec?.class?.name === className),
  );
}

const identity = (ms: readonly Machine[]): string[] =>
  ms.map((m) => `${m.metadata.name ?? ''}=${m.spec?.providerID ?? ''}`).sort();

describe('InPlaceUpdate (real kube-apiserver, kwok running pods)', function () {
  this.timeout(300_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start({ kwok: true });
    await env.startManager();
    await env.createClass('v1');
    await env.createClass('v2', { inPlaceUpdate: { duration: '1s' } });
    await env.createClass('broken', {
      inPlaceUpdate: { duration: '1s', fail: true, failureReason: 'kernel panic after reboot' },
    });
  });

  after(async () => {
    await env.stop();
  });

  it('changing the class updates all 4 machines in place, never more than maxUnavailable at a time, draining each node first', async () => {
    await env.createDeployment('ip', 4, 'v1', inPlace('Auto', 1));
    const before = await runningMachines(env, 'ip', 4);
    for (const m of before)
      await env.client.create(
        CoreResources.pods,
        pod(`w-${m.metadata.name ?? ''}`, m.metadata.labels?.[Label.Node] ?? ''),
      );
    await until('the workload pods run', async () => {
      const pods = (
        await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: 'app=workload' })
      ).items;
      return pods.filter((p) => p.status?.phase === 'Running').length === 4;
    });

    const watch = new InPlaceWatch(env, 'ip');
    await watch.start();
    try {
      await changeClass(env, 'ip', 'v2');
      const target = await setOfClass(env, 'ip', 'v2');
      await until(
        'all 4 machines in the new set, Running, and the deployment complete',
        async () => {
          const ms = (await env.machines('ip')).filter((m) => !isTerminating(m));
          const owned = ms.filter((m) =>
            m.metadata.ownerReferences?.some((r) => r.uid === target.metadata.uid),
          );
          const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'ip', NS);
          return (
            owned.length === 4 &&
            owned.every((m) => phaseOf(m) === MachinePhase.Running) &&
            mcd.status?.updatedReplicas === 4 &&
            mcd.status.availableReplicas === 4 &&
            mcd.status.conditions?.some(
              (c) => c.type === 'Progressing' && c.reason === 'NewMachineSetAvailable',
            )
          );
        },
        240_000,
      );
    } finally {
      await watch.stop();
    }

    const after = (await env.machines('ip')).filter((m) => !isTerminating(m));
    expect(identity(after), 'the same machines on the same VMs').to.deep.equal(identity(before));
    expect(
      after.every((m) => m.spec?.class?.name === 'v2'),
      'every machine runs the new class',
    ).to.equal(true);
    expect([...watch.created], 'no machine created').to.deep.equal([]);
    expect([...watch.deleted], 'no machine deleted').to.deep.equal([]);
    expect(watch.maxOutOfService, 'machines out of service at once').to.equal(1);
    for (const m of before) {
      const node = m.metadata.labels?.[Label.Node] ?? '';
      const updated = watch.updatedAt.get(node);
      const drained = watch.podGoneAt.get(`w-${m.metadata.name ?? ''}`);
      expect(updated, `node ${node} was updated`).to.be.a('number');
      expect(drained, `the pod on ${node} was evicted`).to.be.a('number');
      expect(drained, `the pod on ${node} left before the update`).to.be.below(updated as number);
    }
    const nodes = (await env.nodes()).filter((n) =>
      before.some((m) => m.metadata.labels?.[Label.Node] === n.metadata.name),
    );
    for (const n of nodes) {
      expect(n.spec?.unschedulable ?? false, `${n.metadata.name ?? ''} schedulable again`).to.equal(false);
      expect(n.metadata.labels ?? {}).to.not.have.any.keys(
        Label.CandidateForUpdate,
        Label.SelectedForUpdate,
        Label.UpdateResult,
      );
    }
    const old = (await machineSets(env, 'ip')).find((s) => s.spec?.template?.spec?.class?.name === 'v1');
    expect(old?.spec?.replicas, 'the old set is empty').to.equal(0);
  });

  it('Manual orchestration updates only the nodes a user labels selected-for-update', async () => {
    await env.createDeployment('man', 2, 'v1', inPlace('Manual', 1, 1));
    const before = await runningMachines(env, 'man', 2);
    await changeClass(env, 'man', 'v2');
    const target = await setOfClass(env, 'man', 'v2');
    expect(target.spec?.replicas, 'Manual: the new set starts empty').to.equal(0);
    const [first, second] = [...before].sort((a, b) =>
      (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''),
    );
    const nodeOf = (m: Machine | undefined): string => m?.metadata.labels?.[Label.Node] ?? '';
    await until('both nodes are update candidates', async () => {
      const nodes = await env.nodes();
      return [first, second].every((m) =>
        nodes.some(
          (n) => n.metadata.name === nodeOf(m) && n.metadata.labels?.[Label.CandidateForUpdate] !== undefined,
        ),
      );
    });

    await env.client.patch(
      CoreResources.nodes,
      nodeOf(first),
      { metadata: { labels: { [Label.SelectedForUpdate]: 'true' } } },
      { type: 'merge' },
    );
    const moved = await until('the selected machine is updated and moved to the new set', async () => {
      const m = (await env.machines('man')).find((x) => x.metadata.name === first?.metadata.name);
      return m?.metadata.ownerReferences?.some((r) => r.uid === target.metadata.uid) === true &&
        phaseOf(m) === MachinePhase.Running
        ? m
        : undefined;
    });
    expect(moved.spec?.providerID).to.equal(first?.spec?.providerID);
    const untouched = (await env.machines('man')).find((x) => x.metadata.name === second?.metadata.name);
    expect(
      untouched?.metadata.ownerReferences?.some((r) => r.uid === target.metadata.uid),
      'the other machine stays in the old set',
    ).to.equal(false);
    expect(phaseOf(untouched as Machine)).to.equal(MachinePhase.Running);
    const otherNode = await env.client.get<Node>(CoreResources.nodes, nodeOf(second));
    expect(otherNode.metadata.labels ?? {}, 'not selected, not updated').to.not.have.any.keys(
      Label.SelectedForUpdate,
      Label.UpdateResult,
    );
    expect(otherNode.spec?.unschedulable ?? false).to.equal(false);

    await env.client.patch(
      CoreResources.nodes,
      nodeOf(second),
      { metadata: { labels: { [Label.SelectedForUpdate]: 'true' } } },
      { type: 'merge' },
    );
    await until('the second machine follows and the rollout completes', async () => {
      const sets = await machineSets(env, 'man');
      const newSet = sets.find((s) => s.metadata.uid === target.metadata.uid);
      const ms = (await env.machines('man')).filter((m) => !isTerminating(m));
      return (
        newSet?.spec?.replicas === 2 &&
        ms.length === 2 &&
        ms.every((m) => phaseOf(m) === MachinePhase.Running && m.spec?.class?.name === 'v2')
      );
    });
    expect(identity((await env.machines('man')).filter((m) => !isTerminating(m)))).to.deep.equal(
      identity(before),
    );
  });

  it('a failed update leaves the machine InPlaceUpdateFailed, then Failed after the health timeout, and the rollout reports it', async () => {
    await env.createDeployment('bad', 2, 'v1', inPlace('Auto', 1), { healthTimeout: '5s' });
    await runningMachines(env, 'bad', 2);
    const watch = new InPlaceWatch(env, 'bad');
    await watch.start();
    let name = '';
    try {
      await changeClass(env, 'bad', 'broken');
      const failed = await until(
        'a machine whose in-place update failed',
        async () => (await env.machines('bad')).find((m) => phaseOf(m) === MachinePhase.InPlaceUpdateFailed),
        120_000,
      );
      expect(failed.status?.lastOperation?.state).to.equal('Failed');
      expect(failed.status?.lastOperation?.type).to.equal('InPlaceUpdate');
      expect(failed.status?.lastOperation?.description).to.contain('kernel panic after reboot');
      name = failed.metadata.name ?? '';
      const reported = await until('the deployment lists the failed machine', async () => {
        const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'bad', NS);
        return mcd.status?.failedMachines?.find((f) => f.name === name);
      });
      expect(reported.lastOperation?.description).to.contain('kernel panic after reboot');
      const events = await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: 'involvedObject.name=bad',
      });
      expect(events.items.find((e) => e.reason === 'InPlaceUpdateFailed')?.message).to.contain(name);
      await until(
        'the machine is marked Failed once its health timeout ran out',
        () => watch.phases.get(name)?.includes(MachinePhase.Failed),
        60_000,
      );
    } finally {
      await watch.stop();
    }
    const phases = watch.phases.get(name) ?? [];
    const at = (p: string): number => phases.indexOf(p);
    expect(at(MachinePhase.InPlaceUpdating), phases.join(' → ')).to.be.at.least(0);
    expect(at(MachinePhase.InPlaceUpdating)).to.be.below(at(MachinePhase.InPlaceUpdateFailed));
    expect(at(MachinePhase.InPlaceUpdateFailed)).to.be.below(at(MachinePhase.Failed));
  });
});
