import { expect } from 'chai';

import type { VmNoticeSink } from '../../../../../lib/driver/notices.js';
import type { ProviderContext } from '../../../../../lib/driver/registry.js';
import type { KubeApi } from '../../../../../lib/kube/client.js';
import { FakeClock } from '../../../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../../lib/observability/metrics.js';
import type { Ec2Api, Ec2ApiFactory } from '../../../../../lib/providers/aws/client.js';
import { awsProvider } from '../../../../../lib/providers/aws/index.js';
import { eventually } from '../../../helpers/eventually.js';
import { cls, secret } from '../fixtures.js';

const INTERVAL = 60_000;

/** EC2 that lists no instance and no status, counting the status calls. */
function quietEc2(): { factory: Ec2ApiFactory; statusCalls: () => number } {
  let statusCalls = 0;
  const refuse = (): Promise<never> => Promise.reject(new Error('unexpected call'));
  const api: Ec2Api = {
    describeInstances: () => Promise.resolve({ $metadata: {}, Reservations: [] }),
    describeInstanceStatus: () => {
      statusCalls++;
      return Promise.resolve({ $metadata: {}, InstanceStatuses: [] });
    },
    runInstances: refuse,
    describeImages: refuse,
    terminateInstances: refuse,
    modifyInstanceAttribute: refuse,
    modifyNetworkInterfaceAttribute: refuse,
    assignIpv6Addresses: refuse,
    describeSpotPriceHistory: refuse,
    destroy: () => undefined,
  };
  return { factory: () => api, statusCalls: () => statusCalls };
}

const sink: VmNoticeSink = { handle: () => Promise.resolve('unknown') };

function context(clock: FakeClock): ProviderContext {
  return {
    control: {} as KubeApi,
    target: undefined,
    namespace: 'default',
    nodes: undefined,
    clock,
    logger: new CapturingLogger(),
    registry: newRegistry(),
    notices: sink,
  };
}

describe('aws provider: the instance status poll runs between start() and stop() only (the leader’s lifetime)', () => {
  it('without an interruption queue, polls the region and credentials a driver call showed, only while started', async () => {
    const clock = new FakeClock();
    const ec2 = quietEc2();
    const provider = awsProvider({
      ec2: ec2.factory,
      health: { intervalMs: INTERVAL, impairedTimeoutMs: 300_000, random: () => 0.5 },
    })(context(clock));
    // The orphan collection lists the class before the controllers start (and a standby's too).
    await provider.driver.listMachines({ machineClass: cls(), secret });
    await clock.advance(3 * INTERVAL);
    expect(ec2.statusCalls(), 'a standby replica polls nothing').to.equal(0);

    provider.start?.();
    await clock.advance(INTERVAL);
    await eventually(() => ec2.statusCalls() === 2, 'one poll: both filters');

    await provider.stop?.();
    await clock.advance(3 * INTERVAL);
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(ec2.statusCalls(), 'nothing polled after stop').to.equal(2);
  });

  it('an interval of 0 polls nothing; the metrics are registered all the same', async () => {
    const clock = new FakeClock();
    const ec2 = quietEc2();
    const ctx = context(clock);
    const provider = awsProvider({
      ec2: ec2.factory,
      health: { intervalMs: 0, impairedTimeoutMs: 300_000 },
    })(ctx);
    await provider.driver.listMachines({ machineClass: cls(), secret });
    provider.start?.();
    await clock.advance(10 * INTERVAL);
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(ec2.statusCalls()).to.equal(0);
    for (const name of [
      'mcm_aws_instance_status_polls_total',
      'mcm_aws_impaired_instance_notices_total',
      'mcm_aws_impaired_instances',
    ])
      expect(ctx.registry.getSingleMetric(name), name).to.not.equal(undefined);
    await provider.stop?.();
  });
});
