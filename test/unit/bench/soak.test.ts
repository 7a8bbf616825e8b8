import { expect } from 'chai';

import { fitLine } from '../../bench/soak.bench.js';

describe('soak bench: least-squares slope', () => {
  it('finds the slope of points on a line, with no error', () => {
    const f = fitLine([
      [0, 20],
      [0.5, 22.5],
      [1, 25],
    ]);
    expect(f.slope).to.be.closeTo(5, 1e-9);
    expect(f.stderr).to.be.closeTo(0, 1e-9);
  });

  it('gives a standard error when the points scatter, and no slope from one point', () => {
    const f = fitLine([
      [0, 20],
      [1, 22],
      [2, 20],
      [3, 22],
    ]);
    expect(f.slope).to.be.closeTo(0.4, 1e-9);
    expect(f.stderr).to.be.greaterThan(0);
    expect(Number.isNaN(fitLine([[0, 1]]).slope)).to.equal(true);
  });
});
