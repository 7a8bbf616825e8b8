// Instance health without a queue (leader only: the AWS provider starts it with the controllers and
// stops it with them): every --aws-instance-status-interval, DescribeInstanceStatus per region and
// credentials the driver's calls have shown (a "target", as for the spot prices), asking for the
// instances whose instance or system status check is `impaired`; one whose check has been impaired
// for --aws-impaired-timeout or longer (status.ts) becomes an `impaired` notice to the manager's
// sink, which records the failure on its machine (the machine controller fails it within its
// deployment's replacement budget, and the MachineSet replaces it) or answers that it has nothing
// to do. An instance whose notice was recorded and that a later poll no longer reports impaired is
// looked at once more (one unfiltered call for all of them): running with its checks passing, it
// becomes a `recovered` notice, which withdraws the record from a machine not failed for it yet.
//
// One call pages through a whole region, whatever the number of machines: two filtered calls per
// target and poll (filters of different names AND, so `instance-status.status=impaired` and
// `system-status.status=impaired` are asked separately), cheap on real EC2, where the answer holds
// only impaired instances. The answer's statuses are checked all the same (the emulator ignores
// those filters). Polls never overlap: the next waits for the last to end. Every call carries the
// stop signal and a deadline. These are reads: no leader fence applies; the notices' writes are
// fenced by the sink's clients.
//
// An impaired instance no machine has (another cluster's in the same account) is answered
// `unknown` by the sink: counted every poll, logged once until it recovers. UnauthorizedOperation
// (the credentials lack ec2:DescribeInstanceStatus) is logged and counted; the next poll tries again.

import type { Filter, InstanceStatus } from '@aws-sdk/client-ec2';
import { Counter, Gauge, type Registry } from 'prom-client';

import type { MachineClass } from '../../../api/types.js';
import {
  VmNoticeKind,
  type VmNotice,
  type VmNoticeOutcome,
  type VmNoticeSink,
} from '../../../driver/notices.js';
import { formatGoDuration } from '../../../api/duration.js';
import type { Clock } from '../../../kube/clock.js';
import type { DeepReadonly } from '../../../kube/informer.js';
import { linkSignals } from '../../../kube/signals.js';
import type { Secret } from '../../../kube/types.js';
import type { Logger } from '../../../observability/logger.js';
import type { Ec2Api, Ec2ApiFactory } from '../client.js';
import { credentialsFingerprint, readCredentials, type AwsCredentials } from '../credentials.js';
import { providerIDOf } from '../driver.js';
import { INSTANCE_NOT_FOUND_CODES, awsErrorInfo, toMachineError } from '../errors.js';
import { ImpairmentTracker, describeImpairment, impairedOf, type ImpairedInstance } from './status.js';

/** A target's DescribeInstanceStatus calls of one poll, together, may take this long. */
const POLL_TIMEOUT_MS = 30_000;
/** The handling of one notice (its writes carry this deadline). */
const NOTICE_TIMEOUT_MS = 15_000;
/**
 * A target no driver call showed for this long is no longer polled (its classes are gone, or their
 * Secret changed). The orphan collection's ListMachines shows every class every
 * --machine-safety-orphan-vms-period (15 min by default), GetMachineStatus every machine.
 */
const FORGET_MS = 60 * 60_000;
/** Pages of one call, at most (1000 statuses a page). */
const MAX_PAGES = 50;
const IMPAIRED_FILTERS: Filter[][] = [
  [{ Name: 'instance-status.status', Values: ['impaired'] }],
  [{ Name: 'system-status.status', Values: ['impaired'] }],
];

/** The reason of the notices (the Machine's event says it). */
export const IMPAIRED_REASON = 'InstanceImpaired';
/** The reason of the notices that withdraw an impairment the instance recovered from. */
export const RECOVERED_REASON = 'InstanceRecovered';
/** Recovering instances looked at per poll and target, at most (the rest the next poll). */
const MAX_RECOVERY_IDS = 100;

