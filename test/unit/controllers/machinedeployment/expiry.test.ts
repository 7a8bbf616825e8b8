import { expect } from 'chai';

import type { Machine, MachineDeployment } from '../../../../lib/api/types.js';
import {
  ExpiryBlock,
  ExpiryReason,
  planExpiry,
  type ExpiryInput,
} from '../../../../lib/controllers/machinedeployment/expiry-plan.js';
import type { Veto } from '../../../../lib/controllers/vetoes.js';
import { machine, machineDeployment, machineSet } from '../builders.js';

const NOW = Date.UTC(2026, 10, 28, 12, 0, 0);
const HOUR = 3_600_000;

function ago(ms: number): string {
  return new Date(NOW - ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function deployment(replicas: number, annotations: Record<string, string>): MachineDeployment {
  const d = machineDeployment('pool', replicas);
  d.metadata.annotations = annotations;
  return d;
}

const ms = machineSet('pool', 10);

/** Machines m0..m(n-1), m0 the oldest: m_i created (n - i) hours ago. */
function fleet(
  n: number,
  extra: (i: number) => Partial<Parameters<typeof machine>[1]> = () => ({}),
): Machine[] {
  return Array.from({ length: n }, (_, i) =>
    machine(`m${i}`, { owner: ms, created: ago((n - i) * HOUR), ...extra(i) }),
  );
}

function plan(
  mcd: MachineDeployment,
  machines: Machine[],
  over: Partial<ExpiryInput<Machine>> = {},
): ReturnType<typeof planExpiry<Machine>> {
  return planExpiry<Machine>({
    mcd,
    machines,
    now: NOW,
    unsettled: undefined,
    maxSurge: 1,
    marked: new Set(),
    vetoOf: () => undefined,
    started: new Set(),
    ...over,
  });
}

const names = (ms: readonly Machine[]): string[] => ms.map((m) => m.metadata.name ?? '');

describe('expiry planning', () => {
  it('does nothing without the expire-after annotation', () => {
    const p = plan(deployment(3, {}), fleet(3));
    expect(p).to.deep.include({ enabled: false, start: [], expired: [] });
    expect(p.condition).to.equal(undefined);
  });

  it('replaces the oldest expired machine first, one per maxSurge, within the budget', () => {
    const mcd = deployment(10, {
      'machine.mcm-ts.io/expire-after': '150m',
      'machine.mcm-ts.io/disruption-budget': '2',
    });
    const p = plan(mcd, fleet(10));
    // m0 (10 h), …, m7 (3 h) are older than 150 m; m8 (2 h) and m9 (1 h) are not.
    expect(names(p.expired)).to.deep.equal(['m0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7']);
    expect(names(p.start)).to.deep.equal(['m0']);
    expect(p.blocked.every((b) => b.reason === ExpiryBlock.Surge)).to.equal(true);
    // The next to expire is m8, 30 minutes from now.
    expect(p.recheckAt).to.equal(NOW + 30 * 60_000);
    expect(p.condition).to.deep.include({ status: 'True', reason: ExpiryReason.Replacing });
    // maxSurge 3 and a budget of 2: two at once.
    expect(names(plan(mcd, fleet(10), { maxSurge: 3 }).start)).to.deep.equal(['m0', 'm1']);
  });

  it('counts replacements in flight against the budget and the surge, also those the cache does not show yet', () => {
    const mcd = deployment(10, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-budget': '2',
    });
    const marked = fleet(10, (i) =>
      i === 0 ? { annotations: { 'machine.mcm-ts.io/replacing': 'expired' } } : {},
    );
    // m0 is replaced (1 of the budget 2, 1 of the surge 3): one more may start.
    expect(names(plan(mcd, marked, { maxSurge: 3 }).start)).to.deep.equal(['m1']);
    // m0 is being deleted and m1 was just marked (not in the cache yet): the budget is used up.
    const draining = fleet(10, (i) =>
      i === 0 ? { annotations: { 'machine.mcm-ts.io/replacing': 'expired' }, deleting: true } : {},
    );
    const p = plan(mcd, draining, { maxSurge: 3, started: new Set(['m1']) });
    expect(p.start).to.deep.equal([]);
    expect(p.inFlight).to.equal(2);
    expect(new Set(p.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Budget]));
    expect(p.condition?.message).to.include('disruption budget of 2 machines is in use');
  });

  it('skips machines held by a pod that vetoes disruption and proceeds with the others', () => {
    const mcd = deployment(3, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-budget': '100%',
    });
    const vetoOf = (m: Machine): Veto | undefined =>
      m.metadata.name === 'm0' ? { pod: 'default/db-0', by: 'karpenter.sh/do-not-disrupt=true' } : undefined;
    const p = plan(mcd, fleet(3), { vetoOf, maxSurge: 1 });
    expect(names(p.start)).to.deep.equal(['m1']);
    expect(p.blocked.find((b) => b.machine.metadata.name === 'm0')).to.deep.include({
      reason: ExpiryBlock.Pod,
    });
    expect(p.condition?.message).to.include(
      'm0: pod default/db-0 (karpenter.sh/do-not-disrupt=true) runs on its node',
    );
  });

  it('replaces machines with a rebalance recommendation surge first within maxSurge and the budget, not one per recommendation', () => {
    // 20 spot machines, every one recommended at once; no expiry on the deployment.
    const mcd = deployment(20, { 'machine.mcm-ts.io/disruption-budget': '25%' });
    const storm = fleet(20, () => ({
      annotations: { 'machine.mcm-ts.io/rebalance-recommended': ago(60_000) },
    }));
    const p = plan(mcd, storm, { maxSurge: 2 });
    expect(p.enabled).to.equal(true);
    expect(p.recommended).to.equal(20);
    expect(names(p.start), 'maxSurge 2 at a time, oldest first').to.deep.equal(['m0', 'm1']);
    expect(new Set(p.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Surge]));
    expect(p.condition?.message).to.include('20 with a rebalance recommendation');
    // With a larger surge the budget (25% of 20 = 5) bounds it.
    expect(plan(mcd, storm, { maxSurge: 10 }).start).to.have.length(5);
    // The recommended ones go before expired ones; the windows do not hold them back.
    const windowed = deployment(20, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-schedule': '0 2 * * * 4h',
    });
    const mixed = fleet(4, (i) =>
      i === 3 ? { annotations: { 'machine.mcm-ts.io/rebalance-recommended': ago(60_000) } } : {},
    );
    const w = plan(windowed, mixed, { maxSurge: 4 });
    expect(names(w.start)).to.deep.equal(['m3']);
    expect(new Set(w.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Window]));
  });

  it('never surges above the group’s autoscaler maximum, and says so', () => {
    const mcd = deployment(5, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-budget': '100%',
    });
    // At its maximum: nothing starts.
    const atMax = plan(mcd, fleet(5), { maxSurge: 3, groupMax: 5 });
    expect(atMax.start).to.deep.equal([]);
    expect(new Set(atMax.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Max]));
    expect(atMax.condition?.message).to.include('autoscaler maximum of 5 machines');
    // Two below it: two at once, though maxSurge allows three.
    expect(plan(mcd, fleet(5), { maxSurge: 3, groupMax: 7 }).start).to.have.length(2);
    // No group: maxSurge alone.
    expect(plan(mcd, fleet(5), { maxSurge: 3 }).start).to.have.length(3);
    // One below it, one machine just marked whose replacement its MachineSet has not created yet:
    // that replacement takes the room, nothing more starts.
    const justMarked = fleet(5, (i) =>
      i === 0 ? { annotations: { 'machine.mcm-ts.io/replacing': 'expired' } } : {},
    );
    const next = plan(mcd, justMarked, { maxSurge: 3, groupMax: 6 });
    expect(next.start, 'beside a replacement still to be created').to.deep.equal([]);
    expect(new Set(next.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Max]));
  });

  it('starts nothing outside the disruption windows and looks again when one opens', () => {
    // NOW is 12:00 UTC; the window is 02:00-06:00 UTC.
    const mcd = deployment(3, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-schedule': '0 2 * * * 4h',
    });
    const p = plan(mcd, fleet(3));
    expect(p.start).to.deep.equal([]);
    expect(new Set(p.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Window]));
    expect(p.recheckAt).to.equal(Date.UTC(2026, 10, 29, 2, 0, 0));
    expect(p.condition).to.deep.include({ status: 'True', reason: ExpiryReason.Waiting });
    // Open now (12:00 falls in 10:00 + 4h).
    const open = deployment(3, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-schedule': '0 10 * * * 4h',
    });
    expect(names(plan(open, fleet(3)).start)).to.deep.equal(['m0']);
  });

  it('waits while the deployment is paused, frozen or rolling out, and says so', () => {
    const mcd = deployment(3, { 'machine.mcm-ts.io/expire-after': '1h' });
    for (const unsettled of [ExpiryBlock.Paused, ExpiryBlock.Frozen, ExpiryBlock.RollingOut] as const) {
      const p = plan(mcd, fleet(3), { unsettled });
      expect(p.start, unsettled).to.deep.equal([]);
      expect(new Set(p.blocked.map((b) => b.reason)), unsettled).to.deep.equal(new Set([unsettled]));
    }
  });

  it('reports invalid settings and disrupts nothing', () => {
    const badBudget = deployment(3, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-budget': 'two',
    });
    const p = plan(badBudget, fleet(3));
    expect(p.start).to.deep.equal([]);
    expect(p.problems).to.have.length(1);
    expect(new Set(p.blocked.map((b) => b.reason))).to.deep.equal(new Set([ExpiryBlock.Invalid]));
    const badTtl = plan(deployment(3, { 'machine.mcm-ts.io/expire-after': 'soon' }), fleet(3));
    expect(badTtl.start).to.deep.equal([]);
    expect(badTtl.condition).to.deep.include({ status: 'False', reason: ExpiryReason.InvalidSettings });
  });

  it('leaves alone machines that are going, marked by the autoscaler, preserved or not Running', () => {
    const mcd = deployment(5, {
      'machine.mcm-ts.io/expire-after': '1h',
      'machine.mcm-ts.io/disruption-budget': '100%',
    });
    const machines = fleet(5, (i) =>
      i === 0
        ? { deleting: true }
        : i === 1
          ? { phase: 'Pending' }
          : i === 2
            ? { preserveExpiry: new Date(NOW + HOUR).toISOString() }
            : {},
    );
    const p = plan(mcd, machines, { marked: new Set(['m3']), maxSurge: 5 });
    expect(names(p.expired)).to.deep.equal(['m4']);
    expect(names(p.start)).to.deep.equal(['m4']);
  });

  it('takes the default budget of 10 % of the replicas, rounded up', () => {
    const mcd = deployment(25, { 'machine.mcm-ts.io/expire-after': '1h' });
    expect(plan(mcd, fleet(25), { maxSurge: 10 }).start).to.have.length(3);
  });
});
