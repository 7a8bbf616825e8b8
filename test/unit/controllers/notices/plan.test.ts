import { expect } from 'chai';

import type { Machine } from '../../../../lib/api/types.js';
import { planNotice, type NoticePlan } from '../../../../lib/controllers/notices/plan.js';
import { VmNoticeKind, type VmNotice } from '../../../../lib/driver/notices.js';
import type { Node } from '../../../../lib/kube/types.js';
import { machine, machineSet } from '../builders.js';

const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString();
const REPLACING = 'machine.mcm-ts.io/replacing';
const DEADLINE = 'machine.mcm-ts.io/interruption-deadline';
const FAILURE = 'machine.mcm-ts.io/vm-failure';
const REBALANCE = 'machine.mcm-ts.io/rebalance-recommended';
const ms = machineSet('ms', 3);

const spot = (deadline = NOW + 90_000): VmNotice => ({
  kind: VmNoticeKind.Interruption,
  providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
  reason: 'SpotInterruption',
  message: 'EC2 Spot interruption warning for instance i-0123456789abcdef0',
  sentAt: NOW,
  deadline,
});
const rebalance = (replace = false): VmNotice => ({
  kind: VmNoticeKind.Rebalance,
  providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
  reason: 'RebalanceRecommendation',
  message: 'EC2 rebalance recommendation',
  sentAt: NOW,
  replace,
});
const stopped: VmNotice = {
  kind: VmNoticeKind.Stopped,
  providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
  reason: 'InstanceStopped',
  message: 'EC2 reports instance i-0123456789abcdef0 stopped',
  sentAt: NOW - 2_000,
};

const impaired: VmNotice = {
  kind: VmNoticeKind.Impaired,
  providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
  reason: 'InstanceImpaired',
  message:
    'EC2 reports instance i-0123456789abcdef0 impaired: system status check impaired (reachability) since 2026-11-21T09:50:00Z; impaired for longer than 5m0s (--aws-impaired-timeout)',
  sentAt: NOW,
};

const recovered: VmNotice = {
  kind: VmNoticeKind.Recovered,
  providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
  reason: 'InstanceRecovered',
  message: "EC2 reports instance i-0123456789abcdef0's status checks no longer impaired",
  sentAt: NOW,
  withdraws: 'InstanceImpaired',
};

const node = (conditions: NonNullable<Node['status']>['conditions'] = []): Node => ({
  metadata: { name: 'n1' },
  status: { conditions },
});

interface Case {
  name: string;
  m: Machine;
  notice: VmNotice;
  node?: Node;
  want: Partial<Record<keyof Extract<NoticePlan, { outcome: 'acted' }>, unknown>> & { outcome: string };
}

