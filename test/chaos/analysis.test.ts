// The fault suite's figures on hand-made timelines: the definitions, checked where they can be
// wrong (around a change of replicas, ranks, rollouts), before any real run relies on them.

import { expect } from 'chai';

import { analyze, launchRoundsWithin, type AnalysisOptions } from './analysis.js';
import type { RecordedEvent } from './recorder.js';

/** Builds a timeline write by write, one revision each. */
class Timeline {
  readonly events: RecordedEvent[] = [];
  private rev = 100;
  private readonly machines = new Map<string, Record<string, unknown>>();

  deployment(replicas: number, cls = 'v1', maxSurge: number | string = 1): this {
    return this.push('machinedeployments', 'd', {
      metadata: { name: 'd' },
      spec: {
        replicas,
        selector: { matchLabels: { app: 'd' } },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge, maxUnavailable: 0 } },
        template: { spec: { class: { name: cls } } },
      },
    });
  }

  machine(
    name: string,
    phase = 'Running',
    cls = 'v1',
    extra: { annotations?: Record<string, string>; deleting?: boolean } = {},
  ): this {
    const obj = {
      metadata: {
        name,
        labels: { app: 'd' },
        ...(extra.annotations === undefined ? {} : { annotations: extra.annotations }),
        ...(extra.deleting === true ? { deletionTimestamp: '2025-01-01T00:00:00Z' } : {}),
      },
      // The instance of machine `a` is i-a.
      spec: { class: { name: cls }, providerID: `aws:///eu-west-1a/i-${name}` },
      status: { currentStatus: { phase } },
    };
    const created = !this.machines.has(name);
    this.machines.set(name, obj);
    return this.push('machines', name, obj, created);
  }

  deleting(name: string): this {
    const m = this.machines.get(name);
    if (m === undefined) throw new Error(name);
    const meta = m.metadata as Record<string, unknown>;
    return this.push('machines', name, { ...m, metadata: { ...meta, deletionTimestamp: 'now' } }, false);
  }

  gone(name: string): this {
    this.machines.delete(name);
    this.events.push({
      rev: ++this.rev,
      at: 0,
      resource: 'machines',
      namespace: 'default',
      name,
      type: 'delete',
      created: false,
    });
    return this;
  }

  node(name: string, type: 'put' | 'delete' = 'put'): this {
    this.events.push({
      rev: ++this.rev,
      at: 0,
      resource: 'nodes',
      namespace: '',
      name,
      type,
      created: type === 'put',
    });
    return this;
  }

  get now(): number {
    return this.rev;
  }

  private push(
    resource: 'machines' | 'machinedeployments',
    name: string,
    object: Record<string, unknown>,
    created = false,
  ): this {
    this.events.push({
      rev: ++this.rev,
      at: 0,
      resource,
      namespace: 'default',
      name,
      type: 'put',
      created,
      object,
    });
    return this;
  }
}

const run = (
  t: Timeline,
  fromRev = 0,
  more: Pick<AnalysisOptions, 'interruptedInstances'> = {},
): ReturnType<typeof analyze> =>
  analyze(t.events, { namespace: 'default', deployment: 'd', fromRev, toRev: t.now, ...more });

