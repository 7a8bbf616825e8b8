import { expect } from 'chai';

import { jsonEqual, withoutGoZeroValues } from '../../../lib/kube/equal.js';

describe('jsonEqual', () => {
  const cases: { name: string; a: unknown; b: unknown; want: boolean }[] = [
    {
      name: 'key order does not matter',
      a: { a: 1, b: { c: 2, d: 3 } },
      b: { b: { d: 3, c: 2 }, a: 1 },
      want: true,
    },
    {
      name: 'an absent key equals one holding undefined',
      a: { a: 1, b: undefined },
      b: { a: 1 },
      want: true,
    },
    { name: 'array order matters', a: [1, 2], b: [2, 1], want: false },
    { name: 'different values differ', a: { a: 1 }, b: { a: 2 }, want: false },
    { name: 'an array is no object', a: [], b: {}, want: false },
    { name: 'an empty string is a value', a: { a: '' }, b: {}, want: false },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(jsonEqual(tc.a, tc.b)).to.equal(tc.want);
      expect(jsonEqual(tc.b, tc.a), 'symmetric').to.equal(tc.want);
    });
  }
});

describe('withoutGoZeroValues (Go semantic equality with jsonEqual)', () => {
  const semantic = (a: unknown, b: unknown): boolean =>
    jsonEqual(withoutGoZeroValues(a), withoutGoZeroValues(b));

  it('treats zero values as absent', () => {
    expect(semantic(undefined, {})).to.equal(true);
    expect(semantic({ a: '', b: 0, c: false, d: null, e: [], f: {} }, {})).to.equal(true);
    expect(semantic({ a: 1 }, { a: 2 })).to.equal(false);
  });

  it('keeps label and annotation entries with empty values', () => {
    expect(semantic({ labels: { a: '' } }, {})).to.equal(false);
    expect(
      semantic({ metadata: { annotations: { x: '' } } }, { metadata: { annotations: { x: '' } } }),
    ).to.equal(true);
  });
});
