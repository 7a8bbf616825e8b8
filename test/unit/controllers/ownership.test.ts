import { expect } from 'chai';

import { planClaim, type Owner } from '../../../lib/controllers/ownership.js';
import type { KubeObject } from '../../../lib/kube/types.js';

const owner: Owner = {
  apiVersion: 'machine.sapcloud.io/v1alpha1',
  kind: 'MachineSet',
  name: 'ms',
  uid: 'u1',
  deleting: false,
};

function child(
  name: string,
  opts: { labels?: Record<string, string>; controller?: string; deleting?: boolean } = {},
): KubeObject {
  const o: KubeObject = {
    apiVersion: 'machine.sapcloud.io/v1alpha1',
    kind: 'Machine',
    metadata: { name, namespace: 'default', uid: `uid-${name}`, labels: opts.labels ?? { app: 'a' } },
  };
  if (opts.controller !== undefined) {
    o.metadata.ownerReferences = [
      { apiVersion: owner.apiVersion, kind: owner.kind, name: 'x', uid: opts.controller, controller: true },
    ];
  }
  if (opts.deleting === true) o.metadata.deletionTimestamp = '2026-11-21T10:00:00Z';
  return o;
}

describe('planClaim (controller-reference rules)', () => {
  const selector = { matchLabels: { app: 'a' } };
  const cases: {
    name: string;
    child: KubeObject;
    deleting?: boolean;
    want: 'owned' | 'adopt' | 'release' | 'none';
  }[] = [
    { name: 'owned and selected: owned', child: child('c', { controller: 'u1' }), want: 'owned' },
    {
      name: 'owned, no longer selected: released',
      child: child('c', { controller: 'u1', labels: { app: 'b' } }),
      want: 'release',
    },
    {
      name: 'owned, no longer selected, owner being deleted: not released',
      child: child('c', { controller: 'u1', labels: { app: 'b' } }),
      deleting: true,
      want: 'none',
    },
    {
      name: 'owned and selected, owner being deleted: still owned (its deletion deletes it)',
      child: child('c', { controller: 'u1' }),
      deleting: true,
      want: 'owned',
    },
    {
      name: 'owned, no longer selected, child being deleted: left out, not released',
      child: child('c', { controller: 'u1', labels: { app: 'b' }, deleting: true }),
      want: 'none',
    },
    { name: 'selected orphan: adopted', child: child('c'), want: 'adopt' },
    {
      name: 'selected orphan, owner being deleted: not adopted',
      child: child('c'),
      deleting: true,
      want: 'none',
    },
    {
      name: 'selected orphan being deleted: not adopted',
      child: child('c', { deleting: true }),
      want: 'none',
    },
    { name: 'orphan not selected: ignored', child: child('c', { labels: { app: 'b' } }), want: 'none' },
    { name: "another controller's child: ignored", child: child('c', { controller: 'u2' }), want: 'none' },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      const plan = planClaim({ ...owner, deleting: tc.deleting ?? false }, selector, [tc.child]);
      const got =
        plan.owned.length > 0
          ? 'owned'
          : plan.adopt.length > 0
            ? 'adopt'
            : plan.release.length > 0
              ? 'release'
              : 'none';
      expect(got).to.equal(tc.want);
    });
  }

  it('an empty selector matches nothing: owned children are released, orphans ignored', () => {
    const plan = planClaim(owner, {}, [child('a', { controller: 'u1' }), child('b')]);
    expect(plan.release.map((c) => c.metadata.name)).to.deep.equal(['a']);
    expect(plan.adopt).to.deep.equal([]);
  });
});
