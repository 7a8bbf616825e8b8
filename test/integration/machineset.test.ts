import { expect } from 'chai';

import type { CoreEvent } from '../../lib/kube/types.js';
import {
  API_VERSION,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineSet,
  type MachineSetStatus,
} from '../../lib/api/types.js';
import { isTerminating } from '../../lib/controllers/machines.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { startMachineEnv, type MachineEnv } from './env/machineenv.js';
import { unlessNotFound, until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const NS = 'default';

function newMachineSet(name: string, replicas: number): MachineSet {
  const labels = { app: 'it', set: name };
  return {
    apiVersion: API_VERSION,
    kind: 'MachineSet',
    metadata: { name, namespace: NS },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { class: { kind: 'MachineClass', name: 'small' } } },
    },
  };
}

/** Records every machine state the apiserver reports for one MachineSet's machines. */
class MachineWatch {
  readonly created = new Set<string>();
  maxActive = 0;
  private readonly active = new Map<string, boolean>();
  private stopWatch: (() => Promise<void>) | undefined;

  constructor(
    private readonly env: MachineEnv,
    private readonly setName: string,
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await watchEvents<Machine>(
      this.env.client,
      NS,
      MachineResource,
      { labelSelector: `set=${this.setName}` },
      (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'ADDED') this.created.add(name);
        if (ev.type === 'DELETED') this.active.delete(name);
        else if (ev.type === 'ADDED' || ev.type === 'MODIFIED')
          this.active.set(name, !isTerminating(ev.object));
        const n = [...this.active.values()].filter(Boolean).length;
        this.maxActive = Math.max(this.maxActive, n);
      },
    );
  }

  async stop(): Promise<void> {
    await this.stopWatch?.();
  }
}

/** Records each status the apiserver reports for one MachineSet, with when it arrived. */
class SetStatusWatch {
  readonly writes: { at: number; status: MachineSetStatus }[] = [];
  private last = '{}';
  private stopWatch: (() => Promise<void>) | undefined;

  constructor(
    private readonly env: MachineEnv,
    private readonly setName: string,
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await watchEvents<MachineSet>(
      this.env.client,
      NS,
      MachineSetResource,
      { fieldSelector: `metadata.name=${this.setName}` },
      (ev) => {
        const status = ev.object.status ?? {};
        const json = JSON.stringify(status);
        if (ev.type === 'DELETED' || json === this.last) return;
        this.last = json;
        this.writes.push({ at: Date.now(), status });
      },
    );
  }

  async stop(): Promise<void> {
    await this.stopWatch?.();
  }

  /** Status changes from the `from`th on that changed nothing but the four replica counts. */
  countOnly(from: number): { at: number; status: MachineSetStatus }[] {
    const rest = (s: MachineSetStatus): string => {
      const {
        replicas: _r,
        fullyLabeledReplicas: _f,
        readyReplicas: _ready,
        availableReplicas: _a,
        ...other
      } = s;
      return JSON.stringify(other);
    };
    return this.writes.filter((w, i) => {
      const prev = i >= Math.max(1, from) ? this.writes[i - 1] : undefined;
      return prev !== undefined && rest(w.status) === rest(prev.status);
    });
  }
}