describe('fault suite analysis', () => {
  it('counts machines beyond replicas + maxSurge after every write', () => {
    const t = new Timeline().deployment(2).machine('a').machine('b').machine('c');
    expect(run(t).beyondLimit).to.equal(0);
    t.machine('d');
    const a = run(t);
    expect(a.beyondLimit).to.equal(1);
    expect(a.firstBeyond).to.contain('4 machines, replicas 2');
    expect(a.peakActive).to.equal(4);
  });

  it('accepts the deletion of a machine replaced by expiry only once the machines that stay are Running', () => {
    const replacing = { annotations: { 'machine.mcm-ts.io/replacing': 'expired' } };
    const early = new Timeline().deployment(2).machine('a').machine('b');
    early.machine('a', 'Running', 'v1', replacing).machine('c', 'Pending').deleting('a');
    const e = run(early);
    expect(e.wronglyDeleted.map((d) => d.machine)).to.deep.equal(['a']);
    expect(e.wronglyDeleted[0]?.why).to.contain('before its replacement was there');
    const late = new Timeline().deployment(2).machine('a').machine('b');
    late.machine('a', 'Running', 'v1', replacing).machine('c', 'Pending').machine('c').deleting('a');
    const l = run(late);
    expect(l.wronglyDeleted).to.deep.equal([]);
    expect(l.deletions[0]?.why).to.contain('replaced (2 Running machines stay for 2 replicas)');
  });

  it('counts other replaced machines still Running as cover (they serve), but never the one going', () => {
    const replacing = { annotations: { 'machine.mcm-ts.io/replacing': 'rebalance-recommended' } };
    // 3 replicas, maxSurge 2: a and b replaced at once, c stays; d is up, e still boots.
    const ok = new Timeline().deployment(3, 'v1', 2).machine('a').machine('b').machine('c');
    ok.machine('a', 'Running', 'v1', replacing).machine('b', 'Running', 'v1', replacing);
    ok.machine('d').machine('e', 'Pending').deleting('a');
    expect(run(ok).wronglyDeleted, 'b, c and d Running cover 3 replicas').to.deep.equal([]);
    // Both go while only d is up: availability would drop to 2.
    const bad = new Timeline().deployment(3, 'v1', 2).machine('a').machine('b').machine('c');
    bad.machine('a', 'Running', 'v1', replacing).machine('b', 'Running', 'v1', replacing);
    bad.machine('d').machine('e', 'Pending').deleting('a').deleting('b');
    expect(run(bad).wronglyDeleted.map((d) => d.machine)).to.deep.equal(['b']);
  });

  it('an interrupted machine is neither counted beyond the limit nor wrongly deleted, even before its replacement is there', () => {
    const interrupted = { annotations: { 'machine.mcm-ts.io/replacing': 'interrupted' } };
    const t = new Timeline().deployment(3, 'v1', 0).machine('a').machine('b').machine('c');
    t.machine('a', 'Running', 'v1', interrupted).machine('b', 'Running', 'v1', interrupted);
    t.machine('d', 'Pending').machine('e', 'Pending').deleting('a').deleting('b');
    // The warnings named a's instance by id and b's by providerID.
    const a = run(t, 0, { interruptedInstances: ['i-a', 'aws:///eu-west-1a/i-b'] });
    expect(a.beyondLimit).to.equal(0);
    expect(a.wronglyDeleted).to.deep.equal([]);
    expect(a.deletions.map((d) => d.why)).to.deep.equal([
      'interrupted (the cloud reclaims its VM)',
      'interrupted (the cloud reclaims its VM)',
    ]);
    // Without the mark, the same writes break both.
    const u = new Timeline().deployment(3, 'v1', 0).machine('a').machine('b').machine('c');
    u.machine('d', 'Pending').machine('e', 'Pending').deleting('a').deleting('b');
    const b = run(u);
    expect(b.beyondLimit).to.equal(2);
  });

  it('does not trust the interrupted mark: a machine so marked whose instance got no warning counts beyond the limit, and its deletion was not chosen', () => {
    const interrupted = { annotations: { 'machine.mcm-ts.io/replacing': 'interrupted' } };
    const t = new Timeline().deployment(3, 'v1', 0).machine('a').machine('b').machine('c');
    t.machine('a', 'Running', 'v1', interrupted).machine('b', 'Running', 'v1', interrupted);
    t.machine('d', 'Pending').machine('e', 'Pending').deleting('a').deleting('b');
    // Only a's instance was warned: b was marked (and replaced) for nothing.
    const one = run(t, 0, { interruptedInstances: ['i-a'] });
    expect(one.beyondLimit, "b's replacement is surge beyond replicas 3 + maxSurge 0").to.equal(1);
    expect(one.firstBeyond).to.contain('4 machines, replicas 3');
    expect(one.wronglyDeleted.map((d) => [d.machine, d.why])).to.deep.equal([
      ['b', 'marked interrupted, but its instance i-b got no interruption warning'],
    ]);
    expect(one.deletions.find((d) => d.machine === 'a')?.chosen, 'a was interrupted').to.equal(true);
    // No warning at all (the option omitted, as in every scenario without interruptions).
    const none = run(t);
    expect(none.beyondLimit).to.equal(2);
    expect(none.wronglyDeleted.map((d) => d.machine)).to.deep.equal(['a', 'b']);
  });

  it('does not count machines being deleted, and resolves a percentage surge upwards', () => {
    const t = new Timeline().deployment(3, 'v1', '10%');
    for (const n of ['a', 'b', 'c', 'd']) t.machine(n);
    t.machine('e', 'Running', 'v1', { deleting: true });
    expect(run(t).beyondLimit).to.equal(0);
  });

  it('keeps the old replicas after a decrease until the count came down, then binds the new value', () => {
    const t = new Timeline().deployment(4, 'v1', 0);
    for (const n of ['a', 'b', 'c', 'd']) t.machine(n);
    t.deployment(2, 'v1', 0).machine('e');
    // 5 machines are beyond even the old value (4 + 0).
    expect(run(t).beyondLimit).to.equal(1);

    const u = new Timeline().deployment(4, 'v1', 0);
    for (const n of ['a', 'b', 'c', 'd']) u.machine(n);
    u.deployment(2, 'v1', 0);
    expect(run(u).beyondLimit, 'the moment after the decrease').to.equal(0);
    u.deleting('a').deleting('b');
    u.machine('e');
    expect(run(u).beyondLimit, 'a creation once the decrease was carried out').to.equal(1);
  });

  it('lets an increase bind at once', () => {
    const t = new Timeline()
      .deployment(1, 'v1', 0)
      .machine('a')
      .deployment(3, 'v1', 0)
      .machine('b')
      .machine('c');
    expect(run(t).beyondLimit).to.equal(0);
  });

  it('judges scale-down deletions: a surplus is needed and no worse-ranked machine may be kept', () => {
    const t = new Timeline().deployment(3).machine('a').machine('b').machine('c', 'Pending');
    t.deployment(2).deleting('a');
    const a = run(t);
    expect(a.deletions).to.have.length(1);
    expect(a.wronglyDeleted.map((d) => d.why)).to.deep.equal(['c (Pending) ranked before it and was kept']);

    const ok = new Timeline().deployment(3).machine('a').machine('b').machine('c', 'Pending');
    ok.deployment(2).deleting('c').gone('c');
    expect(run(ok).wronglyDeleted).to.deep.equal([]);
    expect(run(ok).deletions[0]?.why).to.contain('scale-down');
  });

  it('counts a deletion without a surplus as not chosen, but not a Failed or marked machine', () => {
    const t = new Timeline().deployment(3).machine('a').machine('b').machine('c');
    t.deleting('a');
    t.machine('b', 'Failed').deleting('b');
    t.machine('c', 'Running', 'v1', { annotations: { 'machinepriority.machine.sapcloud.io': '1' } }).deleting(
      'c',
    );
    const a = run(t);
    expect(a.deletions.map((d) => [d.machine, d.chosen])).to.deep.equal([
      ['a', false],
      ['b', true],
      ['c', true],
    ]);
  });

  it('accepts only old-set deletions in a rollout', () => {
    const t = new Timeline().deployment(2, 'v1').machine('a').machine('b');
    t.deployment(2, 'v2')
      .machine('c', 'Running', 'v2')
      .deleting('a')
      .machine('d', 'Running', 'v2')
      .deleting('c');
    const a = run(t);
    expect(a.deletions.map((d) => [d.machine, d.chosen])).to.deep.equal([
      ['a', true],
      ['c', false],
    ]);
  });

  it('only reports what happened in the window, with the state before it replayed', () => {
    const t = new Timeline().deployment(1, 'v1', 0).machine('a').machine('b').node('a');
    const from = t.now;
    t.deleting('b').gone('b').node('b').node('b', 'delete');
    const a = run(t, from);
    expect(a.beyondLimit, 'the overshoot was before the window').to.equal(0);
    expect(a.deletions.map((d) => d.machine)).to.deep.equal(['b']);
    expect(a.vmsCreated).to.equal(1);
    expect(a.vmsDeleted).to.equal(1);
    expect(a.machinesCreated).to.equal(0);
  });

  it('bounds the launch rounds of a class whose launches all fail by its back-off', () => {
    // The bound with the defaults (30 s doubling up to 5 min): rounds at 0, 30, 90 and
    // 210 s in 5 minutes, so at most 4 launches per machine (the issue asks for at most 6).
    expect(launchRoundsWithin(30_000, 300_000, 300_000)).to.equal(4);
    expect(launchRoundsWithin(30_000, 300_000, 209_999)).to.equal(3);
    // Capped: 10, 20, then 30 s apart (0, 10, 30, 60, 90, 120 s).
    expect(launchRoundsWithin(10_000, 30_000, 120_000)).to.equal(6);
    expect(launchRoundsWithin(10_000, 30_000, 119_999)).to.equal(5);
    expect(launchRoundsWithin(10_000, 60_000, 120_000)).to.equal(4);
    expect(launchRoundsWithin(0, 60_000, 120_000), 'no back-off, no bound').to.equal(Infinity);
  });
});