const cases: Case[] = [
  {
    name: 'interruption of a machine of a set: replacing and the deadline, nothing else',
    m: machine('a', { owner: ms }),
    notice: spot(),
    want: {
      outcome: 'acted',
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 90_000) },
      deleteMachine: undefined,
    },
  },
  {
    name: 'the same interruption again: a duplicate',
    m: machine('a', {
      owner: ms,
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 90_000) },
    }),
    notice: spot(),
    want: { outcome: 'duplicate' },
  },
  {
    name: 'a later deadline never extends the recorded one: a duplicate',
    m: machine('a', {
      owner: ms,
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 60_000) },
    }),
    notice: spot(NOW + 90_000),
    want: { outcome: 'duplicate' },
  },
  {
    name: 'an earlier deadline (a scheduled change, then the spot warning) moves it forward',
    m: machine('a', {
      owner: ms,
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 3_600_000) },
    }),
    notice: spot(),
    want: { outcome: 'acted', annotations: { [DEADLINE]: iso(NOW + 90_000) } },
  },
  {
    name: 'a machine replaced by expiry (no deadline) becomes urgent, its replacing value kept',
    m: machine('a', { owner: ms, annotations: { [REPLACING]: 'expired' } }),
    notice: spot(),
    want: { outcome: 'acted', annotations: { [DEADLINE]: iso(NOW + 90_000) } },
  },
  {
    name: 'a machine being deleted (scale-down) gets the deadline, which bounds its drain',
    m: machine('a', { owner: ms, deleting: true }),
    notice: spot(),
    want: { outcome: 'acted', annotations: { [DEADLINE]: iso(NOW + 90_000) } },
  },
  {
    name: 'a machine being deleted with that deadline already: a duplicate',
    m: machine('a', { owner: ms, deleting: true, annotations: { [DEADLINE]: iso(NOW + 90_000) } }),
    notice: spot(),
    want: { outcome: 'duplicate' },
  },
  {
    name: 'a machine no set owns: recorded and deleted (nothing would replace it)',
    m: machine('a'),
    notice: spot(),
    want: {
      outcome: 'acted',
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 90_000) },
      deleteMachine: true,
    },
  },
  {
    name: 'a machine no set owns, recorded but not yet deleted (a restart between the writes): deleted',
    m: machine('a', { annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 90_000) } }),
    notice: spot(),
    want: { outcome: 'acted', annotations: undefined, deleteMachine: true },
  },
  {
    name: 'rebalance: the node condition and an event',
    m: machine('a', { owner: ms }),
    notice: rebalance(),
    node: node([{ type: 'Ready', status: 'True' }]),
    want: { outcome: 'acted', annotations: undefined },
  },
  {
    name: 'rebalance again: the node has the condition, a duplicate',
    m: machine('a', { owner: ms }),
    notice: rebalance(),
    node: node([{ type: 'RebalanceRecommended', status: 'True' }]),
    want: { outcome: 'duplicate' },
  },
  {
    name: 'rebalance without a node: the event alone',
    m: machine('a', { owner: ms }),
    notice: rebalance(),
    want: { outcome: 'acted', nodeCondition: undefined, annotations: undefined },
  },
  {
    name: 'rebalance opted in: recorded on the machine for its deployment to replace (not marked replacing here)',
    m: machine('a', { owner: ms }),
    notice: rebalance(true),
    want: {
      outcome: 'acted',
      annotations: { [REBALANCE]: iso(NOW) },
      nodeCondition: undefined,
    },
  },
  {
    name: 'rebalance opted in again: recorded already and the node has the condition, a duplicate',
    m: machine('a', { owner: ms, annotations: { [REBALANCE]: iso(NOW - 60_000) } }),
    notice: rebalance(true),
    node: node([{ type: 'RebalanceRecommended', status: 'True' }]),
    want: { outcome: 'duplicate' },
  },
  {
    name: 'rebalance opted in for a machine being replaced already (interrupted): the condition only',
    m: machine('a', {
      owner: ms,
      annotations: { [REPLACING]: 'interrupted', [DEADLINE]: iso(NOW + 60_000) },
    }),
    notice: rebalance(true),
    node: node(),
    want: { outcome: 'acted', annotations: undefined },
  },
  {
    name: 'rebalance opted in, a machine no set owns: reported only, not deleted',
    m: machine('a'),
    notice: rebalance(true),
    node: node(),
    want: { outcome: 'acted', annotations: undefined, deleteMachine: undefined },
  },
  {
    name: 'stopped, not by the manager: the failure recorded, its drain forced from the event’s time (the machine controller fails it within the budget)',
    m: machine('a', { owner: ms, phase: 'Running' }),
    notice: stopped,
    want: { outcome: 'acted', annotations: { [FAILURE]: 'InstanceStopped', [DEADLINE]: iso(NOW - 2_000) } },
  },
  {
    name: 'stopped while being deleted: the manager’s own doing, ignored',
    m: machine('a', { owner: ms, deleting: true }),
    notice: stopped,
    want: { outcome: 'ignored' },
  },
  {
    name: 'stopped again: the failure and the deadline recorded already, a duplicate',
    m: machine('a', {
      owner: ms,
      phase: 'Failed',
      annotations: { [FAILURE]: 'InstanceStopped', [DEADLINE]: iso(NOW - 2_000) },
    }),
    notice: stopped,
    want: { outcome: 'duplicate' },
  },
  {
    name: 'stopped while still being created (Pending, no node yet): a failed launch, no deadline (no pods to drain)',
    m: machine('a', { owner: ms, phase: 'Pending' }),
    notice: stopped,
    want: { outcome: 'acted', annotations: { [FAILURE]: 'InstanceStopped' } },
  },
  {
    name: 'impaired for longer than the timeout: the failure recorded, no deadline (its node is drained with evictions while Ready)',
    m: machine('a', { owner: ms, phase: 'Running' }),
    notice: impaired,
    want: { outcome: 'acted', annotations: { [FAILURE]: 'InstanceImpaired' }, deleteMachine: undefined },
  },
  {
    name: 'impaired while being deleted: ignored (the deletion replaces the instance anyway)',
    m: machine('a', { owner: ms, deleting: true }),
    notice: impaired,
    want: { outcome: 'ignored' },
  },
  {
    name: 'impaired again, the next poll: recorded already, a duplicate',
    m: machine('a', { owner: ms, phase: 'Running', annotations: { [FAILURE]: 'InstanceImpaired' } }),
    notice: impaired,
    want: { outcome: 'duplicate' },
  },
  {
    name: 'impaired, then stopped: the first failure kept, the stop adds the deadline',
    m: machine('a', { owner: ms, phase: 'Failed', annotations: { [FAILURE]: 'InstanceImpaired' } }),
    notice: stopped,
    want: { outcome: 'acted', annotations: { [DEADLINE]: iso(NOW - 2_000) } },
  },
  {
    name: 'recovered while waiting for the replacement budget (still Running): the impairment withdrawn',
    m: machine('a', { owner: ms, phase: 'Running', annotations: { [FAILURE]: 'InstanceImpaired' } }),
    notice: recovered,
    want: { outcome: 'acted', annotations: { [FAILURE]: null } },
  },
  {
    name: 'recovered once the machine was Failed for it: ignored (it is replaced all the same)',
    m: machine('a', { owner: ms, phase: 'Failed', annotations: { [FAILURE]: 'InstanceImpaired' } }),
    notice: recovered,
    want: { outcome: 'ignored' },
  },
  {
    name: 'recovered, but a later notice said the VM stopped (a deadline): ignored',
    m: machine('a', {
      owner: ms,
      phase: 'Running',
      annotations: { [FAILURE]: 'InstanceImpaired', [DEADLINE]: iso(NOW - 2_000) },
    }),
    notice: recovered,
    want: { outcome: 'ignored' },
  },
  {
    name: 'recovered, the failure recorded another one (stopped): nothing to withdraw',
    m: machine('a', { owner: ms, phase: 'Running', annotations: { [FAILURE]: 'InstanceStopped' } }),
    notice: recovered,
    want: { outcome: 'duplicate' },
  },
];

