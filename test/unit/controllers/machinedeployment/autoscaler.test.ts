import { expect } from 'chai';

import { isRFC3339, parseTriggerDeletion } from '../../../../lib/api/triggerdeletion.js';
import type { Machine } from '../../../../lib/api/types.js';
import {
  machineMarkPatch,
  planTriggerDeletion,
} from '../../../../lib/controllers/machinedeployment/autoscaler.js';
import { deployment, machineOf, NOW, NOW_RFC3339, ownedSet } from './fixtures.js';

const TRIGGER = 'node.machine.sapcloud.io/trigger-deletion-by-mcm';
const SCALER_TIME = 'machine.sapcloud.io/last-deployment-replica-change-by-scaler-time';
const T1 = '2026-11-21T09:00:00Z';
const T2 = '2026-11-21T09:30:00+01:00';

describe('trigger-deletion-by-mcm parsing', () => {
  it('reads marked, legacy and malformed entries', () => {
    expect(parseTriggerDeletion(`a~${T1}, b ,,c~yesterday,d~${T1}~x,~${T1}`)).to.deep.equal([
      { kind: 'marked', name: 'a', time: T1 },
      { kind: 'legacy', name: 'b' },
      { kind: 'invalid', raw: 'c~yesterday', why: '"yesterday" is not an RFC 3339 time' },
      { kind: 'invalid', raw: `d~${T1}~x`, why: 'expected <machine>~<RFC3339 time>' },
      { kind: 'invalid', raw: `~${T1}`, why: 'expected <machine>~<RFC3339 time>' },
    ]);
    expect(parseTriggerDeletion(undefined)).to.deep.equal([]);
  });

  it('accepts RFC 3339 times only', () => {
    expect(isRFC3339(T1)).to.equal(true);
    expect(isRFC3339(T2)).to.equal(true);
    expect(isRFC3339('2026-11-21T09:00:00.123Z')).to.equal(true);
    expect(isRFC3339('2026-11-21 09:00:00')).to.equal(false);
    expect(isRFC3339('2026-13-41T09:00:00Z')).to.equal(false);
  });
});

describe('planTriggerDeletion', () => {
  const mcd = deployment('d', 2);
  const ms = ownedSet(mcd, 3);
  const foreign = ownedSet(deployment('other', 1), 1);
  const machines = new Map<string, Machine>(
    [
      machineOf(ms, 'm1'),
      machineOf(ms, 'm2'),
      machineOf(ms, 'failed', { phase: 'Failed' }),
      machineOf(ms, 'leaving', { deleting: true }),
      machineOf(foreign, 'theirs'),
    ].map((m) => [m.metadata.name ?? '', m]),
  );
  const plan = (annotations: Record<string, string>) =>
    planTriggerDeletion({
      mcd: { ...mcd, metadata: { ...mcd.metadata, annotations } },
      now: NOW,
      machine: (name) => machines.get(name),
      ownedByDeployment: (m) => m.metadata.ownerReferences?.[0]?.uid === ms.metadata.uid,
    });

  it('does nothing without the annotation', () => {
    expect(plan({})).to.equal(undefined);
  });

  it('keeps entries of live machines of this deployment and marks exactly them', () => {
    const p = plan({ [TRIGGER]: `m1~${T1},m2~${T2}` });
    expect(p).to.deep.include({ value: `m1~${T1},m2~${T2}`, changed: false, setScalerTime: undefined });
    expect(p?.marks).to.deep.equal([
      { name: 'm1', time: T1 },
      { name: 'm2', time: T2 },
    ]);
  });

  it('drops malformed entries and those of missing, foreign, failed or terminating machines', () => {
    const p = plan({ [TRIGGER]: `m1~${T1},bad~nope,ghost~${T1},theirs~${T1},failed~${T1},leaving~${T1}` });
    expect(p?.value).to.equal(`m1~${T1}`);
    expect(p?.changed).to.equal(true);
    expect(p?.marks.map((m) => m.name)).to.deep.equal(['m1']);
    expect(p?.dropped.map((d) => d.why)).to.deep.equal([
      '"nope" is not an RFC 3339 time',
      'machine does not exist',
      'machine does not belong to this machine deployment',
      'machine has failed and is replaced anyway',
      'machine is already being deleted',
    ]);
  });

  it('removes the annotation once no entry is left', () => {
    const p = plan({ [TRIGGER]: `leaving~${T1}` });
    expect(p).to.deep.include({ value: undefined, changed: true });
    expect(p?.marks).to.deep.equal([]);
  });

  it('gives legacy entries the recorded scaler time', () => {
    const p = plan({ [TRIGGER]: 'm1', [SCALER_TIME]: T1 });
    expect(p).to.deep.include({ value: `m1~${T1}`, changed: true, setScalerTime: undefined });
    expect(p?.marks).to.deep.equal([{ name: 'm1', time: T1 }]);
  });

  it('records now as scaler time for legacy entries when none is recorded', () => {
    const p = plan({ [TRIGGER]: `m1,m2~${T1}` });
    expect(p).to.deep.include({
      value: `m1~${NOW_RFC3339},m2~${T1}`,
      changed: true,
      setScalerTime: NOW_RFC3339,
    });
  });

  it('lists a machine named twice once', () => {
    expect(plan({ [TRIGGER]: `m1~${T1},m1~${T2}` })?.marks).to.deep.equal([{ name: 'm1', time: T1 }]);
  });
});

describe('machineMarkPatch', () => {
  const ms = ownedSet(deployment('d', 1), 1);
  it('sets priority 1 and the mark time, only when different', () => {
    expect(machineMarkPatch(machineOf(ms, 'a'), T1)).to.deep.equal({
      'machinepriority.machine.sapcloud.io': '1',
      'machine.sapcloud.io/marked-for-deletion-time': T1,
    });
    const marked = machineOf(ms, 'b', {
      annotations: {
        'machinepriority.machine.sapcloud.io': '1',
        'machine.sapcloud.io/marked-for-deletion-time': T1,
      },
    });
    expect(machineMarkPatch(marked, T1)).to.equal(undefined);
    expect(machineMarkPatch(marked, T2)).to.deep.include({
      'machine.sapcloud.io/marked-for-deletion-time': T2,
    });
  });
});
