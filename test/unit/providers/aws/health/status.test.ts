import type { InstanceStatus, InstanceStatusSummary } from '@aws-sdk/client-ec2';
import { expect } from 'chai';

import {
  ImpairmentTracker,
  describeImpairment,
  impairedOf,
  type ImpairedInstance,
} from '../../../../../lib/providers/aws/health/status.js';

const T0 = Date.UTC(2026, 10, 28, 2, 0, 0);
const ID = 'i-0123456789abcdef0';

const ok: InstanceStatusSummary = { Status: 'ok', Details: [{ Name: 'reachability', Status: 'passed' }] };
const impaired = (since?: number): InstanceStatusSummary => ({
  Status: 'impaired',
  Details: [
    {
      Name: 'reachability',
      Status: 'failed',
      ...(since === undefined ? {} : { ImpairedSince: new Date(since) }),
    },
  ],
});
const status = (
  instance: InstanceStatusSummary | undefined,
  system: InstanceStatusSummary | undefined,
  id = ID,
): InstanceStatus => ({
  InstanceId: id,
  ...(instance === undefined ? {} : { InstanceStatus: instance }),
  ...(system === undefined ? {} : { SystemStatus: system }),
});

describe('EC2 status checks: which are impaired (impairedOf)', () => {
  const cases: { name: string; s: InstanceStatus; want: ImpairedInstance | undefined }[] = [
    { name: 'both checks ok: not impaired', s: status(ok, ok), want: undefined },
    {
      name: 'not-applicable (a stopped instance, as the emulator reports it): not impaired',
      s: status({ Status: 'not-applicable' }, { Status: 'not-applicable' }),
      want: undefined,
    },
    {
      name: 'initializing and insufficient-data: not impaired',
      s: status({ Status: 'initializing' }, { Status: 'insufficient-data' }),
      want: undefined,
    },
    { name: 'no statuses at all: not impaired', s: status(undefined, undefined), want: undefined },
    {
      name: 'the system check impaired with EC2’s ImpairedSince',
      s: status(ok, impaired(T0)),
      want: { instanceId: ID, checks: [{ check: 'system', failed: ['reachability'], since: T0 }] },
    },
    {
      name: 'the instance check impaired without ImpairedSince',
      s: status(impaired(), ok),
      want: {
        instanceId: ID,
        checks: [{ check: 'instance', failed: ['reachability'], since: undefined }],
      },
    },
    {
      name: 'both checks impaired: both, the instance’s first',
      s: status(impaired(T0 + 1_000), impaired(T0)),
      want: {
        instanceId: ID,
        checks: [
          { check: 'instance', failed: ['reachability'], since: T0 + 1_000 },
          { check: 'system', failed: ['reachability'], since: T0 },
        ],
      },
    },
    {
      name: 'impaired, a passed detail beside the failed one: only the failed one counts',
      s: status(
        {
          Status: 'impaired',
          Details: [
            { Name: 'reachability', Status: 'failed', ImpairedSince: new Date(T0) },
            { Name: 'reachability', Status: 'passed', ImpairedSince: new Date(T0 - 60_000) },
          ],
        },
        ok,
      ),
      want: { instanceId: ID, checks: [{ check: 'instance', failed: ['reachability'], since: T0 }] },
    },
    { name: 'no instance id: nothing to act on', s: status(impaired(T0), ok, ''), want: undefined },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(impairedOf(tc.s)).to.deep.equal(tc.want);
    });
  }
});