describe('MachineSet controller against a real kube-apiserver', function () {
  this.timeout(300_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(300_000);
    env = await startMachineEnv({ standIn: { runningAfterMs: 300, terminateAfterMs: 300 } });
  });

  after(async () => {
    await (env as MachineEnv | undefined)?.stop();
  });

  async function machinesOf(name: string): Promise<Machine[]> {
    return (await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: `set=${name}` }))
      .items;
  }

  async function running(name: string, n: number): Promise<Machine[]> {
    return until(`${n} running machines of ${name}`, async () => {
      const ms = await machinesOf(name);
      const up = ms.filter((m) => m.status?.currentStatus?.phase === 'Running');
      return ms.length === n && up.length === n ? ms : undefined;
    });
  }

  it('scales a MachineSet up and down and reports status', async () => {
    await env.client.create(MachineSetResource, newMachineSet('scale', 3));
    await running('scale', 3);
    const status = await until('status with 3 ready replicas', async () => {
      const ms = await env.client.get<MachineSet>(MachineSetResource, 'scale', NS);
      return ms.status?.readyReplicas === 3 ? ms.status : undefined;
    });
    expect(status).to.deep.include({
      replicas: 3,
      availableReplicas: 3,
      fullyLabeledReplicas: 3,
      labelSelector: 'app=it,set=scale',
    });
    await env.client.scale(MachineSetResource, 'scale', NS, 1);
    await running('scale', 1);
    const scale = await env.client.getScale(MachineSetResource, 'scale', NS);
    expect(scale.status?.selector).to.equal('app=it,set=scale');
  });

  it('deletes machines in priority order when scaling down (lower machinepriority first)', async () => {
    await env.client.create(MachineSetResource, newMachineSet('order', 4));
    const machines = await running('order', 4);
    const [first, second] = machines.map((m) => m.metadata.name ?? '');
    if (first === undefined || second === undefined) throw new Error('machines missing');
    await env.client.patch(
      MachineResource,
      first,
      { metadata: { annotations: { 'machinepriority.machine.sapcloud.io': '1' } } },
      { type: 'merge', namespace: NS },
    );
    await env.client.patch(
      MachineResource,
      second,
      { metadata: { annotations: { 'machinepriority.machine.sapcloud.io': '2' } } },
      { type: 'merge', namespace: NS },
    );
    await env.client.scale(MachineSetResource, 'order', NS, 2);
    const left = await running('order', 2);
    expect(left.map((m) => m.metadata.name)).to.not.include.members([first, second]);
  });

  it('follows kubectl scale machineset', async () => {
    await env.client.create(MachineSetResource, newMachineSet('kubectl', 1));
    await running('kubectl', 1);
    const r = await env.cp.kubectl(['scale', 'machineset', 'kubectl', '--replicas=3', '-n', NS]);
    expect(r.code, r.stderr).to.equal(0);
    await running('kubectl', 3);
  });

  it('freezes an overshooting MachineSet, still removes the surplus, and unfreezes it again', async () => {
    const ms = await env.client.create(MachineSetResource, newMachineSet('overshoot', 1));
    await running('overshoot', 1);
    // Six extra machines appear under the set at once (high threshold for 1 replica: 2*1+2 = 4).
    const labels = ms.spec?.template?.metadata?.labels ?? {};
    await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        env.client.create<Machine>(MachineResource, {
          apiVersion: API_VERSION,
          kind: 'Machine',
          metadata: {
            name: `overshoot-extra-${i}`,
            namespace: NS,
            labels,
            ownerReferences: [
              {
                apiVersion: API_VERSION,
                kind: 'MachineSet',
                name: 'overshoot',
                uid: ms.metadata.uid ?? '',
                controller: true,
                blockOwnerDeletion: true,
              },
            ],
          },
          spec: { class: { kind: 'MachineClass', name: 'small' } },
        }),
      ),
    );
    const frozeEvent = await until('FrozeMachineSet event', async () => {
      const events = await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: 'involvedObject.name=overshoot',
      });
      return events.items.find((e) => e.reason === 'FrozeMachineSet');
    });
    expect(frozeEvent.message).to.contain('overshoot');
    await running('overshoot', 1);
    await until('unfrozen', async () => {
      const got = await env.client.get<MachineSet>(MachineSetResource, 'overshoot', NS);
      const frozenCond = got.status?.machineSetCondition?.some((c) => c.type === 'Frozen');
      return got.metadata.labels?.freeze === undefined && frozenCond !== true ? got : undefined;
    });
    // Events are written in the background: the one of the unfreeze may trail the status.
    await until('an UnfrozeMachineSet event', async () => {
      const events = await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: 'involvedObject.name=overshoot',
      });
      return events.items.some((e) => e.reason === 'UnfrozeMachineSet');
    });
  });

  it('writes changes of its machine counts at most about once a second, and the last counts land', async () => {
    await env.client.create(MachineSetResource, newMachineSet('paced', 0));
    const watch = new SetStatusWatch(env, 'paced');
    await watch.start();
    /**
     * A pass that changes only counts waits until a second after the last status write (timed
     * from the start of the passes): n such writes span at least (n - 1) seconds, less the
     * duration of a pass and the watch's delivery jitter, which the one write of slack covers.
     */
    const expectPaced = (phase: string, from: number): void => {
      // The watch saw the phase: its status changes, down to the settled counts.
      expect(watch.writes.length, `${phase}: status changes seen`).to.be.greaterThan(from);
      const paced = watch.countOnly(from);
      const first = paced[0];
      const last = paced.at(-1);
      // Fewer than two count-only writes cannot be closer than the pacing allows.
      if (first === undefined || last === undefined || paced.length < 2) return;
      const spanMs = last.at - first.at;
      expect(paced.length, `${phase}: count-only status writes over ${spanMs} ms`).to.be.at.most(
        Math.floor(spanMs / 1000) + 2,
      );
    };
    const settled = (want: number) =>
      until(`status of paced settled at ${want}`, async () => {
        const got = await env.client.get<MachineSet>(MachineSetResource, 'paced', NS);
        const s = got.status;
        return s?.replicas === want && s.readyReplicas === want && s.availableReplicas === want
          ? s
          : undefined;
      });
    try {
      await env.client.scale(MachineSetResource, 'paced', NS, 16);
      await running('paced', 16);
      expect(await settled(16)).to.include({ replicas: 16, fullyLabeledReplicas: 16 });
      expectPaced('scale-up', 0);
      const upWrites = watch.writes.length;
      await env.client.scale(MachineSetResource, 'paced', NS, 0);
      await until('no machines of paced', async () =>
        (await machinesOf('paced')).length === 0 ? true : undefined,
      );
      expect(await settled(0)).to.include({ replicas: 0, fullyLabeledReplicas: 0 });
      expectPaced('scale-down', upWrites);
    } finally {
      await watch.stop();
    }
  });

  it('deletes its machines when the MachineSet is deleted, then goes away', async () => {
    await env.client.create(MachineSetResource, newMachineSet('gone', 2));
    await running('gone', 2);
    await env.client.delete(MachineSetResource, 'gone', { namespace: NS });
    await until('machines and set gone', async () => {
      const ms = await machinesOf('gone');
      const set = await unlessNotFound(env.client.get(MachineSetResource, 'gone', NS));
      return ms.length === 0 && set === undefined ? true : undefined;
    });
  });
});

