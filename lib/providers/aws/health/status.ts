// What EC2's status checks say about an instance (pure): which of its two checks, the instance's
// own and the system's (AWS's hardware and network under it), DescribeInstanceStatus reports
// `impaired`, and since when; and which instances have been impaired for longer than the timeout.
//
// Statuses are read from each answer, never inferred from the request's filters: the EC2 emulator
// ignores the `instance-status.status` and `system-status.status` filters and lists every running
// instance. `ok`, `initializing`, `insufficient-data` and `not-applicable` are not impaired.
//
// How long: from EC2's `ImpairedSince` of a failed detail when it gives one, else from the first
// poll of this process that saw the instance impaired (memory only: a restart starts that clock
// again). An instance seen not impaired, or absent from a complete poll, is forgotten, so the
// clock of one that goes back to ok and fails again starts again.

import type { InstanceStatus, InstanceStatusSummary } from '@aws-sdk/client-ec2';

/** The two status checks of an EC2 instance. */
export const StatusCheck = {
  /** The instance's own check (its operating system and network configuration). */
  Instance: 'instance',
  /** The system check (the AWS hardware, power and network the instance runs on). */
  System: 'system',
} as const;
export type StatusCheck = (typeof StatusCheck)[keyof typeof StatusCheck];

export interface ImpairedCheck {
  check: StatusCheck;
  /** The names of the failed details (`reachability`). */
  failed: string[];
  /** EC2's ImpairedSince of the failed details (the earliest), when it gives one (ms). */
  since: number | undefined;
}

export interface ImpairedInstance {
  instanceId: string;
  /** The impaired checks, the instance's first. */
  checks: ImpairedCheck[];
}

function impairedCheck(check: StatusCheck, s: InstanceStatusSummary | undefined): ImpairedCheck | undefined {
  if (s?.Status !== 'impaired') return undefined;
  const failed = (s.Details ?? []).filter((d) => d.Status === 'failed');
  const times = failed
    .map((d) => d.ImpairedSince?.getTime())
    .filter((t): t is number => t !== undefined && Number.isFinite(t));
  return {
    check,
    failed: failed.map((d) => d.Name ?? 'unnamed'),
    since: times.length === 0 ? undefined : Math.min(...times),
  };
}

/** The impaired checks of one DescribeInstanceStatus record; undefined when none is impaired. */
export function impairedOf(s: InstanceStatus): ImpairedInstance | undefined {
  const id = s.InstanceId ?? '';
  if (id === '') return undefined;
  const checks = [
    impairedCheck(StatusCheck.Instance, s.InstanceStatus),
    impairedCheck(StatusCheck.System, s.SystemStatus),
  ].filter((c): c is ImpairedCheck => c !== undefined);
  return checks.length === 0 ? undefined : { instanceId: id, checks };
}

/** An instance impaired for the timeout or longer. */
export interface OverdueInstance extends ImpairedInstance {
  /** Impaired since (ms): EC2's earliest ImpairedSince, else when this process first saw it impaired. */
  since: number;
  /** Whether `since` is EC2's own (else this process's first sight). */
  sinceFromEc2: boolean;
}

/** Tracks the impaired instances of one poll target (region and credentials) across polls. */
export class ImpairmentTracker {
  /** When a poll first saw each impaired instance (ms). */
  private readonly firstSeen = new Map<string, number>();

  constructor(private readonly timeoutMs: number) {}

  /** The instances currently tracked as impaired. */
  get impaired(): ReadonlySet<string> {
    return new Set(this.firstSeen.keys());
  }

  /**
   * One complete poll's impaired instances at `now`: returns those impaired for the timeout or
   * longer, and forgets every instance the poll did not report impaired.
   */
  update(impaired: readonly ImpairedInstance[], now: number): OverdueInstance[] {
    const current = new Map(impaired.map((i) => [i.instanceId, i]));
    for (const id of [...this.firstSeen.keys()]) if (!current.has(id)) this.firstSeen.delete(id);
    const overdue: OverdueInstance[] = [];
    for (const i of current.values()) {
      let seen = this.firstSeen.get(i.instanceId);
      if (seen === undefined) {
        seen = now;
        this.firstSeen.set(i.instanceId, now);
      }
      const fromEc2 = i.checks.map((c) => c.since).filter((t): t is number => t !== undefined);
      const since = fromEc2.length === 0 ? seen : Math.min(...fromEc2);
      if (now - since >= this.timeoutMs) overdue.push({ ...i, since, sinceFromEc2: fromEc2.length > 0 });
    }
    return overdue;
  }
}

const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** For people: `system status check failed (reachability) since 2026-11-28T02:00:00Z, ...`. */
export function describeImpairment(o: OverdueInstance): string {
  const checks = o.checks
    .map((c) => {
      const what = c.failed.length === 0 ? '' : ` (${c.failed.join(', ')})`;
      const since = c.since === undefined ? '' : ` since ${iso(c.since)}`;
      return `${c.check} status check impaired${what}${since}`;
    })
    .join(', ');
  const clock = o.sinceFromEc2 ? '' : `, seen impaired since ${iso(o.since)}`;
  return `EC2 reports instance ${o.instanceId} impaired: ${checks}${clock}`;
}
