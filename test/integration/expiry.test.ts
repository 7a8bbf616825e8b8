import { expect } from 'chai';

import {
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Pod } from '../../lib/kube/types.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const EXPIRE_AFTER = 'machine.mcm-ts.io/expire-after';
const BUDGET = 'machine.mcm-ts.io/disruption-budget';
const SCHEDULE = 'machine.mcm-ts.io/disruption-schedule';
const REPLACING = 'machine.mcm-ts.io/replacing';

/**
 * Follows one deployment's machines from a watch: the most machines under voluntary disruption at
 * once (marked replacing, being deleted after it or not), the fewest Running machines that stay
 * (not being deleted), and every machine created and deleted.
 */
class ExpiryWatch {
  private readonly machines = new Map<string, Machine>();
  maxDisrupted = 0;
  minRunning = Number.POSITIVE_INFINITY;
  readonly created = new Set<string>();
  readonly deleted = new Set<string>();
  /** When a machine was first seen marked replacing, by name (no earlier than it was marked). */
  readonly markedAt = new Map<string, number>();
  /** Each marked machine's creationTimestamp (ms), by name. */
  private readonly createdAt = new Map<string, number>();
  private stopWatch: (() => Promise<void>) | undefined;

  constructor(private readonly counting: () => boolean) {}

  async start(env: LifecycleEnv, app: string): Promise<void> {
    this.stopWatch = await watchEvents<Machine>(
      env.client,
      NS,
      MachineResource,
      { labelSelector: `app=${app}` },
      (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'DELETED') {
          this.machines.delete(name);
          this.deleted.add(name);
        } else {
          if (!this.machines.has(name) && ev.type === 'ADDED') this.created.add(name);
          this.machines.set(name, ev.object);
          this.seeMark(ev.object);
        }
        this.observe();
      },
      (items) => {
        for (const m of items) {
          this.machines.set(m.metadata.name ?? '', m);
          this.seeMark(m);
        }
        this.observe();
      },
    );
  }

  private seeMark(m: Machine): void {
    const name = m.metadata.name ?? '';
    if (m.metadata.annotations?.[REPLACING] === undefined || this.markedAt.has(name)) return;
    this.markedAt.set(name, Date.now());
    this.createdAt.set(name, Date.parse(m.metadata.creationTimestamp ?? ''));
  }

  /**
   * The machines marked replacing before `expireAfterMs` had passed since their creationTimestamp
   * (which has whole seconds, no later than the creation): each one's age when it was seen marked.
   */
  markedYoung(expireAfterMs: number): string[] {
    return [...this.markedAt]
      .map(([name, at]) => ({ name, ageMs: at - (this.createdAt.get(name) ?? Number.NaN) }))
      .filter((m) => !(m.ageMs >= expireAfterMs))
      .map((m) => `${m.name} marked ${(m.ageMs / 1000).toFixed(1)}s after its creation`);
  }

  private observe(): void {
    const all = [...this.machines.values()];
    const disrupted = all.filter((m) => m.metadata.annotations?.[REPLACING] !== undefined).length;
    this.maxDisrupted = Math.max(this.maxDisrupted, disrupted);
    if (!this.counting()) return;
    const running = all.filter((m) => m.metadata.deletionTimestamp === undefined && phaseOf(m) === 'Running');
    this.minRunning = Math.min(this.minRunning, running.length);
  }

  async stop(): Promise<void> {
    await this.stopWatch?.();
  }
}

async function runningMachines(env: LifecycleEnv, app: string, n: number): Promise<Machine[]> {
  return until(
    `${n} Running machines of ${app}`,
    async () => {
      const ms = (await env.machines(app)).filter(
        (m) => m.metadata.deletionTimestamp === undefined && phaseOf(m) === 'Running',
      );
      return ms.length === n ? ms : undefined;
    },
    90_000,
  );
}

async function annotate(
  env: LifecycleEnv,
  name: string,
  annotations: Record<string, string | null>,
): Promise<void> {
  await env.client.patch(
    MachineDeploymentResource,
    name,
    { metadata: { annotations } },
    { type: 'merge', namespace: NS },
  );
}

async function expiryCondition(env: LifecycleEnv, name: string) {
  const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);
  return mcd.status?.conditions?.find((c) => c.type === 'Expiry');
}

