import { expect } from 'chai';

import type { Filter, Instance } from '@aws-sdk/client-ec2';

import { FakeClock } from '../../../../lib/kube/clock.js';
import { InstanceLookup, MAX_FILTER_VALUES } from '../../../../lib/providers/aws/lookup.js';

const STATES = ['pending', 'running', 'stopping', 'stopped'];
const CLUSTER = 'kubernetes.io/cluster/c1';
const ROLE = 'kubernetes.io/role/node';
const KEYS = [CLUSTER, ROLE];

/** A DescribeInstances whose calls are answered by the test, one at a time. */
class FakeDescribe {
  readonly calls: {
    filters: Filter[];
    signal: AbortSignal;
    answer: (i: Instance[]) => void;
    fail: (e: unknown) => void;
  }[] = [];

  readonly fn = (filters: Filter[], signal: AbortSignal): Promise<Instance[]> =>
    new Promise((answer, fail) => {
      this.calls.push({ filters, signal, answer, fail });
    });

  values(call: number, name: string): string[] {
    return this.calls[call]?.filters.find((f) => f.Name === name)?.Values ?? [];
  }
}

const named = (name: string, id: string, cluster = CLUSTER): Instance => ({
  InstanceId: id,
  Tags: [
    { Key: 'Name', Value: name },
    { Key: cluster, Value: '1' },
  ],
});

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('AWS provider: coalesced instance lookups', () => {
  it('sends a lookup at once when none is in flight, by the Name tag and the cluster and role tag keys', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    const found = lookup.byName('Name', 'm1', KEYS, STATES);
    expect(fake.calls).to.have.length(1);
    expect(fake.calls[0]?.filters).to.deep.equal([
      { Name: 'tag:Name', Values: ['m1'] },
      { Name: 'tag-key', Values: [CLUSTER] },
      { Name: 'tag-key', Values: [ROLE] },
      { Name: 'instance-state-name', Values: STATES },
    ]);
    const i = named('m1', 'i-1');
    fake.calls[0]?.answer([i]);
    expect(await found).to.deep.equal([i]);
  });

  it('sends the lookups that arrive during a call together in the next one, each answered with its own instances', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    const first = lookup.byName('Name', 'm0', KEYS, STATES);
    const later = ['m1', 'm2', 'm3', 'm2'].map((n) => lookup.byName('Name', n, KEYS, STATES));
    expect(fake.calls, 'the later lookups wait for the call in flight').to.have.length(1);
    fake.calls[0]?.answer([]);
    expect(await first).to.deep.equal([]);
    await tick();
    expect(fake.calls).to.have.length(2);
    expect(fake.values(1, 'tag:Name'), 'one value per name').to.deep.equal(['m1', 'm2', 'm3']);
    const a = named('m1', 'i-a');
    const b1 = named('m2', 'i-b1');
    const b2 = named('m2', 'i-b2');
    fake.calls[1]?.answer([a, b1, b2, named('other', 'i-x')]);
    const answers = await Promise.all(later);
    expect(answers).to.deep.equal([[a], [b1, b2], [], [b1, b2]]);
    expect(lookup.calls).to.equal(2);
  });

  it('puts at most 200 filter values in one call, the fixed filters counted', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    void lookup.byId('i-first');
    const ids = Array.from({ length: 450 }, (_, k) => `i-${String(k)}`);
    const pending = ids.map((id) => lookup.byId(id));
    const names = Array.from({ length: 300 }, (_, k) => `m${String(k)}`);
    void lookup.byName('Name', 'n-first', KEYS, STATES);
    const byName = names.map((n) => lookup.byName('Name', n, KEYS, STATES));
    fake.calls[0]?.answer([]);
    fake.calls[1]?.answer([]);
    await tick();
    const idCall = fake.calls.findIndex((c, k) => k > 1 && c.filters[0]?.Name === 'instance-id');
    const nameCall = fake.calls.findIndex((c, k) => k > 1 && c.filters[0]?.Name === 'tag:Name');
    expect(fake.values(idCall, 'instance-id')).to.have.length(MAX_FILTER_VALUES);
    const total = (fake.calls[nameCall]?.filters ?? []).reduce((n, f) => n + (f.Values?.length ?? 0), 0);
    expect(total).to.equal(MAX_FILTER_VALUES);
    // Each queue drains call by call until every lookup has been answered.
    for (let round = 0; round < 10 && fake.calls.some((c) => !('done' in c)); round++) {
      for (const c of fake.calls) {
        if (!('done' in c)) {
          Object.assign(c, { done: true });
          c.answer([]);
        }
      }
      await tick();
    }
    expect(await Promise.all(pending)).to.have.length(450);
    expect(await Promise.all(byName)).to.have.length(300);
    expect(fake.calls.length, '2 first + 3 id calls + 2 name calls').to.equal(7);
  });

  it('answers an id EC2 does not list with undefined, without failing the others', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    void lookup.byId('i-0');
    const known = lookup.byId('i-1');
    const unknown = lookup.byId('i-gone');
    fake.calls[0]?.answer([]);
    await tick();
    expect(fake.values(1, 'instance-id')).to.deep.equal(['i-1', 'i-gone']);
    const i = { InstanceId: 'i-1' };
    fake.calls[1]?.answer([i]);
    expect(await known).to.equal(i);
    expect(await unknown).to.equal(undefined);
  });

  it('fails every caller of a failed call, and the next lookups go out as usual', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    void lookup.byId('i-0');
    const a = lookup.byId('i-1');
    const b = lookup.byId('i-2');
    fake.calls[0]?.answer([]);
    await tick();
    const throttled = Object.assign(new Error('Rate exceeded'), { name: 'RequestLimitExceeded' });
    fake.calls[1]?.fail(throttled);
    const errs = await Promise.all(
      [a, b].map((p) =>
        p.then(
          () => undefined,
          (e: unknown) => e,
        ),
      ),
    );
    expect(errs).to.deep.equal([throttled, throttled]);
    const c = lookup.byId('i-3');
    expect(fake.calls).to.have.length(3);
    fake.calls[2]?.answer([{ InstanceId: 'i-3' }]);
    expect((await c)?.InstanceId).to.equal('i-3');
  });

  it('a lookup cancelled while waiting is not sent; one cancelled in a call fails at once with an AbortError; the call is cancelled only when all its callers are', async () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    const c1 = new AbortController();
    const c2 = new AbortController();
    const c3 = new AbortController();
    const first = lookup.byId('i-1', c1.signal);
    const waiting = lookup.byId('i-2', c2.signal);
    const stays = lookup.byId('i-3', c3.signal);
    c2.abort();
    const waitErr = await waiting.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(waitErr).to.be.instanceOf(Error).with.property('name', 'AbortError');
    c1.abort();
    const firstErr = await first.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(firstErr).to.have.property('name', 'AbortError');
    expect(fake.calls[0]?.signal.aborted, 'its only caller gone: the call is cancelled').to.equal(true);
    fake.calls[0]?.fail(Object.assign(new Error('aborted'), { name: 'AbortError' }));
    await tick();
    expect(fake.values(1, 'instance-id'), 'the cancelled waiting lookup is not sent').to.deep.equal(['i-3']);
    expect(fake.calls[1]?.signal.aborted).to.equal(false);
    fake.calls[1]?.answer([{ InstanceId: 'i-3' }]);
    expect((await stays)?.InstanceId).to.equal('i-3');
  });

  it('does not share calls between cluster tags', () => {
    const fake = new FakeDescribe();
    const lookup = new InstanceLookup(fake.fn);
    void lookup.byName('Name', 'm1', KEYS, STATES);
    void lookup.byName('Name', 'm1', ['kubernetes.io/cluster/other', ROLE], STATES);
    expect(fake.calls).to.have.length(2);
    expect(fake.values(1, 'tag-key')).to.deep.equal(['kubernetes.io/cluster/other']);
  });
});

