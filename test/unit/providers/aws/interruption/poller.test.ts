import { expect } from 'chai';

import type { VmNotice, VmNoticeOutcome, VmNoticeSink } from '../../../../../lib/driver/notices.js';
import { FakeClock } from '../../../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import {
  InterruptionMetrics,
  InterruptionPoller,
} from '../../../../../lib/providers/aws/interruption/poller.js';
import type { InterruptionQueue, QueueMessage } from '../../../../../lib/providers/aws/interruption/queue.js';
import { eventually } from '../../../helpers/eventually.js';

const TIME = '2026-11-28T02:00:00Z';
const ID = 'i-0123456789abcdef0';

function spotBody(id = ID): string {
  return JSON.stringify({
    version: '0',
    id: 'e-1',
    'detail-type': 'EC2 Spot Instance Interruption Warning',
    source: 'aws.ec2',
    account: '123456789012',
    time: TIME,
    region: 'eu-west-1',
    resources: [`arn:aws:ec2:eu-west-1:123456789012:instance/${id}`],
    detail: { 'instance-id': id, 'instance-action': 'terminate' },
  });
}

/**
 * A queue in memory: messages handed out in batches, each delivery counted (ApproximateReceiveCount)
 * with a receipt handle of its own; deletes recorded; a visibility change recorded and (there is no
 * clock here) the message handed out again at the next receive.
 */
class FakeQueue implements InterruptionQueue {
  readonly url = 'https://sqs.eu-west-1.amazonaws.com/123456789012/q';
  private pending: { id: string; body: string; receives: number }[] = [];
  private readonly inFlight = new Map<string, { id: string; body: string; receives: number }>();
  private waiters: (() => void)[] = [];
  readonly deleted: string[] = [];
  readonly visibilityChanges: { receiptHandle: string; seconds: number }[] = [];
  receiveErrors = 0;
  deleteError: Error | undefined;
  visibilityError: Error | undefined;
  private seq = 0;

