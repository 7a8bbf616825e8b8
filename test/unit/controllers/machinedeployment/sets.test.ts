import { expect } from 'chai';

import { occupied, rolloutBounds, usable } from '../../../../lib/controllers/machinedeployment/sets.js';
import { deployment, state } from './fixtures.js';

describe('rolloutBounds resolves maxSurge/maxUnavailable with MCM rounding', () => {
  const cases: {
    name: string;
    replicas: number;
    surge: number | string;
    unavailable: number | string;
    want: [number, number];
  }[] = [
    { name: 'absolute values', replicas: 4, surge: 1, unavailable: 1, want: [1, 1] },
    { name: 'surge percentage rounds up', replicas: 10, surge: '25%', unavailable: 0, want: [3, 0] },
    { name: 'unavailable percentage rounds down', replicas: 10, surge: 0, unavailable: '25%', want: [0, 2] },
    { name: 'both zero allows one unavailable', replicas: 3, surge: '10%', unavailable: '10%', want: [1, 0] },
    {
      name: 'both resolving to zero allows one unavailable',
      replicas: 3,
      surge: 0,
      unavailable: '10%',
      want: [0, 1],
    },
    { name: 'unavailable capped at replicas', replicas: 2, surge: 0, unavailable: 5, want: [0, 2] },
    {
      name: 'zero replicas: nothing may be unavailable',
      replicas: 0,
      surge: 1,
      unavailable: 1,
      want: [1, 0],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const b = rolloutBounds(
        deployment('d', c.replicas, { maxSurge: c.surge, maxUnavailable: c.unavailable }),
      );
      expect([b.maxSurge, b.maxUnavailable]).to.deep.equal(c.want);
    });
  }

  it('Recreate neither surges nor allows unavailability; InPlaceUpdate surges only with Auto orchestration', () => {
    expect(rolloutBounds(deployment('d', 3, { strategy: { type: 'Recreate' } }))).to.deep.equal({
      maxSurge: 0,
      maxUnavailable: 0,
    });
    const inPlace = deployment('d', 3, {
      strategy: {
        type: 'InPlaceUpdate',
        inPlaceUpdate: { maxSurge: 2, maxUnavailable: 1, orchestrationType: 'Auto' },
      },
    });
    expect(rolloutBounds(inPlace)).to.deep.equal({ maxSurge: 2, maxUnavailable: 1 });
    const manual = deployment('d', 3, {
      strategy: {
        type: 'InPlaceUpdate',
        inPlaceUpdate: { maxSurge: 2, maxUnavailable: 1, orchestrationType: 'Manual' },
      },
    });
    expect(rolloutBounds(manual)).to.deep.equal({ maxSurge: 0, maxUnavailable: 1 });
  });
});

describe('set accounting', () => {
  it('counts a set against the surge limit by the larger of spec and existing machines', () => {
    expect(
      occupied(state('a', 3, { machines: 4 })),
      'a machine still terminating after a scale-down',
    ).to.equal(4);
    expect(occupied(state('a', 3, { machines: 1 })), 'machines not created yet').to.equal(3);
  });

  it('counts a set as available only up to its spec', () => {
    expect(usable(state('a', 3, { available: 4 })), 'a requested scale-down is not counted twice').to.equal(
      3,
    );
    expect(usable(state('a', 3, { available: 1 }))).to.equal(1);
  });
});
