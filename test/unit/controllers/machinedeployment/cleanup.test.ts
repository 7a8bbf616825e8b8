import { expect } from 'chai';

import type { MachineSet } from '../../../../lib/api/types.js';
import { planCleanup } from '../../../../lib/controllers/machinedeployment/cleanup.js';
import { deployment, ownedSet } from './fixtures.js';

describe('planCleanup (revisionHistoryLimit)', () => {
  const mcd = deployment('d', 1);
  const old = (
    className: string,
    created: string,
    extra: Partial<{ spec: number; status: number; observed: number }> = {},
  ): MachineSet => {
    const ms = ownedSet(mcd, extra.spec ?? 0, { className, created, statusReplicas: extra.status ?? 0 });
    if (ms.status !== undefined) ms.status.observedGeneration = extra.observed ?? 1;
    return ms;
  };
  const names = (sets: MachineSet[]): string[] => sets.map((s) => s.spec?.template?.spec?.class?.name ?? '');

  it('keeps every old set without a limit', () => {
    expect(planCleanup([old('a', '2026-01-01T00:00:00Z')], undefined)).to.deep.equal([]);
  });

  it('deletes the oldest sets beyond the limit', () => {
    const sets = [
      old('c', '2026-01-03T00:00:00Z'),
      old('a', '2026-01-01T00:00:00Z'),
      old('b', '2026-01-02T00:00:00Z'),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['a', 'b']);
    expect(names(planCleanup(sets, 0))).to.deep.equal(['a', 'b', 'c']);
    expect(planCleanup(sets, 3)).to.deep.equal([]);
  });

  it('orders by revision: sets created within the same second are told apart', () => {
    const sameSecond = '2026-01-01T00:00:00Z';
    const sets = [
      ownedSet(mcd, 0, { className: 'a-newest', revision: 3, created: sameSecond, statusReplicas: 0 }),
      ownedSet(mcd, 0, { className: 'z-oldest', revision: 1, created: sameSecond, statusReplicas: 0 }),
      ownedSet(mcd, 0, { className: 'm-middle', revision: 2, created: sameSecond, statusReplicas: 0 }),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['z-oldest', 'm-middle']);
  });

  it('skips sets that still have replicas, machines, an unobserved spec or are being deleted', () => {
    const deleting = old('d', '2026-01-04T00:00:00Z');
    deleting.metadata.deletionTimestamp = '2026-01-05T00:00:00Z';
    const sets = [
      old('spec', '2026-01-01T00:00:00Z', { spec: 1 }),
      old('status', '2026-01-02T00:00:00Z', { status: 1 }),
      old('unobserved', '2026-01-03T00:00:00Z', { observed: 0 }),
      deleting,
      old('ok', '2026-01-05T00:00:00Z'),
      old('kept', '2026-01-06T00:00:00Z'),
    ];
    expect(names(planCleanup(sets, 1))).to.deep.equal(['ok']);
  });
});
