import { expect } from 'chai';

import { VmNoticeKind } from '../../../../../lib/driver/notices.js';
import {
  InterruptionKind,
  type InterruptionMessage,
} from '../../../../../lib/providers/aws/interruption/messages.js';
import { noticesOf } from '../../../../../lib/providers/aws/interruption/notices.js';

const T = Date.parse('2026-11-28T02:00:00Z');
const settings = { drainTimeoutMs: 90_000, rebalanceAsInterruption: false };

function message(
  kind: InterruptionMessage['kind'],
  extra: Partial<InterruptionMessage> = {},
): InterruptionMessage {
  return { kind, id: 'e-1', time: T, region: 'eu-west-1', instanceIds: ['i-0123456789abcdef0'], ...extra };
}

describe('interruption notices from queue messages (noticesOf)', () => {
  it('a spot interruption warning: an interruption of the instance, drained by the warning’s time plus the drain timeout', () => {
    const [n, ...rest] = noticesOf(
      message(InterruptionKind.SpotInterruption, { instanceAction: 'terminate' }),
      settings,
    );
    expect(rest).to.deep.equal([]);
    expect(n).to.deep.include({
      kind: VmNoticeKind.Interruption,
      providerID: 'aws:///eu-west-1/i-0123456789abcdef0',
      reason: 'SpotInterruption',
      sentAt: T,
      deadline: T + 90_000,
    });
    expect(n?.message).to.contain('i-0123456789abcdef0').and.to.contain('terminate');
  });

  it('a scheduled change: drained the same margin before its start as a spot interruption before EC2’s two minutes', () => {
    const start = 'Sat, 05 Dec 2026 15:10:09 GMT';
    const notices = noticesOf(
      message(InterruptionKind.ScheduledChange, {
        instanceIds: ['i-0123456789abcdef0', 'i-0fedcba9876543210'],
        eventTypeCode: 'AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED',
        startTime: start,
      }),
      settings,
    );
    expect(notices.map((n) => n.providerID)).to.deep.equal([
      'aws:///eu-west-1/i-0123456789abcdef0',
      'aws:///eu-west-1/i-0fedcba9876543210',
    ]);
    for (const n of notices) {
      expect(n).to.deep.include({ kind: VmNoticeKind.Interruption, reason: 'ScheduledChange' });
      expect(n.deadline).to.equal(Date.parse(start) - 30_000);
      expect(n.message).to.contain('AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED');
    }
    // No start: as urgent as a spot interruption.
    const [unknown] = noticesOf(message(InterruptionKind.ScheduledChange), settings);
    expect(unknown?.deadline).to.equal(T + 90_000);
  });

  it('a rebalance recommendation: advice, a replacement only when opted in', () => {
    const [advice] = noticesOf(message(InterruptionKind.RebalanceRecommendation), settings);
    expect(advice).to.deep.include({ kind: VmNoticeKind.Rebalance, replace: false });
    expect(advice?.deadline).to.equal(undefined);
    const [opted] = noticesOf(message(InterruptionKind.RebalanceRecommendation), {
      ...settings,
      rebalanceAsInterruption: true,
    });
    expect(opted).to.deep.include({ kind: VmNoticeKind.Rebalance, replace: true });
  });

  it('state changes: stopped or terminated, with the state in the message', () => {
    const [s] = noticesOf(message(InterruptionKind.InstanceStopped, { state: 'stopping' }), settings);
    expect(s).to.deep.include({ kind: VmNoticeKind.Stopped, reason: 'InstanceStopped' });
    expect(s?.message).to.contain('stopping');
    const [t] = noticesOf(message(InterruptionKind.InstanceTerminated, { state: 'terminated' }), settings);
    expect(t).to.deep.include({ kind: VmNoticeKind.Terminated, reason: 'InstanceTerminated' });
  });
});