describe('AWS provider: instance lookups wait for company (gatherMs)', () => {
  it('sends lookups that arrive within gatherMs of the first in one call, gatherMs after the first', async () => {
    const fake = new FakeDescribe();
    const clock = new FakeClock();
    const lookup = new InstanceLookup(fake.fn, { gatherMs: 1000, clock });
    const a = lookup.byName('Name', 'm1', KEYS, STATES);
    await clock.advance(400);
    const b = lookup.byName('Name', 'm2', KEYS, STATES);
    await clock.advance(599);
    expect(fake.calls, 'nothing sent before gatherMs has passed').to.have.length(0);
    await clock.advance(1);
    expect(fake.calls).to.have.length(1);
    expect(fake.values(0, 'tag:Name')).to.deep.equal(['m1', 'm2']);
    fake.calls[0]?.answer([named('m1', 'i-1')]);
    expect((await a).map((i) => i.InstanceId)).to.deep.equal(['i-1']);
    expect(await b).to.deep.equal([]);
  });

  it('one call of a kind at a time: lookups that waited through a call go out when it ends, the later ones gatherMs after they arrived', async () => {
    const fake = new FakeDescribe();
    const clock = new FakeClock();
    const lookup = new InstanceLookup(fake.fn, { gatherMs: 1000, clock });
    void lookup.byId('i-1');
    await clock.advance(1000);
    expect(fake.calls).to.have.length(1);
    void lookup.byId('i-2');
    await clock.advance(1500);
    expect(fake.calls, 'the call in flight is not overtaken').to.have.length(1);
    fake.calls[0]?.answer([]);
    await clock.advance(0);
    expect(fake.calls, 'i-2 waited longer than gatherMs: sent at once').to.have.length(2);
    expect(fake.values(1, 'instance-id')).to.deep.equal(['i-2']);
    void lookup.byId('i-3');
    fake.calls[1]?.answer([]);
    await clock.advance(999);
    expect(fake.calls, 'i-3 came during the call: it still waits its gatherMs').to.have.length(2);
    await clock.advance(1);
    expect(fake.values(2, 'instance-id')).to.deep.equal(['i-3']);
  });

  it('sends at once when a call’s worth of values is waiting', () => {
    const fake = new FakeDescribe();
    const clock = new FakeClock();
    const lookup = new InstanceLookup(fake.fn, { gatherMs: 1000, clock });
    for (let k = 0; k < MAX_FILTER_VALUES; k++) void lookup.byId(`i-${String(k)}`);
    expect(fake.calls).to.have.length(1);
    expect(fake.values(0, 'instance-id')).to.have.length(MAX_FILTER_VALUES);
    expect(clock.pendingTimers(), 'no timer left behind').to.equal(0);
  });

  it('a lookup cancelled while it waits for company is not sent, and its timer goes when no other waits', async () => {
    const fake = new FakeDescribe();
    const clock = new FakeClock();
    const lookup = new InstanceLookup(fake.fn, { gatherMs: 1000, clock });
    const c = new AbortController();
    const gone = lookup.byId('i-1', c.signal);
    c.abort();
    const err = await gone.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.have.property('name', 'AbortError');
    expect(clock.pendingTimers()).to.equal(0);
    await clock.advance(2000);
    expect(fake.calls).to.have.length(0);
  });
});