  send(body: string): string {
    const id = `m-${++this.seq}`;
    this.pending.push({ id, body, receives: 0 });
    this.wake();
    return id;
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  async receive(signal: AbortSignal): Promise<QueueMessage[]> {
    if (this.receiveErrors > 0) {
      this.receiveErrors--;
      throw new Error('AccessDenied');
    }
    while (this.pending.length === 0) {
      await new Promise<void>((resolve, reject) => {
        this.waiters.push(resolve);
        signal.addEventListener(
          'abort',
          () => {
            reject(new Error('aborted'));
          },
          { once: true },
        );
      });
    }
    return this.pending.splice(0, 10).map((m) => {
      m.receives++;
      const receiptHandle = `rh-${m.id}-${m.receives}`;
      this.inFlight.set(receiptHandle, m);
      return { messageId: m.id, receiptHandle, body: m.body, receiveCount: m.receives };
    });
  }

  delete(receiptHandle: string): Promise<void> {
    if (this.deleteError !== undefined) return Promise.reject(this.deleteError);
    this.deleted.push(receiptHandle);
    this.inFlight.delete(receiptHandle);
    return Promise.resolve();
  }

  changeVisibility(receiptHandle: string, seconds: number): Promise<void> {
    if (this.visibilityError !== undefined) return Promise.reject(this.visibilityError);
    this.visibilityChanges.push({ receiptHandle, seconds });
    const m = this.inFlight.get(receiptHandle);
    if (m !== undefined) {
      this.inFlight.delete(receiptHandle);
      this.pending.push(m);
      this.wake();
    }
    return Promise.resolve();
  }

  close(): void {
    // Nothing to release.
  }
}

class FakeSink implements VmNoticeSink {
  readonly notices: VmNotice[] = [];
  answer: VmNoticeOutcome | Error = 'acted';
  /** Answers for the next notices, before `answer`. */
  readonly next: VmNoticeOutcome[] = [];
  handle(notice: VmNotice): Promise<VmNoticeOutcome> {
    this.notices.push(notice);
    const answer = this.next.shift() ?? this.answer;
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
  }
}

describe('InterruptionPoller: the interruption queue’s reader', () => {
  let queue: FakeQueue;
  let sink: FakeSink;
  let clock: FakeClock;
  let logger: CapturingLogger;
  let registry: ReturnType<typeof newRegistry>;
  let poller: InterruptionPoller;

  beforeEach(() => {
    queue = new FakeQueue();
    sink = new FakeSink();
    clock = new FakeClock(Date.parse(TIME));
    logger = new CapturingLogger();
    registry = newRegistry();
    poller = new InterruptionPoller({
      queue,
      sink,
      settings: { drainTimeoutMs: 90_000, rebalanceAsInterruption: false },
      clock,
      logger,
      metrics: InterruptionMetrics.of(registry),
    });
  });

  afterEach(async () => {
    await poller.stop();
  });

  async function count(kind: string, outcome: string): Promise<number> {
    const m = await registry.getSingleMetric('mcm_aws_interruption_messages_total')?.get();
    return m?.values.find((v) => v.labels.kind === kind && v.labels.outcome === outcome)?.value ?? 0;
  }

  it('hands the notice of a spot warning to the sink, then deletes the message and counts it acted', async () => {
    poller.start();
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 1, 'the message deleted');
    expect(sink.notices).to.have.length(1);
    expect(sink.notices[0]).to.deep.include({
      providerID: `aws:///eu-west-1/${ID}`,
      deadline: Date.parse(TIME) + 90_000,
    });
    expect(await count('spot-interruption', 'received')).to.equal(1);
    expect(await count('spot-interruption', 'acted')).to.equal(1);
  });

  it('keeps a message whose notice could not be recorded (it comes back), and counts it failed', async () => {
    sink.answer = new Error('the API is down');
    poller.start();
    queue.send(spotBody());
    await eventually(() => sink.notices.length === 1, 'handed to the sink');
    for (let i = 0; i < 100 && (await count('spot-interruption', 'failed')) === 0; i++)
      await new Promise<void>((r) => setImmediate(r));
    expect(await count('spot-interruption', 'failed')).to.equal(1);
    expect(queue.deleted).to.deep.equal([]);
    expect(logger.lines.some((l) => l.level === 'warn' && l.msg.includes('comes back'))).to.equal(true);
  });

  it('deletes and counts malformed, ignored, unknown-instance and duplicate messages, the malformed with its reason', async () => {
    poller.start();
    queue.send('not json at all');
    queue.send(
      JSON.stringify({
        version: '0',
        source: 'aws.ec2',
        'detail-type': 'EC2 AMI State Change',
        time: TIME,
        detail: {},
      }),
    );
    await eventually(() => queue.deleted.length === 2, 'both deleted');
    expect(await count('malformed', 'malformed')).to.equal(1);
    expect(await count('other', 'ignored')).to.equal(1);
    const warn = logger.lines.find((l) => l.level === 'warn' && l.msg.includes('malformed'));
    expect(JSON.stringify(warn)).to.contain('not JSON').and.not.to.contain('not json at all');
    expect(sink.notices, 'neither reaches the sink').to.deep.equal([]);

    sink.answer = 'unknown';
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 3, 'the unknown-instance message deleted');
    expect(queue.deleted[2], 'at its third delivery').to.equal('rh-m-3-3');
    expect(await count('spot-interruption', 'unknown-instance')).to.equal(1);
    sink.answer = 'duplicate';
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 4, 'the duplicate deleted');
    expect(await count('spot-interruption', 'duplicate')).to.equal(1);
  });

  it('leaves a message about an instance no machine has yet to come back in 10 s (not deleted), and acts on it at the next delivery once the machine has recorded its instance', async () => {
    sink.next.push('unknown');
    poller.start();
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 1, 'the message deleted');
    expect(queue.visibilityChanges, 'the first delivery comes back in 10 s').to.deep.equal([
      { receiptHandle: 'rh-m-1-1', seconds: 10 },
    ]);
    expect(queue.deleted, 'deleted at the second delivery, once acted on').to.deep.equal(['rh-m-1-2']);
    expect(sink.notices).to.have.length(2);
    expect(await count('spot-interruption', 'received')).to.equal(2);
    expect(await count('spot-interruption', 'retried')).to.equal(1);
    expect(await count('spot-interruption', 'acted')).to.equal(1);
    expect(await count('spot-interruption', 'unknown-instance')).to.equal(0);
  });

  it('deletes a message about an instance no machine ever has at its third delivery: counted retried twice and unknown-instance once', async () => {
    sink.answer = 'unknown';
    poller.start();
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 1, 'the message deleted');
    expect(queue.visibilityChanges).to.deep.equal([
      { receiptHandle: 'rh-m-1-1', seconds: 10 },
      { receiptHandle: 'rh-m-1-2', seconds: 10 },
    ]);
    expect(queue.deleted).to.deep.equal(['rh-m-1-3']);
    expect(sink.notices, 'looked for at each delivery').to.have.length(3);
    expect(await count('spot-interruption', 'received')).to.equal(3);
    expect(await count('spot-interruption', 'retried')).to.equal(2);
    expect(await count('spot-interruption', 'unknown-instance')).to.equal(1);
  });

  // The age of the event when the message about an unknown instance is received: retried while
  // under the two minutes of a Spot warning (the launch race over, the instance gone by then).
  for (const { age, retried } of [
    { age: 0, retried: true },
    { age: 119_000, retried: true },
    { age: 120_000, retried: false },
    { age: 600_000, retried: false },
  ]) {
    it(`a message about an unknown instance whose event is ${age / 1000} s old is ${retried ? 'retried' : 'deleted at its first delivery'}`, async () => {
      await clock.advance(age);
      sink.answer = 'unknown';
      poller.start();
      queue.send(spotBody());
      await eventually(() => queue.deleted.length === 1, 'the message deleted');
      expect(queue.visibilityChanges.length).to.equal(retried ? 2 : 0);
      expect(await count('spot-interruption', 'retried')).to.equal(retried ? 2 : 0);
      expect(await count('spot-interruption', 'unknown-instance')).to.equal(1);
    });
  }

  it('retries nothing but unknown instances: acted, duplicate and ignored messages are deleted at their first delivery', async () => {
    poller.start();
    for (const answer of ['acted', 'duplicate', 'ignored'] as const) {
      sink.next.push(answer);
      queue.send(spotBody());
    }
    await eventually(() => queue.deleted.length === 3, 'all deleted');
    expect(queue.visibilityChanges).to.deep.equal([]);
    expect(await count('spot-interruption', 'retried')).to.equal(0);
  });

  it('a failed visibility change: counted, warned once (naming the permission), the message neither deleted nor counted unknown (it comes back after the visibility timeout)', async () => {
    queue.visibilityError = new Error('AccessDenied');
    sink.answer = 'unknown';
    poller.start();
    queue.send(spotBody());
    queue.send(spotBody('i-0123456789abcdef1'));
    await eventually(() => sink.notices.length === 2, 'both handed to the sink');
    for (let i = 0; i < 100 && (await count('spot-interruption', 'retried')) < 2; i++)
      await new Promise<void>((r) => setImmediate(r));
    expect(await count('spot-interruption', 'retried')).to.equal(2);
    expect(await count('spot-interruption', 'unknown-instance')).to.equal(0);
    expect(queue.deleted).to.deep.equal([]);
    const errors = await registry.getSingleMetric('mcm_aws_interruption_queue_errors_total')?.get();
    expect(errors?.values.find((v) => v.labels.operation === 'change-visibility')?.value).to.equal(2);
    const warnings = logger.lines.filter((l) => l.level === 'warn' && l.msg.includes('visibility'));
    expect(warnings, 'warned once').to.have.length(1);
    expect(warnings[0]?.msg).to.contain('sqs:ChangeMessageVisibility');
  });

  it('backs off after a failed receive and goes on reading', async () => {
    queue.receiveErrors = 2;
    poller.start();
    await eventually(() => clock.pendingTimers() === 1, 'waiting after the first failure');
    await clock.advance(1_000);
    await eventually(() => clock.pendingTimers() === 1, 'waiting after the second failure');
    await clock.advance(2_000);
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 1, 'reading again');
    const errors = await registry.getSingleMetric('mcm_aws_interruption_queue_errors_total')?.get();
    expect(errors?.values.find((v) => v.labels.operation === 'receive')?.value).to.equal(2);
  });

  it('stops at once, leaving a message in hand undeleted (its visibility timeout returns it)', async () => {
    let release: () => void = () => undefined;
    let inHand = false;
    const held = new Promise<void>((resolve) => (release = resolve));
    poller = new InterruptionPoller({
      queue,
      sink,
      settings: { drainTimeoutMs: 90_000, rebalanceAsInterruption: false },
      clock,
      logger,
      metrics: InterruptionMetrics.of(registry),
      hooks: {
        received: (_m, signal) => {
          inHand = true;
          return new Promise<void>((resolve, reject) => {
            void held.then(resolve);
            signal.addEventListener(
              'abort',
              () => {
                reject(new Error('stopped'));
              },
              { once: true },
            );
          });
        },
      },
    });
    poller.start();
    queue.send(spotBody());
    await eventually(() => inHand, 'the message received');
    await poller.stop();
    release();
    expect(queue.deleted).to.deep.equal([]);
    expect(sink.notices).to.deep.equal([]);
    expect(await count('spot-interruption', 'failed')).to.equal(0);
  });
});
