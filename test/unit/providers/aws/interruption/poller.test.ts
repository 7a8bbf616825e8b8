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

/** A queue in memory: messages handed out once each, in batches; deletes recorded. */
class FakeQueue implements InterruptionQueue {
  readonly url = 'https://sqs.eu-west-1.amazonaws.com/123456789012/q';
  private pending: QueueMessage[] = [];
  private waiters: (() => void)[] = [];
  readonly deleted: string[] = [];
  receiveErrors = 0;
  deleteError: Error | undefined;
  private seq = 0;

  send(body: string): string {
    const id = `m-${++this.seq}`;
    this.pending.push({ messageId: id, receiptHandle: `rh-${id}`, body, receiveCount: 1 });
    for (const w of this.waiters.splice(0)) w();
    return id;
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
    return this.pending.splice(0, 10);
  }

  delete(receiptHandle: string): Promise<void> {
    if (this.deleteError !== undefined) return Promise.reject(this.deleteError);
    this.deleted.push(receiptHandle);
    return Promise.resolve();
  }

  close(): void {
    // Nothing to release.
  }
}

class FakeSink implements VmNoticeSink {
  readonly notices: VmNotice[] = [];
  answer: VmNoticeOutcome | Error = 'acted';
  handle(notice: VmNotice): Promise<VmNoticeOutcome> {
    this.notices.push(notice);
    return this.answer instanceof Error ? Promise.reject(this.answer) : Promise.resolve(this.answer);
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
    expect(await count('spot-interruption', 'unknown-instance')).to.equal(1);
    sink.answer = 'duplicate';
    queue.send(spotBody());
    await eventually(() => queue.deleted.length === 4, 'the duplicate deleted');
    expect(await count('spot-interruption', 'duplicate')).to.equal(1);
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
