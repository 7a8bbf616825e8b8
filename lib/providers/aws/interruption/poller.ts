// The interruption queue's reader (leader only: the AWS provider starts it with the controllers
// and stops it when they stop, which a lost Lease does): back-to-back long polls of the SQS queue;
// each message parsed (messages.ts), turned into notices about instances (notices.ts) and handed
// to the manager's sink, which records on the machines what they ask for. A message is deleted only
// once that is recorded, or when there is nothing to record (malformed, another event, an instance
// no machine has, a repeat): a message whose handling failed, or whose reader stopped first, comes
// back after the visibility timeout, and the record on the machine makes a repeat a no-op.
//
// "No machine has the instance" is not final at once: a machine records its providerID only once
// CreateMachine has returned (after RunInstances and the wait for DescribeInstances to show the
// instance), and the cache shows it a moment later, so an event about a brand-new instance can
// arrive first. Such a message is left in the queue, to come back after UNKNOWN_RETRY_SECONDS
// (ChangeMessageVisibility), until its UNKNOWN_DELIVERIES-th delivery, which deletes it. Only
// while the event is recent: an instance that existed UNKNOWN_RETRY_WINDOW_MS before has long been
// recorded by its machine, if it has one.

import { Counter, type Registry } from 'prom-client';

import type { VmNoticeOutcome, VmNoticeSink } from '../../../driver/notices.js';
import type { Clock } from '../../../kube/clock.js';
import { linkSignals } from '../../../kube/signals.js';
import type { Logger } from '../../../observability/logger.js';
import { parseInterruptionMessage } from './messages.js';
import { SPOT_INTERRUPTION_NOTICE_MS, noticesOf, type InterruptionSettings } from './notices.js';
import { VISIBILITY_SECONDS, type InterruptionQueue, type QueueMessage } from './queue.js';

/** How long the handling of one message may take (its writes carry this deadline). */
const HANDLE_TIMEOUT_MS = 15_000;
/** Pauses after failed receives: doubled from the first up to the last. */
const RECEIVE_BACKOFF_MS = 1_000;
const RECEIVE_BACKOFF_MAX_MS = 60_000;

/** Deliveries of a message about an instance no machine has, the last of which deletes it. */
export const UNKNOWN_DELIVERIES = 3;
/**
 * How soon such a message comes back: sooner than the visibility timeout (VISIBILITY_SECONDS), since
 * a Spot warning gives two minutes, and long enough for a launch's machine to record its instance.
 */
export const UNKNOWN_RETRY_SECONDS = 10;
/**
 * Such a message is retried only while its event is younger than this: the launch race is over by
 * then, and a Spot warning's instance is gone (its state change, not the warning, then matters).
 */
export const UNKNOWN_RETRY_WINDOW_MS = SPOT_INTERRUPTION_NOTICE_MS;

/** What became of a message (the outcome label). */
export const MessageOutcome = {
  Received: 'received',
  Acted: 'acted',
  Duplicate: 'duplicate',
  Ignored: 'ignored',
  UnknownInstance: 'unknown-instance',
  /** About an instance no machine has yet: left for another delivery (not the last). */
  Retried: 'retried',
  Malformed: 'malformed',
  Failed: 'failed',
} as const;
export type MessageOutcome = (typeof MessageOutcome)[keyof typeof MessageOutcome];

/** The kind label of messages that are no event of the queue's kinds. */
const KIND_OTHER = 'other';
const KIND_MALFORMED = 'malformed';

export class InterruptionMetrics {
  private readonly messages: Counter<'kind' | 'outcome'>;
  private readonly errors: Counter<'operation'>;

