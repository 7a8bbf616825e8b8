// Scenario 4: the cloud misbehaves. The virtual provider fails 30 % of its calls (Unavailable) and
// answers every call 2 s late, during a scale-up and then a scale-down. Retries must not create a
// second VM for a machine, leave a VM behind, or make the controllers delete the wrong machines.

import { expect } from 'chai';

import { ChaosEnv, expectExactly, fullRunOnly, size } from './env.js';

fullRunOnly('chaos 4: 30 % provider errors and 2 s latency', function () {
  this.timeout(900_000);
  let env: ChaosEnv | undefined;
  const up = size(40, 16);
  const down = size(10, 4);

  before(async () => {
    env = await ChaosEnv.start();
  });

  after(async () => {
    await env?.stop();
  });

  /** Provider calls and injected failures since `before` (both replicas; no kills here). */
  async function calls(e: ChaosEnv): Promise<{ calls: number; failed: number }> {
    return {
      calls: await e.metricSum('mcm_cloud_api_driver_request_duration_seconds_count', {
        provider: 'virtual',
      }),
      failed: await e.metricSum('mcm_cloud_api_driver_requests_failed_total', {
        provider: 'virtual',
        error_code: 'Unavailable',
      }),
    };
  }

  function reporter(e: ChaosEnv, before: { calls: number; failed: number }, into: { failed: number }) {
    return async (): Promise<string> => {
      const now = await calls(e);
      into.failed = now.failed - before.failed;
      return `${now.calls - before.calls} provider calls, ${into.failed} failed with Unavailable`;
    };
  }

  it('a scale-up converges', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const injected = { failed: 0 };
    await e.lc.createClass('flaky', { errorRate: 0.3, apiLatency: '2s' });
    await e.lc.createDeployment('s4', 0, 'flaky');
    await e.waitConverged('s4', 60_000);
    const m = await e.measure({
      id: '4a',
      title: `30 % errors, 2 s latency: scale-up 0→${up}`,
      deployment: 's4',
      start: () => e.scale('s4', up),
      report: reporter(e, await calls(e), injected),
      timeoutMs: 420_000,
    });
    expectExactly(m, { created: up, deleted: 0 });
    expect(m.vmsPerMachine, 'every machine of the target').to.have.length(up);
    expect(injected.failed, 'errors were injected').to.be.greaterThan(0);
  });

  it('a scale-down converges', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const injected = { failed: 0 };
    const m = await e.measure({
      id: '4b',
      title: `30 % errors, 2 s latency: scale-down ${up}→${down}`,
      deployment: 's4',
      start: () => e.scale('s4', down),
      report: reporter(e, await calls(e), injected),
      timeoutMs: 420_000,
    });
    expectExactly(m, { created: 0, deleted: up - down });
    expect(m.vmsPerMachine, 'every machine of the target').to.have.length(down);
    expect(injected.failed, 'errors were injected').to.be.greaterThan(0);
  });
});