export interface InstanceHealthSettings {
  /** --aws-instance-status-interval: between two polls; 0 turns the poll off. */
  intervalMs: number;
  /** --aws-impaired-timeout: how long a status check may be impaired before the machine is failed. */
  impairedTimeoutMs: number;
}

export const defaultInstanceHealthSettings: InstanceHealthSettings = {
  intervalMs: 60_000,
  impairedTimeoutMs: 5 * 60_000,
};

/** How a poll of a target ended (the outcome label). */
export const PollOutcome = {
  Ok: 'ok',
  Unauthorized: 'unauthorized',
  Failed: 'failed',
} as const;
export type PollOutcome = (typeof PollOutcome)[keyof typeof PollOutcome];

/** What became of a notice: the sink's answer, or `failed` (retried the next poll). */
export type ImpairedNoticeOutcome = VmNoticeOutcome | 'failed';

export class InstanceHealthMetrics {
  private readonly polls: Counter<'outcome'>;
  private readonly notices: Counter<'outcome'>;
  private readonly impaired: Gauge;

  private constructor(registry: Registry) {
    this.polls = new Counter({
      name: 'mcm_aws_instance_status_polls_total',
      help: 'Polls of EC2 instance status checks (DescribeInstanceStatus, per region and credentials; --aws-instance-status-interval), by outcome: ok, unauthorized (the credentials lack ec2:DescribeInstanceStatus) or failed.',
      labelNames: ['outcome'],
      registers: [registry],
    });
    this.notices = new Counter({
      name: 'mcm_aws_impaired_instance_notices_total',
      help: 'Instances whose EC2 status check was impaired for longer than --aws-impaired-timeout, per poll, by what became of the notice: acted (the failure recorded on the machine, which its replacement budget then fails), duplicate (recorded already), ignored (being deleted), unknown-instance (no machine has the instance) or failed (retried the next poll).',
      labelNames: ['outcome'],
      registers: [registry],
    });
    this.impaired = new Gauge({
      name: 'mcm_aws_impaired_instances',
      help: 'Instances whose EC2 instance or system status check was impaired at the last poll (every region and credentials polled; any machine’s or none).',
      registers: [registry],
    });
  }

  private static readonly byRegistry = new WeakMap<Registry, InstanceHealthMetrics>();

  /** The metrics of a registry (registered once per registry). */
  static of(registry: Registry): InstanceHealthMetrics {
    let m = InstanceHealthMetrics.byRegistry.get(registry);
    if (m === undefined) {
      m = new InstanceHealthMetrics(registry);
      InstanceHealthMetrics.byRegistry.set(registry, m);
    }
    return m;
  }

  poll(outcome: PollOutcome): void {
    this.polls.inc({ outcome });
  }

  notice(outcome: ImpairedNoticeOutcome): void {
    // The interruption queue's metric says unknown-instance: the same word here.
    this.notices.inc({ outcome: outcome === 'unknown' ? 'unknown-instance' : outcome });
  }

  impairedNow(n: number): void {
    this.impaired.set(n);
  }
}

interface Target {
  /** For logs: the credentials never appear. */
  readonly name: string;
  readonly region: string;
  readonly credentials: AwsCredentials;
  readonly tracker: ImpairmentTracker;
  api: Ec2Api | undefined;
  /** When a driver call last showed it (monotonic ms). */
  seenAt: number;
  /** Impaired instances at its last complete poll. */
  impaired: number;
  /** The error code of the last poll when it failed (a change of error is logged at warn). */
  lastError: string | undefined;
  /** The last outcome of each overdue instance's notice: a repeat is not logged again. */
  readonly reported: Map<string, ImpairedNoticeOutcome>;
}