describe('notices about VMs: what to record on the machine (planNotice)', () => {
  for (const tc of cases) {
    it(tc.name, () => {
      const plan = planNotice(tc.m, tc.notice, NOW, tc.node);
      expect(plan.outcome).to.equal(tc.want.outcome);
      if (plan.outcome !== 'acted') return;
      for (const [k, v] of Object.entries(tc.want)) {
        if (k === 'outcome') continue;
        expect(plan[k as keyof typeof plan], k).to.deep.equal(v);
      }
    });
  }

  it('records the failure of a stopped machine in an event saying the cloud did it, not the manager, and that the budget bounds it', () => {
    const plan = planNotice(machine('a', { owner: ms, phase: 'Running' }), stopped, NOW, undefined);
    if (plan.outcome !== 'acted') expect.fail(`outcome ${plan.outcome}`);
    expect(plan.event).to.deep.include({ type: 'Warning', reason: 'InstanceStopped' });
    expect(plan.event.message).to.contain('stopped').and.to.contain('did not ask for');
    expect(plan.event.message).to.contain('within its deployment').and.to.contain('replacement budget');
  });

  it('says a launch failed when the VM of a machine being created stops, and that its class backs off', () => {
    const plan = planNotice(machine('a', { owner: ms, phase: 'Pending' }), stopped, NOW, undefined);
    if (plan.outcome !== 'acted') expect.fail(`outcome ${plan.outcome}`);
    expect(plan.event.message).to.contain('the launch of machine a failed').and.to.contain('back off');
  });

  it('never marks a machine Failed itself: a zone-wide event goes through the machine controller’s replacement budget', () => {
    for (const notice of [stopped, impaired, { ...stopped, kind: VmNoticeKind.Terminated }]) {
      const plan = planNotice(machine('a', { owner: ms, phase: 'Running' }), notice, NOW, node());
      if (plan.outcome !== 'acted') expect.fail(`outcome ${plan.outcome}`);
      expect(Object.keys(plan)).to.have.members(['outcome', 'annotations', 'event']);
    }
  });

  it('sets the RebalanceRecommended condition True with the notice as reason and message', () => {
    const plan = planNotice(machine('a', { owner: ms }), rebalance(), NOW, node());
    if (plan.outcome !== 'acted') expect.fail(`outcome ${plan.outcome}`);
    expect(plan.nodeCondition).to.deep.include({
      type: 'RebalanceRecommended',
      status: 'True',
      reason: 'RebalanceRecommendation',
      message: 'EC2 rebalance recommendation',
    });
    expect(plan.event.type).to.equal('Normal');
  });

  it('says in the event when the drain of an interrupted machine ends', () => {
    const plan = planNotice(machine('a', { owner: ms }), spot(), NOW, undefined);
    if (plan.outcome !== 'acted') expect.fail(`outcome ${plan.outcome}`);
    expect(plan.event).to.deep.include({ type: 'Warning', reason: 'SpotInterruption' });
    expect(plan.event.message).to.contain(`drained by ${iso(NOW + 90_000)}`);
  });
});