describe('expiry and disruption budgets (real kube-apiserver, the whole manager on the virtual cloud)', function () {
  this.timeout(420_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager();
    await env.createClass('exp');
  });

  after(async () => {
    await env.stop();
  });

  it('replaces 10 machines older than 45s, never more than the budget of 2 at once nor fewer than 10 Running; a do-not-disrupt pod holds its node until it is deleted', async () => {
    const app = 'exp10';
    await env.createDeployment(app, 10, 'exp', {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
    });
    const originals = await runningMachines(env, app, 10);
    const createdAt = Math.max(...originals.map((m) => Date.parse(m.metadata.creationTimestamp ?? '')));
    // A pod that vetoes disruption on the node of one machine (bound directly: no kubelet needed).
    const held = originals[3];
    const heldNode = held?.metadata.labels?.node ?? '';
    expect(heldNode, 'the machine’s node label').to.not.equal('');
    await env.client.create<Pod>(CoreResources.pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'db-0', namespace: NS, annotations: { 'karpenter.sh/do-not-disrupt': 'true' } },
      spec: { nodeName: heldNode, containers: [{ name: 'db', image: 'registry.invalid/db:1' }] },
    });

    let counting = true;
    const watch = new ExpiryWatch(() => counting);
    await watch.start(env, app);
    await annotate(env, app, { [EXPIRE_AFTER]: '45s', [BUDGET]: '2' });

    // All but the held one are replaced, within 2 minutes from when the first is about to expire.
    const others = originals.filter((m) => m !== held).map((m) => m.metadata.name ?? '');
    const expiresAt =
      Math.min(...originals.map((m) => Date.parse(m.metadata.creationTimestamp ?? ''))) + 45_000;
    await until(
      'the 9 machines without a vetoing pod replaced',
      () => others.every((n) => watch.deleted.has(n)),
      Math.max(0, expiresAt - 5_000 - Date.now()) + 120_000,
    );
    const replacedBy = Date.now();
    expect(watch.deleted.has(held?.metadata.name ?? ''), 'the held machine is still there').to.equal(false);
    const cond = await until(
      'the Expiry condition names the vetoing pod',
      async () => {
        const c = await expiryCondition(env, app);
        return c?.message?.includes('pod default/db-0 (karpenter.sh/do-not-disrupt=true)') === true
          ? c
          : undefined;
      },
      30_000,
    );
    expect(cond.status).to.equal('True');

    // Deleting the pod releases it.
    await env.client.delete(CoreResources.pods, 'db-0', { namespace: NS, gracePeriodSeconds: 0 });
    await until(
      'the held machine replaced after its pod went',
      () => watch.deleted.has(held?.metadata.name ?? ''),
      60_000,
    );
    counting = false;
    await annotate(env, app, { [EXPIRE_AFTER]: null });
    await watch.stop();
    // Nothing expires before its time: the originals, nor the replacements that grew 45s old.
    expect(watch.markedYoung(45_000), 'machines marked before they were 45s old').to.deep.equal([]);
    expect(watch.markedAt.size, 'machines marked').to.be.at.least(10);

    const secondsAfter = (replacedBy - createdAt) / 1000;
    console.log(
      `      10 machines: 9 replaced ${secondsAfter.toFixed(0)}s after the last was created (expire-after 45s); peak disrupted ${watch.maxDisrupted}; fewest Running ${watch.minRunning}; created ${watch.created.size}, deleted ${watch.deleted.size}`,
    );
    expect(watch.maxDisrupted, 'machines under disruption at once').to.be.within(1, 2);
    expect(watch.minRunning, 'Running machines that stay').to.be.at.least(10);
    expect(watch.created.size, 'one replacement per machine').to.equal(10);
    expect([...watch.deleted].sort()).to.deep.equal(originals.map((m) => m.metadata.name ?? '').sort());
    // maxSurge 1: one replacement at a time, 9 in well under a minute after they expired.
    expect(secondsAfter, 'replaced within the expected time').to.be.below(45 + 90);
    const events = await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS });
    expect(events.items.filter((e) => e.reason === 'Expired').length, 'Expired events').to.be.at.least(10);
  });

  it('holds every replacement while the disruption window is closed, and starts them once it opens', async () => {
    const app = 'expwin';
    await env.createDeployment(app, 2, 'exp', {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
    });
    await runningMachines(env, app, 2);
    // A 10-minute window opening at the next full minute that is at least 20 s away (UTC): time
    // for the condition to say it is closed first.
    const opens = new Date(Math.ceil((Date.now() + 20_000) / 60_000) * 60_000);
    const cron = `${opens.getUTCMinutes()} ${opens.getUTCHours()} * * *`;
    const watch = new ExpiryWatch(() => false);
    await watch.start(env, app);
    await annotate(env, app, { [EXPIRE_AFTER]: '10s', [BUDGET]: '100%', [SCHEDULE]: `${cron} 10m` });
    const waiting = await until(
      'the Expiry condition says the window is closed',
      async () => {
        const c = await expiryCondition(env, app);
        return c?.reason === 'ExpiredMachinesWaiting' ? c : undefined;
      },
      40_000,
    );
    expect(waiting.message).to.include(`the next opens at ${opens.toISOString()}`);
    // The watch saw every mark from before the window opened: the first one tells whether any came
    // early.
    await until(
      'a replacement started in the window',
      () => watch.markedAt.size > 0,
      Math.max(0, opens.getTime() - 1_000 - Date.now()) + 30_000,
    );
    const first = Math.min(...watch.markedAt.values());
    expect(first, 'marked once the window opened').to.be.at.least(opens.getTime() - 1_000);
    await annotate(env, app, { [EXPIRE_AFTER]: null });
    await watch.stop();
    expect(watch.markedYoung(10_000), 'machines marked before they were 10s old').to.deep.equal([]);
  });

  it('reports invalid disruption settings on the deployment and disrupts nothing', async () => {
    const app = 'expbad';
    await env.createDeployment(app, 1, 'exp');
    await runningMachines(env, app, 1);
    await annotate(env, app, { [EXPIRE_AFTER]: '1s', [BUDGET]: 'lots' });
    const c = await until(
      'the Expiry condition reports the budget',
      async () => {
        const x = await expiryCondition(env, app);
        return x?.message?.includes('lots') === true ? x : undefined;
      },
      30_000,
    );
    expect(c.message).to.include('no voluntary disruption');
    // Events are written in the background: the Warning may trail the condition by a moment.
    await until(
      'a Warning event on the deployment',
      async () => {
        const events = await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS });
        return events.items.some(
          (e) => e.reason === 'InvalidDisruptionSettings' && e.involvedObject.name === app,
        );
      },
      10_000,
    );
    const ms = await env.machines(app);
    expect(ms.filter((m) => m.metadata.annotations?.[REPLACING] !== undefined)).to.deep.equal([]);
  });
});