export interface InstanceHealthPollerOptions {
  ec2: Ec2ApiFactory;
  sink: VmNoticeSink;
  settings: InstanceHealthSettings;
  clock: Clock;
  logger: Logger;
  metrics: InstanceHealthMetrics;
  /** [0, 1) for the jitter of the interval (default Math.random). */
  random?: () => number;
}

type Obj = Readonly<Record<string, unknown>>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

export class InstanceHealthPoller {
  private readonly targets = new Map<string, Target>();
  /** Target keys by Secret object and region (the cache's objects are replaced on update, never changed). */
  private readonly keys = new WeakMap<
    object,
    Map<string, { key: string; credentials: AwsCredentials } | undefined>
  >();
  private readonly log: Logger;
  private readonly random: () => number;
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private named = 0;

  constructor(private readonly opts: InstanceHealthPollerOptions) {
    this.log = opts.logger.child({ component: 'instance-status' });
    this.random = opts.random ?? Math.random;
  }

  /** A driver call's class and Secret: their region and credentials are polled. Cheap; no call. */
  observeRequest(machineClass: DeepReadonly<MachineClass>, secret: Secret): void {
    const spec = machineClass.providerSpec;
    const region = isObj(spec) && typeof spec.region === 'string' ? spec.region : '';
    if (region === '') return;
    let byRegion = this.keys.get(secret);
    if (byRegion === undefined) {
      byRegion = new Map();
      this.keys.set(secret, byRegion);
    }
    if (!byRegion.has(region)) {
      const creds = readCredentials(secret);
      byRegion.set(
        region,
        creds.ok
          ? { key: credentialsFingerprint(region, creds.credentials), credentials: creds.credentials }
          : undefined,
      );
    }
    const seen = byRegion.get(region);
    if (seen === undefined) return;
    const now = this.opts.clock.monotonic();
    const t = this.targets.get(seen.key);
    if (t !== undefined) {
      t.seenAt = now;
      return;
    }
    this.targets.set(seen.key, {
      name: `credentials #${++this.named} in ${region}`,
      region,
      credentials: seen.credentials,
      tracker: new ImpairmentTracker(this.opts.settings.impairedTimeoutMs),
      api: undefined,
      seenAt: now,
      impaired: 0,
      lastError: undefined,
      reported: new Map(),
    });
  }

  start(): void {
    if (this.loop !== undefined || this.opts.settings.intervalMs <= 0) return;
    const abort = new AbortController();
    this.abort = abort;
    this.log.info('polling EC2 instance status checks', {
      intervalSeconds: this.opts.settings.intervalMs / 1000,
      impairedTimeout: formatGoDuration(this.opts.settings.impairedTimeoutMs),
    });
    this.loop = this.run(abort.signal);
  }

  /** Stops polling: aborts the calls and notices under way and waits for them. */
  async stop(): Promise<void> {
    this.abort?.abort(new Error('the instance status poll stopped'));
    await this.loop;
    this.loop = undefined;
    this.abort = undefined;
    for (const t of this.targets.values()) {
      t.api?.destroy();
      t.api = undefined;
    }
  }

  private async run(signal: AbortSignal): Promise<void> {
    const stopped = (): boolean => signal.aborted;
    while (!stopped()) {
      const wait = Math.round(this.opts.settings.intervalMs * (0.9 + 0.2 * this.random()));
      try {
        await this.opts.clock.sleep(wait, signal);
      } catch {
        break;
      }
      try {
        await this.pollOnce(signal);
      } catch (err) {
        // pollOnce handles what it expects; this is a defect, and the next poll still comes.
        if (!stopped()) this.log.error('polling EC2 instance status checks failed unexpectedly', { err });
      }
    }
  }

