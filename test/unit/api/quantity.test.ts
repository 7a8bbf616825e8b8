import { expect } from 'chai';

import { quantityNanos } from '../../../lib/api/quantity.js';

describe('quantityNanos', () => {
  const cases: [string | number, bigint | undefined][] = [
    ['0', 0n],
    [4, 4_000_000_000n],
    ['1.5', 1_500_000_000n],
    ['.5', 500_000_000n],
    ['500m', 500_000_000n],
    ['1930m', 1_930_000_000n],
    ['100n', 100n],
    ['1k', 1_000_000_000_000n],
    ['1Ki', 1024n * 1_000_000_000n],
    ['1.5Gi', 1536n * 1024n * 1024n * 1_000_000_000n],
    ['4G', 4n * 10n ** 18n],
    ['1e3', 1000n * 1_000_000_000n],
    ['1E3', 1000n * 1_000_000_000n],
    ['2E', 2n * 10n ** 27n],
    ['1e-10', 1n],
    ['-1', -1_000_000_000n],
    ['12 GB', undefined],
    ['1e1.5', undefined],
    ['', undefined],
  ];
  for (const [q, want] of cases) {
    it(`${JSON.stringify(q)} → ${String(want)}`, () => {
      expect(quantityNanos(q)).to.equal(want);
    });
  }

  it('orders binary and decimal suffixes exactly (4Gi > 4G, 4097Mi > 4Gi)', () => {
    const n = (q: string): bigint => quantityNanos(q) ?? -1n;
    expect(n('4Gi') > n('4G')).to.equal(true);
    expect(n('4097Mi') > n('4Gi')).to.equal(true);
    expect(n('4096Mi') === n('4Gi')).to.equal(true);
  });
});
