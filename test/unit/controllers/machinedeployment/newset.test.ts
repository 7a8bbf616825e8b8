import { expect } from 'chai';

import type { MachineDeployment, MachineSet } from '../../../../lib/api/types.js';
import {
  ANNOTATIONS_NOT_COPIED,
  buildNewMachineSet,
  findNewMachineSet,
  planNewMachineSetSync,
} from '../../../../lib/controllers/machinedeployment/newset.js';
import { maxRevision } from '../../../../lib/controllers/machinedeployment/sets.js';
import { deployment, ownedSet, withClass } from './fixtures.js';

const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';

describe('new machine set identity and bookkeeping', () => {
  it('finds the oldest set whose template matches, ignoring in-place fields', () => {
    const mcd = deployment('d', 2);
    const older = ownedSet(mcd, 1, { created: '2026-01-01T00:00:00Z' });
    older.metadata.name = 'older';
    older.metadata.uid = 'uid-older';
    const newer = ownedSet(mcd, 1, { created: '2026-01-02T00:00:00Z' });
    const other = ownedSet(mcd, 1, { className: 'large' });
    const changedInPlace = structuredClone(mcd);
    if (changedInPlace.spec?.template.spec !== undefined) {
      changedInPlace.spec.template.spec.nodeTemplate = { metadata: { labels: { x: 'y' } } };
      changedInPlace.spec.template.spec.drainTimeout = '1h';
    }
    expect(findNewMachineSet(changedInPlace, [newer, other, older])?.metadata.name).to.equal('older');
    expect(findNewMachineSet(withClass(mcd, 'huge'), [newer, other, older])).to.equal(undefined);
  });

  it('builds the new set with hash label and selector, owner, revision and replica annotations', () => {
    const mcd = deployment('d', 4, {
      maxSurge: 2,
      annotations: {
        team: 'a',
        'deployment.kubernetes.io/revision': '7',
        'node.machine.sapcloud.io/trigger-deletion-by-mcm': 'm~2026-01-01T00:00:00Z',
        'kubectl.kubernetes.io/last-applied-configuration': '{}',
        [SCALER_TIME]: '2026-01-01T00:00:00Z',
      },
    });
    if (mcd.spec !== undefined) {
      mcd.spec.minReadySeconds = 30;
      mcd.spec.autoPreserveFailedMachineMax = 2;
    }
    const ms = buildNewMachineSet(mcd, { hash: '42', revision: 3, replicas: 2, maxSurge: 2 });
    expect(ms.metadata.name).to.match(/^d-[a-z0-9]{1,5}$/);
    expect(ms.metadata.labels?.['machine-template-hash']).to.equal('42');
    expect(ms.spec?.selector?.matchLabels?.['machine-template-hash']).to.equal('42');
    expect(ms.spec?.template?.metadata?.labels?.['machine-template-hash']).to.equal('42');
    expect(ms.metadata.ownerReferences?.[0]).to.deep.include({
      kind: 'MachineDeployment',
      name: 'd',
      uid: 'uid-d',
      controller: true,
    });
    expect(ms.metadata.annotations).to.deep.equal({
      team: 'a',
      [SCALER_TIME]: '2026-01-01T00:00:00Z',
      'deployment.kubernetes.io/revision': '3',
      'deployment.kubernetes.io/desired-replicas': '4',
      'deployment.kubernetes.io/max-replicas': '6',
    });
    expect(ms.spec).to.deep.include({ replicas: 2, minReadySeconds: 30, autoPreserveFailedMachineMax: 2 });
    expect(
      mcd.spec?.template.metadata?.labels?.['machine-template-hash'],
      'the deployment is not changed',
    ).to.equal(undefined);
  });

  it('does not copy the skip-listed annotations', () => {
    expect([...ANNOTATIONS_NOT_COPIED].sort()).to.deep.equal([
      'deployment.kubernetes.io/desired-replicas',
      'deployment.kubernetes.io/max-replicas',
      'deployment.kubernetes.io/revision',
      'deployment.kubernetes.io/revision-history',
      'deployment.machine.sapcloud.io/prefer-no-schedule',
      'kubectl.kubernetes.io/last-applied-configuration',
      'node.machine.sapcloud.io/trigger-deletion-by-mcm',
      'safety.machine.sapcloud.io/unfreeze',
    ]);
  });

  it('computes the highest revision, ignoring unparsable ones', () => {
    const mcd = deployment('d', 1);
    const a = ownedSet(mcd, 0, { revision: 3 });
    const b = ownedSet(mcd, 0, {
      className: 'x',
      annotations: { 'deployment.kubernetes.io/revision': 'garbage' },
    });
    const c = ownedSet(mcd, 0, { className: 'y', revision: 5 });
    expect(maxRevision([a, b, c])).to.equal(5);
    expect(maxRevision([])).to.equal(0);
  });

  describe('planNewMachineSetSync', () => {
    const base = (): { mcd: MachineDeployment; ms: MachineSet } => {
      const mcd = deployment('d', 3, {
        annotations: { team: 'a', 'deployment.kubernetes.io/revision': '2' },
      });
      return { mcd, ms: ownedSet(mcd, 3, { revision: 2, desired: 3, annotations: { team: 'a' } }) };
    };

    it('changes nothing when the set is in line', () => {
      const { mcd, ms } = base();
      expect(planNewMachineSetSync(mcd, ms, 2).changed).to.equal(false);
    });

    it('raises the revision and records the replaced one in the history (a rollback to this set)', () => {
      const { mcd, ms } = base();
      const first = planNewMachineSetSync(mcd, ms, 5);
      expect(first.changed).to.equal(true);
      expect(first.next.metadata.annotations).to.deep.include({
        'deployment.kubernetes.io/revision': '5',
        'deployment.kubernetes.io/revision-history': '2',
      });
      const second = planNewMachineSetSync(mcd, first.next, 8);
      expect(second.next.metadata.annotations?.['deployment.kubernetes.io/revision-history']).to.equal('2,5');
    });

    it('copies node template, machine configuration, class kind and set options in place', () => {
      const { mcd, ms } = base();
      const spec = mcd.spec;
      if (spec?.template.spec === undefined) throw new Error('fixture');
      spec.template.spec.nodeTemplate = { metadata: { labels: { role: 'gpu' } } };
      spec.template.spec.drainTimeout = '3m';
      spec.template.spec.class = { kind: 'OtherKind', name: 'small' };
      spec.minReadySeconds = 10;
      spec.autoPreserveFailedMachineMax = 1;
      const { changed, next } = planNewMachineSetSync(mcd, ms, 2);
      expect(changed).to.equal(true);
      expect(next.spec?.template?.spec?.nodeTemplate).to.deep.equal({
        metadata: { labels: { role: 'gpu' } },
      });
      expect(next.spec?.template?.spec?.drainTimeout).to.equal('3m');
      expect(next.spec?.template?.spec?.class).to.deep.equal({ kind: 'OtherKind', name: 'small' });
      expect(next.spec).to.deep.include({
        minReadySeconds: 10,
        autoPreserveFailedMachineMax: 1,
        replicas: 3,
      });
      expect(next.spec?.template?.metadata?.labels?.['machine-template-hash'], 'hash label stays').to.be.a(
        'string',
      );
    });

    it('copies new deployment annotations but not the skip list', () => {
      const { mcd, ms } = base();
      mcd.metadata.annotations = {
        ...(mcd.metadata.annotations ?? {}),
        extra: 'x',
        'safety.machine.sapcloud.io/unfreeze': 'True',
        'deployment.machine.sapcloud.io/prefer-no-schedule': 'True',
      };
      const { next } = planNewMachineSetSync(mcd, ms, 2);
      expect(next.metadata.annotations?.extra).to.equal('x');
      expect(next.metadata.annotations).to.not.have.property('safety.machine.sapcloud.io/unfreeze');
      expect(next.metadata.annotations).to.not.have.property(
        'deployment.machine.sapcloud.io/prefer-no-schedule',
      );
    });

    it('gives the scaler time only to a set already sized for the current replicas', () => {
      const { mcd, ms } = base();
      mcd.metadata.annotations = {
        ...(mcd.metadata.annotations ?? {}),
        [SCALER_TIME]: '2026-01-01T00:00:00Z',
      };
      expect(planNewMachineSetSync(mcd, ms, 2).next.metadata.annotations?.[SCALER_TIME]).to.equal(
        '2026-01-01T00:00:00Z',
      );
      if (mcd.spec !== undefined) mcd.spec.replicas = 2;
      expect(
        planNewMachineSetSync(mcd, ms, 2).next.metadata.annotations?.[SCALER_TIME],
        'desired-replicas still 3',
      ).to.equal(undefined);
    });
  });
});
