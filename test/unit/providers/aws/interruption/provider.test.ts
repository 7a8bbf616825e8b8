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
import { FakeEc2 } from '../fake-ec2.js';
import { cls, codeOf, machine, secret } from '../fixtures.js';

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

  changeVisibility(): Promise<void> {
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

describe('aws provider: a Spot interruption and the offering of its instance', () => {
  for (const optIn of [false, true]) {
    it(
      optIn
        ? 'with --aws-unavailable-after-interruption the offering is marked before the notice is handled: the replacement is refused (ResourceExhausted) without calling EC2'
        : 'by default the offering is not marked: the replacement is launched at once',
      async () => {
        const fake = new FakeEc2();
        const spot = cls({ spotPrice: undefined, instanceMarketOptions: { marketType: 'spot' } });
        const victim = fake.add({
          InstanceType: 't2.large',
          SubnetId: 'subnet-acbd1234',
          InstanceLifecycle: 'spot',
          Tags: [
            { Key: 'Name', Value: 'm0' },
            { Key: 'kubernetes.io/cluster/YOUR_CLUSTER_NAME', Value: '1' },
          ],
        });
        const id = victim.InstanceId ?? '';
        const queue = new FakeQueue();
        const marked: boolean[] = [];
        const ref: { provider?: ReturnType<ReturnType<typeof awsProvider>> } = {};
        const sink: VmNoticeSink = {
          // What a replacement created while the notice is recorded would meet.
          handle: async () => {
            const attempt = await codeOf(
              ref.provider?.driver.createMachine({ machine: machine('probe'), machineClass: spot, secret }) ??
                Promise.resolve(),
            );
            marked.push(attempt.startsWith('ResourceExhausted'));
            return 'acted';
          },
        };
        const provider = awsProvider({
          ec2: () => fake,
          lookupGatherMs: 0,
          unavailableAfterInterruption: optIn,
          interruption: {
            queueUrl: queue.url,
            settings: { drainTimeoutMs: 90_000, rebalanceAsInterruption: false },
            queue: () => queue,
          },
        })(context(sink));
        ref.provider = provider;
        // The driver sees the instance, as the machine controller's status checks make it.
        await provider.driver.getMachineStatus({
          machine: machine('m0', `aws:///eu-west-1/${id}`),
          machineClass: spot,
          secret,
        });
        provider.start?.();
        const body = BODY.replace('i-0123456789abcdef0', id);
        queue.pending.push({ messageId: 'm-1', receiptHandle: 'rh-1', body, receiveCount: 1 });
        await eventually(() => queue.deleted.length === 1, 'the message handled');
        expect(marked, 'the mark stands when the notice is handled').to.deep.equal([optIn]);
        const runs = fake.runs.length;
        const replacement = await codeOf(
          provider.driver.createMachine({ machine: machine('m1'), machineClass: spot, secret }),
        );
        if (optIn) {
          expect(replacement).to.match(
            new RegExp(
              `^ResourceExhausted: AWS RunInstances not tried: spot t2.large in subnet-acbd1234 is unavailable until .* \\(EC2 Spot interruption of ${id}\\)$`,
            ),
          );
          expect(fake.runs.length, 'no RunInstances').to.equal(runs);
        } else {
          expect(replacement).to.equal('OK');
          expect(fake.runs.length).to.equal(runs + 1);
        }
        await provider.stop?.();
      },
    );
  }
});