  private constructor(registry: Registry) {
    this.messages = new Counter({
      name: 'mcm_aws_interruption_messages_total',
      help: `Messages of the AWS interruption queue (--aws-interruption-queue), by kind (spot-interruption, rebalance-recommendation, instance-stopped, instance-terminated, scheduled-change, other, malformed) and outcome: received (each delivery), then one of acted, duplicate, ignored, unknown-instance or malformed (deleted), retried (about an instance no machine has yet: left to come back in ${UNKNOWN_RETRY_SECONDS} s; an event under ${UNKNOWN_RETRY_WINDOW_MS / 1000} s old gets up to ${UNKNOWN_DELIVERIES} deliveries, the last counted unknown-instance), or failed (left for a retry).`,
      labelNames: ['kind', 'outcome'],
      registers: [registry],
    });
    this.errors = new Counter({
      name: 'mcm_aws_interruption_queue_errors_total',
      help: 'Failed calls to the AWS interruption queue, by operation (receive, delete, change-visibility).',
      labelNames: ['operation'],
      registers: [registry],
    });
  }

  private static readonly byRegistry = new WeakMap<Registry, InterruptionMetrics>();

  /** The metrics of a registry (registered once per registry). */
  static of(registry: Registry): InterruptionMetrics {
    let m = InterruptionMetrics.byRegistry.get(registry);
    if (m === undefined) {
      m = new InterruptionMetrics(registry);
      InterruptionMetrics.byRegistry.set(registry, m);
    }
    return m;
  }

  message(kind: string, outcome: MessageOutcome): void {
    this.messages.inc({ kind, outcome });
  }

  queueError(operation: 'receive' | 'delete' | 'change-visibility'): void {
    this.errors.inc({ operation });
  }
}

/** Test seams: called with the message at the two points a restart matters. */
export interface PollerHooks {
  /** After the receive, before anything is recorded. */
  received?(m: QueueMessage, signal: AbortSignal): Promise<void>;
  /** After the record, before the message is deleted. */
  beforeDelete?(m: QueueMessage, signal: AbortSignal): Promise<void>;
}

export interface InterruptionPollerOptions {
  queue: InterruptionQueue;
  sink: VmNoticeSink;
  settings: InterruptionSettings;
  clock: Clock;
  logger: Logger;
  metrics: InterruptionMetrics;
  hooks?: PollerHooks | undefined;
}

const RANK: Record<VmNoticeOutcome, number> = { unknown: 0, ignored: 1, duplicate: 2, acted: 3 };

function outcomeOf(o: VmNoticeOutcome): MessageOutcome {
  switch (o) {
    case 'acted':
      return MessageOutcome.Acted;
    case 'duplicate':
      return MessageOutcome.Duplicate;
    case 'ignored':
      return MessageOutcome.Ignored;
    case 'unknown':
      return MessageOutcome.UnknownInstance;
  }
}

export class InterruptionPoller {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private readonly log: Logger;
  private visibilityWarned = false;

  constructor(private readonly opts: InterruptionPollerOptions) {
    this.log = opts.logger.child({ component: 'interruption-queue', queue: opts.queue.url });
  }

  start(): void {
    if (this.loop !== undefined) return;
    const abort = new AbortController();
    this.abort = abort;
    this.log.info('reading the interruption queue');
    this.loop = this.run(abort.signal);
  }

  /** Stops receiving; a message being handled is left for the visibility timeout to return. */
  async stop(): Promise<void> {
    this.abort?.abort(new Error('the interruption queue reader stopped'));
    await this.loop;
    this.loop = undefined;
    this.abort = undefined;
  }

  private async run(signal: AbortSignal): Promise<void> {
    let failures = 0;
    // A function, not the property: the narrowing of `signal.aborted` would outlive the awaits.
    const stopped = (): boolean => signal.aborted;
    while (!stopped()) {
      let batch: QueueMessage[];
      try {
        batch = await this.opts.queue.receive(signal);
        failures = 0;
      } catch (err) {
        if (stopped()) break;
        failures++;
        this.opts.metrics.queueError('receive');
        const wait = Math.min(RECEIVE_BACKOFF_MAX_MS, RECEIVE_BACKOFF_MS * 2 ** Math.min(failures - 1, 16));
        this.log.warn('receiving from the interruption queue failed', { err, retryInMs: wait });
        try {
          await this.opts.clock.sleep(wait, signal);
        } catch {
          break;
        }
        continue;
      }
      await Promise.all(batch.map((m) => this.handle(m, signal)));
    }
  }

