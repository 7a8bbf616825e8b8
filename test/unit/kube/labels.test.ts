import { expect } from 'chai';

import type { LabelSelector } from '../../../lib/kube/types.js';
import { isEmptySelector, selectorMatches, selectorToString } from '../../../lib/kube/labels.js';

describe('label selectors', () => {
  const cases: { name: string; sel: LabelSelector; labels: Record<string, string>; want: boolean }[] = [
    { name: 'matchLabels equal', sel: { matchLabels: { a: '1' } }, labels: { a: '1', b: '2' }, want: true },
    {
      name: 'matchLabels different value',
      sel: { matchLabels: { a: '1' } },
      labels: { a: '2' },
      want: false,
    },
    { name: 'matchLabels missing key', sel: { matchLabels: { a: '1' } }, labels: {}, want: false },
    {
      name: 'In',
      sel: { matchExpressions: [{ key: 'z', operator: 'In', values: ['x', 'y'] }] },
      labels: { z: 'y' },
      want: true,
    },
    {
      name: 'In without the key',
      sel: { matchExpressions: [{ key: 'z', operator: 'In', values: ['x'] }] },
      labels: {},
      want: false,
    },
    {
      name: 'NotIn without the key',
      sel: { matchExpressions: [{ key: 'z', operator: 'NotIn', values: ['x'] }] },
      labels: {},
      want: true,
    },
    {
      name: 'NotIn with a listed value',
      sel: { matchExpressions: [{ key: 'z', operator: 'NotIn', values: ['x'] }] },
      labels: { z: 'x' },
      want: false,
    },
    {
      name: 'Exists',
      sel: { matchExpressions: [{ key: 'z', operator: 'Exists' }] },
      labels: { z: '' },
      want: true,
    },
    {
      name: 'DoesNotExist',
      sel: { matchExpressions: [{ key: 'z', operator: 'DoesNotExist' }] },
      labels: { z: '' },
      want: false,
    },
    { name: 'empty selector matches everything', sel: {}, labels: { a: '1' }, want: true },
  ];
  for (const tc of cases) {
    it(`${tc.name} → ${tc.want}`, () => {
      expect(selectorMatches(tc.sel, tc.labels)).to.equal(tc.want);
    });
  }

  it('reports empty selectors', () => {
    expect(isEmptySelector(undefined)).to.equal(true);
    expect(isEmptySelector({ matchLabels: {} })).to.equal(true);
    expect(isEmptySelector({ matchLabels: { a: 'b' } })).to.equal(false);
  });

  it('renders selectors in the API string form, sorted', () => {
    expect(
      selectorToString({
        matchLabels: { role: 'worker', app: 'x' },
        matchExpressions: [
          { key: 'zone', operator: 'In', values: ['b', 'a'] },
          { key: 'gpu', operator: 'DoesNotExist' },
          { key: 'tier', operator: 'Exists' },
          { key: 'env', operator: 'NotIn', values: ['dev'] },
        ],
      }),
    ).to.equal('app=x,role=worker,zone in (a,b),!gpu,tier,env notin (dev)');
  });
});