  /** One poll of every target; its notices are handled before it returns. */
  async pollOnce(signal: AbortSignal): Promise<void> {
    const now = this.opts.clock.monotonic();
    for (const [key, t] of this.targets) {
      if (now - t.seenAt > FORGET_MS) {
        this.targets.delete(key);
        t.api?.destroy();
        this.log.verbose('no longer polling a region and credentials no driver call showed for an hour', {
          target: t.name,
        });
      }
    }
    await Promise.all([...this.targets.values()].map((t) => this.pollTarget(t, signal)));
    let impaired = 0;
    for (const t of this.targets.values()) impaired += t.impaired;
    this.opts.metrics.impairedNow(impaired);
  }

  private async pollTarget(t: Target, stop: AbortSignal): Promise<void> {
    const { metrics } = this.opts;
    const log = this.log.child({ target: t.name });
    let statuses: InstanceStatus[];
    const linked = linkSignals(stop, AbortSignal.timeout(POLL_TIMEOUT_MS));
    try {
      statuses = await this.impairedStatuses(t, linked.signal);
    } catch (err) {
      if (stop.aborted) return;
      const code = awsErrorInfo(err).code;
      const unauthorized = code === 'UnauthorizedOperation';
      metrics.poll(unauthorized ? PollOutcome.Unauthorized : PollOutcome.Failed);
      const secrets =
        t.credentials.kind === 'static' ? [t.credentials.accessKeyId, t.credentials.secretAccessKey] : [];
      const fields = {
        error: toMachineError(err, 'DescribeInstanceStatus', secrets).detail,
        ...(unauthorized ? { needs: 'ec2:DescribeInstanceStatus' } : {}),
      };
      const msg = unauthorized
        ? 'not allowed to read EC2 instance status checks; impaired instances go unnoticed until it is'
        : 'reading EC2 instance status checks failed; the next poll tries again';
      // Warned when the error changes; the same error again, every poll, only at verbose.
      if (t.lastError !== code) log.warn(msg, fields);
      else log.verbose(msg, fields);
      t.lastError = code;
      return;
    } finally {
      linked.dispose();
    }
    metrics.poll(PollOutcome.Ok);
    if (t.lastError !== undefined) log.info('reading EC2 instance status checks works again');
    t.lastError = undefined;
    const impaired = statuses.map(impairedOf).filter((i): i is ImpairedInstance => i !== undefined);
    t.impaired = impaired.length;
    const overdue = t.tracker.update(impaired, this.opts.clock.now());
    const recovering = [...t.reported]
      .filter(
        ([id, outcome]) => !t.tracker.impaired.has(id) && (outcome === 'acted' || outcome === 'duplicate'),
      )
      .map(([id]) => id);
    for (const id of [...t.reported.keys()])
      if (!t.tracker.impaired.has(id) && !recovering.includes(id)) t.reported.delete(id);
    await this.withdrawRecovered(t, recovering, stop, log);
    const timeout = formatGoDuration(this.opts.settings.impairedTimeoutMs);
    // A function, not the property: the narrowing of `stop.aborted` would outlive the awaits.
    const stopped = (): boolean => stop.aborted;
    for (const o of overdue) {
      if (stopped()) return;
      const notice: VmNotice = {
        kind: VmNoticeKind.Impaired,
        providerID: providerIDOf(t.region, o.instanceId),
        reason: IMPAIRED_REASON,
        message: `${describeImpairment(o)}; impaired for longer than ${timeout} (--aws-impaired-timeout)`,
        sentAt: this.opts.clock.now(),
      };
      const outcome = await this.handle(notice, stop, log);
      if (stopped()) return;
      metrics.notice(outcome);
      const before = t.reported.get(o.instanceId);
      t.reported.set(o.instanceId, outcome);
      const fields = { instance: o.instanceId, outcome, since: new Date(o.since).toISOString() };
      if (outcome === 'acted') log.info('an impaired instance’s machine is marked Failed', fields);
      else if (outcome !== before && outcome !== 'failed')
        log.verbose('an impaired instance asked for nothing new', fields);
    }
  }