describe('EC2 status checks: impaired for longer than the timeout (ImpairmentTracker)', () => {
  const TIMEOUT = 300_000;
  const sys = (since?: number, id = ID): ImpairedInstance => ({
    instanceId: id,
    checks: [{ check: 'system', failed: ['reachability'], since }],
  });
  const ids = (o: { instanceId: string }[]): string[] => o.map((i) => i.instanceId);

  it('with EC2’s ImpairedSince: due once that is the timeout ago, even at the first poll', () => {
    const t = new ImpairmentTracker(TIMEOUT);
    expect(ids(t.update([sys(T0)], T0 + TIMEOUT - 1)), 'a millisecond short').to.deep.equal([]);
    const due = t.update([sys(T0)], T0 + TIMEOUT);
    expect(due).to.deep.equal([{ ...sys(T0), since: T0, sinceFromEc2: true }]);
    const fresh = new ImpairmentTracker(TIMEOUT);
    expect(ids(fresh.update([sys(T0)], T0 + 2 * TIMEOUT)), 'a restarted poller').to.deep.equal([ID]);
  });

  it('without ImpairedSince: the clock starts at the first poll that sees it', () => {
    const t = new ImpairmentTracker(TIMEOUT);
    expect(ids(t.update([sys()], T0))).to.deep.equal([]);
    expect(ids(t.update([sys()], T0 + TIMEOUT - 1))).to.deep.equal([]);
    const due = t.update([sys()], T0 + TIMEOUT);
    expect(due).to.deep.equal([{ ...sys(), since: T0, sinceFromEc2: false }]);
    expect(ids(t.update([sys()], T0 + TIMEOUT + 60_000)), 'still due the poll after').to.deep.equal([ID]);
  });

  it('an instance back to ok (absent from a poll) is forgotten: impaired again, its clock starts again', () => {
    const t = new ImpairmentTracker(TIMEOUT);
    t.update([sys()], T0);
    t.update([sys()], T0 + TIMEOUT - 60_000);
    expect(ids(t.update([], T0 + TIMEOUT - 30_000))).to.deep.equal([]);
    expect([...t.impaired]).to.deep.equal([]);
    expect(ids(t.update([sys()], T0 + TIMEOUT)), 'impaired again').to.deep.equal([]);
    expect(ids(t.update([sys()], T0 + 2 * TIMEOUT - 1))).to.deep.equal([]);
    expect(ids(t.update([sys()], T0 + 2 * TIMEOUT))).to.deep.equal([ID]);
  });

  it('both checks: the earliest ImpairedSince of either counts', () => {
    const t = new ImpairmentTracker(TIMEOUT);
    const both: ImpairedInstance = {
      instanceId: ID,
      checks: [
        { check: 'instance', failed: ['reachability'], since: T0 + 60_000 },
        { check: 'system', failed: ['reachability'], since: T0 },
      ],
    };
    expect(t.update([both], T0 + TIMEOUT)[0]?.since).to.equal(T0);
  });

  it('instances are tracked one by one: one going ok forgets only that one', () => {
    const t = new ImpairmentTracker(TIMEOUT);
    t.update([sys(undefined, 'i-a'), sys(undefined, 'i-b')], T0);
    t.update([sys(undefined, 'i-b')], T0 + 60_000);
    expect(ids(t.update([sys(undefined, 'i-a'), sys(undefined, 'i-b')], T0 + TIMEOUT))).to.deep.equal([
      'i-b',
    ]);
  });
});

describe('EC2 status checks: what the notice says (describeImpairment)', () => {
  it('names each impaired check, its failed details and EC2’s time', () => {
    expect(
      describeImpairment({
        instanceId: ID,
        checks: [{ check: 'system', failed: ['reachability'], since: T0 }],
        since: T0,
        sinceFromEc2: true,
      }),
    ).to.equal(
      `EC2 reports instance ${ID} impaired: system status check impaired (reachability) since 2026-11-28T02:00:00Z`,
    );
  });

  it('says when the time is the poller’s own sight, not EC2’s', () => {
    expect(
      describeImpairment({
        instanceId: ID,
        checks: [{ check: 'instance', failed: ['reachability'], since: undefined }],
        since: T0,
        sinceFromEc2: false,
      }),
    ).to.equal(
      `EC2 reports instance ${ID} impaired: instance status check impaired (reachability), seen impaired since 2026-11-28T02:00:00Z`,
    );
  });
});
