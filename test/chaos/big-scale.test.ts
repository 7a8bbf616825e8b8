// Scenario 5: a scale from 3 to 500 machines at once (100 in the reduced run), with the client rate
// limits raised so that the API server, not the limiter, sets the pace, and VMs that boot at once.

import { ChaosEnv, expectClean, size } from './env.js';

const QPS = 300;
const BURST = 600;

describe('chaos 5: a scale from 3 to hundreds at once', function () {
  this.timeout(900_000);
  let env: ChaosEnv | undefined;

  before(async () => {
    env = await ChaosEnv.start({
      qps: QPS,
      burst: BURST,
    });
  });

  after(async () => {
    await env?.stop();
  });

  it('converges', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const target = size(500, 100);
    await e.lc.createClass('c5', { bootDelay: '0s' });
    await e.lc.createDeployment('s5', 3, 'c5');
    await e.waitConverged('s5', 120_000);
    const m = await e.measure({
      id: '5',
      title: `scale 3→${target} at once (--kube-api-qps=${QPS} --kube-api-burst=${BURST})`,
      deployment: 's5',
      start: () => e.scale('s5', target),
      timeoutMs: 600_000,
    });
    expectClean(m);
  });
});