describe('MachineSet controller with a lagging cache (watch events 500 ms late)', function () {
  this.timeout(300_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(300_000);
    env = await startMachineEnv({ standIn: { runningAfterMs: 300, terminateAfterMs: 300 }, watchLagMs: 500 });
  });

  after(async () => {
    await (env as MachineEnv | undefined)?.stop();
  });

  it('never creates a machine too many under many quick scale changes', async () => {
    await env.client.create(MachineSetResource, newMachineSet('burst', 0));
    const watch = new MachineWatch(env, 'burst');
    await watch.start();
    try {
      for (let r = 1; r <= 12; r++) {
        await env.client.scale(MachineSetResource, 'burst', NS, r);
        await new Promise((resolve) => setTimeout(resolve, 60));
      }
      await until('12 running machines', async () => {
        const ms = (
          await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: 'set=burst' })
        ).items;
        return ms.length === 12 && ms.every((m) => m.status?.currentStatus?.phase === 'Running')
          ? ms
          : undefined;
      });
      // Give a late, wrong decision the chance to show up before judging.
      await new Promise((r) => setTimeout(r, 3000));
      expect(watch.created.size, 'machines ever created').to.equal(12);
      expect(watch.maxActive, 'most non-terminating machines at any time').to.equal(12);
    } finally {
      await watch.stop();
    }
  });
});