  /**
   * Instances whose impairment was recorded on a machine and that this poll no longer reports
   * impaired: the ones EC2 shows running with no check impaired (one unfiltered call for them all)
   * have recovered, and their record is withdrawn (a machine that waited for its replacement
   * budget stays). The others (stopped, gone) are forgotten: their machines go their own way.
   * Kept for the next poll when EC2 or the sink could not answer.
   */
  private async withdrawRecovered(t: Target, ids: string[], stop: AbortSignal, log: Logger): Promise<void> {
    // A function, not the property: the narrowing of `stop.aborted` would outlive the awaits.
    const stopped = (): boolean => stop.aborted;
    if (ids.length === 0 || stopped() || t.api === undefined) return;
    const api = t.api;
    let statuses: InstanceStatus[];
    const linked = linkSignals(stop, AbortSignal.timeout(POLL_TIMEOUT_MS));
    try {
      statuses =
        (await api.describeInstanceStatus({ InstanceIds: ids.slice(0, MAX_RECOVERY_IDS) }, linked.signal))
          .InstanceStatuses ?? [];
    } catch (err) {
      if (stopped()) return;
      if (INSTANCE_NOT_FOUND_CODES.has(awsErrorInfo(err).code)) {
        for (const id of ids) t.reported.delete(id);
        return;
      }
      log.verbose('reading the status checks of recovering instances failed; the next poll tries again', {
        error: awsErrorInfo(err).code,
      });
      return;
    } finally {
      linked.dispose();
    }
    const ok = new Set(
      statuses
        .filter((s) => s.InstanceState?.Name === 'running' && impairedOf(s) === undefined)
        .map((s) => s.InstanceId ?? ''),
    );
    for (const id of ids.slice(0, MAX_RECOVERY_IDS)) {
      if (stopped()) return;
      if (!ok.has(id)) {
        t.reported.delete(id);
        continue;
      }
      const notice: VmNotice = {
        kind: VmNoticeKind.Recovered,
        providerID: providerIDOf(t.region, id),
        reason: RECOVERED_REASON,
        message: `EC2 reports instance ${id}'s status checks no longer impaired`,
        sentAt: this.opts.clock.now(),
        withdraws: IMPAIRED_REASON,
      };
      const outcome = await this.handle(notice, stop, log);
      if (stopped() || outcome === 'failed') continue;
      t.reported.delete(id);
      if (outcome === 'acted')
        log.info('an impaired instance recovered before its machine was failed; the record is withdrawn', {
          instance: id,
        });
    }
  }

  private async handle(notice: VmNotice, stop: AbortSignal, log: Logger): Promise<ImpairedNoticeOutcome> {
    const linked = linkSignals(stop, AbortSignal.timeout(NOTICE_TIMEOUT_MS));
    try {
      return await this.opts.sink.handle(notice, linked.signal);
    } catch (err) {
      if (!stop.aborted)
        log.warn('recording an impaired instance failed; the next poll tries again', {
          providerID: notice.providerID,
          err,
        });
      return 'failed';
    } finally {
      linked.dispose();
    }
  }

  /** The statuses of both impaired filters, every page, one per instance. */
  private async impairedStatuses(t: Target, signal: AbortSignal): Promise<InstanceStatus[]> {
    t.api ??= this.opts.ec2(t.region, t.credentials);
    const api = t.api;
    const byId = new Map<string, InstanceStatus>();
    for (const Filters of IMPAIRED_FILTERS) {
      let NextToken: string | undefined;
      let pages = 0;
      do {
        const page = await api.describeInstanceStatus(
          { Filters, MaxResults: 1000, ...(NextToken === undefined ? {} : { NextToken }) },
          signal,
        );
        for (const s of page.InstanceStatuses ?? [])
          if (s.InstanceId !== undefined) byId.set(s.InstanceId, s);
        NextToken = page.NextToken === '' ? undefined : page.NextToken;
      } while (NextToken !== undefined && ++pages < MAX_PAGES);
    }
    return [...byId.values()];
  }
}
