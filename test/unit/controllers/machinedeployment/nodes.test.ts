import { expect } from 'chai';

import type { Taint } from '../../../../lib/kube/types.js';
import {
  PREFER_NO_SCHEDULE_TAINT,
  scaleDownDisabledPatch,
  scaleDownRestorePatch,
  taintsWith,
  taintsWithout,
} from '../../../../lib/controllers/machinedeployment/nodes.js';
import { node } from './fixtures.js';

const DISABLED = 'cluster-autoscaler.kubernetes.io/scale-down-disabled';
const BY_MCM = 'cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm';
const other: Taint = { key: 'dedicated', value: 'gpu', effect: 'NoSchedule' };

describe('node taints during a rollout', () => {
  it('adds the prefer-no-schedule taint next to existing taints, once', () => {
    expect(PREFER_NO_SCHEDULE_TAINT).to.deep.equal({
      key: 'deployment.machine.sapcloud.io/prefer-no-schedule',
      value: 'True',
      effect: 'PreferNoSchedule',
    });
    expect(taintsWith(undefined, PREFER_NO_SCHEDULE_TAINT)).to.deep.equal([PREFER_NO_SCHEDULE_TAINT]);
    expect(taintsWith([other], PREFER_NO_SCHEDULE_TAINT)).to.deep.equal([other, PREFER_NO_SCHEDULE_TAINT]);
    expect(taintsWith([other, PREFER_NO_SCHEDULE_TAINT], PREFER_NO_SCHEDULE_TAINT)).to.equal(undefined);
  });

  it('updates a taint with the same key and effect but another value', () => {
    const stale = { ...PREFER_NO_SCHEDULE_TAINT, value: 'False' };
    expect(taintsWith([stale, other], PREFER_NO_SCHEDULE_TAINT)).to.deep.equal([
      other,
      PREFER_NO_SCHEDULE_TAINT,
    ]);
  });

  it('removes only the prefer-no-schedule taint, and reports when there is none', () => {
    expect(taintsWithout([other, PREFER_NO_SCHEDULE_TAINT], PREFER_NO_SCHEDULE_TAINT)).to.deep.equal([other]);
    expect(taintsWithout([PREFER_NO_SCHEDULE_TAINT], PREFER_NO_SCHEDULE_TAINT)).to.deep.equal([]);
    expect(taintsWithout([other], PREFER_NO_SCHEDULE_TAINT)).to.equal(undefined);
    const sameKeyOtherEffect: Taint = { ...PREFER_NO_SCHEDULE_TAINT, effect: 'NoSchedule' };
    expect(taintsWithout([sameKeyOtherEffect], PREFER_NO_SCHEDULE_TAINT)).to.equal(undefined);
  });
});

describe('cluster-autoscaler scale-down protection', () => {
  const annotated = (annotations: Record<string, string>) =>
    node('n', { metadata: { name: 'n', annotations } });

  it('protects a node with the annotation and the by-mcm marker', () => {
    expect(scaleDownDisabledPatch(node('n'))).to.deep.equal({ [DISABLED]: 'true', [BY_MCM]: 'true' });
    expect(scaleDownDisabledPatch(annotated({ [DISABLED]: 'true', [BY_MCM]: 'true' }))).to.equal(undefined);
  });

  it("leaves a user's own scale-down-disabled annotation alone", () => {
    expect(scaleDownDisabledPatch(annotated({ [DISABLED]: 'true' }))).to.equal(undefined);
    expect(scaleDownDisabledPatch(annotated({ [DISABLED]: 'false' }))).to.equal(undefined);
    expect(scaleDownRestorePatch(annotated({ [DISABLED]: 'true' }))).to.equal(undefined);
  });

  it('removes the protection only where the by-mcm marker shows it was ours', () => {
    expect(scaleDownRestorePatch(annotated({ [DISABLED]: 'true', [BY_MCM]: 'true' }))).to.deep.equal({
      [DISABLED]: null,
      [BY_MCM]: null,
    });
    expect(scaleDownRestorePatch(node('n'))).to.equal(undefined);
  });
});
