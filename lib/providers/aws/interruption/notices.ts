// What an interruption-queue message means for the manager (pure): the notices about VMs it
// hands to the manager's sink, with the deadline by which each node must be drained.
//
// Deadlines: EC2 reclaims a Spot instance two minutes after its interruption warning, so the
// drain ends --aws-interruption-drain-timeout after the warning's time, and what is left of the
// two minutes is for deleting the last pods and the instance. A scheduled change (AWS Health)
// starts at its startTime: the drain ends the same margin before it. A stop or termination has
// happened already: its deadline is the event's time (nothing to wait for on the node).

import { VmNoticeKind, type VmNotice } from '../../../driver/notices.js';
import { providerIDOf } from '../driver.js';
import { InterruptionKind, type InterruptionMessage } from './messages.js';

/** EC2 reclaims a Spot instance this long after its interruption warning. */
export const SPOT_INTERRUPTION_NOTICE_MS = 120_000;

export interface InterruptionSettings {
  /**
   * --aws-interruption-drain-timeout: how long after a Spot interruption warning the node's drain
   * may take before the pods still there are deleted without eviction (less than two minutes).
   */
  drainTimeoutMs: number;
  /** --aws-rebalance-as-interruption: a rebalance recommendation replaces the machine (surge first). */
  rebalanceAsInterruption: boolean;
}

export const defaultInterruptionSettings: InterruptionSettings = {
  drainTimeoutMs: 90_000,
  rebalanceAsInterruption: false,
};

/** The event reasons of the notices (the Machine's events say them). */
export const NoticeReason = {
  SpotInterruption: 'SpotInterruption',
  ScheduledChange: 'ScheduledChange',
  RebalanceRecommendation: 'RebalanceRecommendation',
  InstanceStopped: 'InstanceStopped',
  InstanceTerminated: 'InstanceTerminated',
} as const;

const iso = (ms: number): string => new Date(ms).toISOString();

/** An AWS Health time ("Sat, 05 Jun 2016 15:10:09 GMT", or RFC 3339) in ms, if it parses. */
function healthTime(s: string | undefined): number | undefined {
  if (s === undefined || s.trim() === '') return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

/** The notices of one message, one per instance it names. */
export function noticesOf(msg: InterruptionMessage, s: InterruptionSettings): VmNotice[] {
  const margin = Math.max(0, SPOT_INTERRUPTION_NOTICE_MS - s.drainTimeoutMs);
  const sent = iso(msg.time);
  return msg.instanceIds.map((id): VmNotice => {
    const base = { providerID: providerIDOf(msg.region, id), sentAt: msg.time };
    switch (msg.kind) {
      case InterruptionKind.SpotInterruption:
        return {
          ...base,
          kind: VmNoticeKind.Interruption,
          reason: NoticeReason.SpotInterruption,
          message: `EC2 Spot interruption warning for instance ${id} (action ${msg.instanceAction ?? 'unknown'}) sent at ${sent}`,
          deadline: msg.time + s.drainTimeoutMs,
        };
      case InterruptionKind.ScheduledChange: {
        const start = healthTime(msg.startTime);
        return {
          ...base,
          kind: VmNoticeKind.Interruption,
          reason: NoticeReason.ScheduledChange,
          message: `AWS Health scheduled change ${msg.eventTypeCode ?? '(no type code)'} of instance ${id}, starting ${start === undefined ? 'at an unknown time' : iso(start)}`,
          // Without a start, as urgent as a Spot interruption: better early than after the change.
          deadline: start === undefined ? msg.time + s.drainTimeoutMs : start - margin,
        };
      }
      case InterruptionKind.RebalanceRecommendation:
        return {
          ...base,
          kind: VmNoticeKind.Rebalance,
          reason: NoticeReason.RebalanceRecommendation,
          message: `EC2 rebalance recommendation for instance ${id} sent at ${sent}: its Spot capacity is at elevated risk of interruption`,
          replace: s.rebalanceAsInterruption,
        };
      case InterruptionKind.InstanceStopped:
      case InterruptionKind.InstanceTerminated:
        return {
          ...base,
          kind:
            msg.kind === InterruptionKind.InstanceStopped ? VmNoticeKind.Stopped : VmNoticeKind.Terminated,
          reason:
            msg.kind === InterruptionKind.InstanceStopped
              ? NoticeReason.InstanceStopped
              : NoticeReason.InstanceTerminated,
          message: `EC2 reports instance ${id} ${msg.state ?? 'stopped'} at ${sent}`,
        };
    }
  });
}
