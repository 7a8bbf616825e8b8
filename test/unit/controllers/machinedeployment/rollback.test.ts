import { expect } from 'chai';

import {
  findRollbackTarget,
  rolledBackDeployment,
} from '../../../../lib/controllers/machinedeployment/rollback.js';
import { deployment, ownedSet, withClass } from './fixtures.js';

describe('findRollbackTarget', () => {
  const v1 = deployment('d', 2, { className: 'v1' });
  const sets = [
    ownedSet(v1, 0, { className: 'v1', revision: 1 }),
    ownedSet(v1, 0, { className: 'v2', revision: 2 }),
    ownedSet(v1, 2, { className: 'v3', revision: 3 }),
  ];
  const className = (t: ReturnType<typeof findRollbackTarget>): string | undefined =>
    t.found ? t.set.spec?.template?.spec?.class?.name : undefined;

  it('revision 0 means the one before the current template', () => {
    const t = findRollbackTarget(withClass(v1, 'v3'), sets, 0);
    expect(t).to.deep.include({ found: true, revision: 2 });
    expect(className(t)).to.equal('v2');
  });

  it('revision 0 with a template that has no set yet means the latest set', () => {
    const t = findRollbackTarget(withClass(v1, 'v4'), sets, 0);
    expect(t).to.deep.include({ found: true, revision: 3 });
  });

  it('finds an explicit revision', () => {
    expect(className(findRollbackTarget(withClass(v1, 'v3'), sets, 1))).to.equal('v1');
  });

  it('reports a missing revision and a missing previous revision', () => {
    expect(findRollbackTarget(withClass(v1, 'v3'), sets, 9)).to.deep.equal({
      found: false,
      revision: 9,
      reason: 'revision-not-found',
    });
    const only = [ownedSet(v1, 2, { className: 'v1', revision: 1 })];
    expect(findRollbackTarget(v1, only, 0)).to.deep.equal({
      found: false,
      revision: 0,
      reason: 'no-previous-revision',
    });
  });
});

describe('rolledBackDeployment', () => {
  it('takes the set template without the hash label, and its annotations except the skip list', () => {
    const current = deployment('d', 2, {
      className: 'v2',
      annotations: {
        'deployment.kubernetes.io/revision': '2',
        team: 'new',
        'safety.machine.sapcloud.io/unfreeze': 'True',
      },
    });
    const old = ownedSet(current, 0, {
      className: 'v1',
      revision: 1,
      annotations: { team: 'old', extra: 'x', 'deployment.kubernetes.io/desired-replicas': '5' },
    });
    const next = rolledBackDeployment(current, old);
    expect(next.spec?.template.spec?.class?.name).to.equal('v1');
    expect(next.spec?.template.metadata?.labels).to.deep.equal({ app: 'worker', pool: 'd', name: 'd' });
    expect(next.metadata.annotations).to.deep.equal({
      'deployment.kubernetes.io/revision': '2',
      'safety.machine.sapcloud.io/unfreeze': 'True',
      team: 'old',
      extra: 'x',
    });
    expect(current.spec?.template.spec?.class?.name, 'input unchanged').to.equal('v2');
  });
});