  /** Handles one message; never throws (what goes wrong is logged and counted). */
  async handle(m: QueueMessage, stop: AbortSignal): Promise<void> {
    const timeout = AbortSignal.timeout(HANDLE_TIMEOUT_MS);
    const linked = linkSignals(stop, timeout);
    const signal = linked.signal;
    const log = this.log.child({ messageId: m.messageId });
    const metrics = this.opts.metrics;
    let kind = KIND_MALFORMED;
    try {
      await this.opts.hooks?.received?.(m, signal);
      const parsed = parseInterruptionMessage(m.body);
      let outcome: MessageOutcome;
      if (parsed.result === 'malformed') {
        metrics.message(kind, MessageOutcome.Received);
        log.warn('dropping a malformed message of the interruption queue', { reason: parsed.reason });
        outcome = MessageOutcome.Malformed;
      } else if (parsed.result === 'ignored') {
        kind = KIND_OTHER;
        metrics.message(kind, MessageOutcome.Received);
        log.debug('dropping a message of the interruption queue about nothing it acts on', {
          reason: parsed.reason,
        });
        outcome = MessageOutcome.Ignored;
      } else {
        const msg = parsed.message;
        kind = msg.kind;
        metrics.message(kind, MessageOutcome.Received);
        let best: VmNoticeOutcome = 'unknown';
        for (const notice of noticesOf(msg, this.opts.settings)) {
          const o = await this.opts.sink.handle(notice, signal);
          if (RANK[o] > RANK[best]) best = o;
        }
        outcome = outcomeOf(best);
        const fields = {
          kind,
          eventId: msg.id,
          instances: msg.instanceIds,
          outcome,
          receiveCount: m.receiveCount,
        };
        if (
          outcome === MessageOutcome.UnknownInstance &&
          m.receiveCount < UNKNOWN_DELIVERIES &&
          this.opts.clock.now() - msg.time < UNKNOWN_RETRY_WINDOW_MS
        ) {
          await this.comeBackSoon(m, signal, log);
          metrics.message(kind, MessageOutcome.Retried);
          log.verbose('no machine has the instance of an interruption notice yet; looking again soon', {
            ...fields,
            outcome: MessageOutcome.Retried,
            retryInSeconds: UNKNOWN_RETRY_SECONDS,
          });
          return;
        }
        if (outcome === MessageOutcome.Acted) log.info('acted on an interruption notice', fields);
        else log.verbose('an interruption notice asked for nothing new', fields);
      }
      await this.opts.hooks?.beforeDelete?.(m, signal);
      try {
        await this.opts.queue.delete(m.receiptHandle, signal);
      } catch (err) {
        // Recorded all the same: the message comes back after the visibility timeout, a duplicate.
        metrics.queueError('delete');
        log.warn('deleting a handled message of the interruption queue failed', { err });
      }
      metrics.message(kind, outcome);
    } catch (err) {
      if (stop.aborted) {
        log.verbose('stopped while handling a message; it comes back after the visibility timeout');
        return;
      }
      metrics.message(kind, MessageOutcome.Failed);
      log.warn(
        'handling a message of the interruption queue failed; it comes back after the visibility timeout',
        {
          err,
          kind,
          receiveCount: m.receiveCount,
        },
      );
    } finally {
      linked.dispose();
    }
  }

  /** Makes a message come back after UNKNOWN_RETRY_SECONDS; failing that, it does after its visibility timeout. */
  private async comeBackSoon(m: QueueMessage, signal: AbortSignal, log: Logger): Promise<void> {
    try {
      await this.opts.queue.changeVisibility(m.receiptHandle, UNKNOWN_RETRY_SECONDS, signal);
    } catch (err) {
      if (signal.aborted) throw err;
      this.opts.metrics.queueError('change-visibility');
      const fields = { err, comesBackInSeconds: VISIBILITY_SECONDS };
      if (this.visibilityWarned) log.verbose('changing the visibility of a message failed', fields);
      else {
        // Once: a policy without sqs:ChangeMessageVisibility makes every such message fail so.
        this.visibilityWarned = true;
        log.warn(
          'changing the visibility of a message of the interruption queue failed (does the manager have sqs:ChangeMessageVisibility?); it comes back after the visibility timeout instead',
          fields,
        );
      }
    }
  }
}
