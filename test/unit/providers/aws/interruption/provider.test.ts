import { expect } from 'chai';

import type { VmNotice, VmNoticeSink } from '../../../../../lib/driver/notices.js';
import type { ProviderContext } from '../../../../../lib/driver/registry.js';
import type { KubeApi } from '../../../../../lib/kube/client.js';
import { FakeClock } from '../../../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import { awsProvider } from '../../../../../lib/providers/aws/index.js';
import type { InterruptionQueue, QueueMessage } from '../../../../../lib/providers/aws/interruption/queue.js';
import { eventually } from '../../../helpers/eventually.js';

const BODY = JSON.stringify({
  version: '0',
  id: 'e-1',
  'detail-type': 'EC2 Spot Instance Interruption Warning',
  source: 'aws.ec2',
  time: '2026-11-28T02:00:00Z',
  region: 'eu-west-1',
  detail: { 'instance-id': 'i-0123456789abcdef0', 'instance-action': 'terminate' },
});

/** A queue that hands out what is sent, counts receives in progress and whether it was closed. */
class FakeQueue implements InterruptionQueue {
  readonly url = 'https://sqs.eu-west-1.amazonaws.com/123456789012/q';
  readonly pending: QueueMessage[] = [];
  receiving = 0;
  receives = 0;
  closed = false;
  readonly deleted: string[] = [];

  async receive(signal: AbortSignal): Promise<QueueMessage[]> {
    this.receives++;
    this.receiving++;
    try {
      while (this.pending.length === 0) {
        if (signal.aborted) throw new Error('aborted');
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      return this.pending.splice(0);
    } finally {
      this.receiving--;
    }
  }

  delete(receiptHandle: string): Promise<void> {
    this.deleted.push(receiptHandle);
    return Promise.resolve();
  }

  close(): void {
    this.closed = true;
  }
}

function context(notices: VmNoticeSink | undefined, logger = new CapturingLogger()): ProviderContext {
  return {
    control: {} as KubeApi,
    target: undefined,
    namespace: 'default',
    nodes: undefined,
    clock: new FakeClock(),
    logger,
    registry: newRegistry(),
    notices,
  };
}

describe('aws provider: the interruption queue is read between start() and stop() only (the leader’s lifetime)', () => {
  it('reads nothing before start, hands notices to the sink while started, and stops reading and closes the queue at stop', async () => {
    const queue = new FakeQueue();
    const seen: VmNotice[] = [];
    const sink: VmNoticeSink = {
      handle: (n) => {
        seen.push(n);
        return Promise.resolve('acted');
      },
    };
    const provider = awsProvider({
      interruption: {
        queueUrl: queue.url,
        settings: { drainTimeoutMs: 90_000, rebalanceAsInterruption: false },
        queue: () => queue,
      },
    })(context(sink));
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(queue.receives, 'a standby replica reads nothing').to.equal(0);

    provider.start?.();
    queue.pending.push({ messageId: 'm-1', receiptHandle: 'rh-1', body: BODY, receiveCount: 1 });
    await eventually(() => queue.deleted.length === 1, 'the message handled');
    expect(seen.map((n) => n.providerID)).to.deep.equal(['aws:///eu-west-1/i-0123456789abcdef0']);

    await provider.stop?.();
    expect(queue.receiving, 'no receive left in progress').to.equal(0);
    expect(queue.closed).to.equal(true);
    const receives = queue.receives;
    queue.pending.push({ messageId: 'm-2', receiptHandle: 'rh-2', body: BODY, receiveCount: 1 });
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(queue.receives, 'nothing read after stop').to.equal(receives);
    expect(queue.deleted).to.deep.equal(['rh-1']);
  });

  it('does not read a configured queue when nothing takes its notices, and says so', async () => {
    const queue = new FakeQueue();
    const logger = new CapturingLogger();
    const provider = awsProvider({
      interruption: {
        queueUrl: queue.url,
        settings: { drainTimeoutMs: 90_000, rebalanceAsInterruption: false },
        queue: () => queue,
      },
    })(context(undefined, logger));
    provider.start?.();
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(queue.receives).to.equal(0);
    expect(
      logger.lines.some((l) => l.level === 'warn' && l.msg.includes('nothing takes its notices')),
    ).to.equal(true);
    await provider.stop?.();
  });
});
