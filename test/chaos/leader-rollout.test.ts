// Scenario 2: two manager replicas; the leader is killed with SIGKILL in the middle of a rolling
// update (class change, maxSurge 2, maxUnavailable 1). The other replica must finish the rollout
// without ever exceeding replicas + maxSurge, and only old-set machines may be deleted. Beside it,
// a second deployment's machines expire and are replaced throughout (expiry-beside.ts).

import { expect } from 'chai';

import { until } from '../integration/env/until.js';
import { ChaosEnv, expectClean, seconds, size } from './env.js';
import { ExpiryBeside } from './expiry-beside.js';

describe('chaos 2: kill -9 of the leader during a rolling update', function () {
  this.timeout(600_000);
  let env: ChaosEnv | undefined;

  before(async () => {
    env = await ChaosEnv.start();
  });

  after(async () => {
    await env?.stop();
  });

  it('the other replica takes over and the rollout converges, and an expiry beside it keeps its bounds', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const replicas = size(20, 12);
    const killAt = Math.ceil(replicas / 4);
    await e.lc.createClass('v1');
    await e.lc.createClass('v2');
    await e.lc.createDeployment('s2', replicas, 'v1', {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 2, maxUnavailable: 1 } },
    });
    await e.waitConverged('s2', 180_000);
    const beside = new ExpiryBeside(e, 'x2', 4);
    await beside.start('v1');
    const leader = await e.leader();
    const m = await e.measure({
      id: '2',
      title: `leader killed (-9) during rolling update of ${replicas} (maxSurge 2, maxUnavailable 1)`,
      deployment: 's2',
      start: () => e.changeClass('s2', 'v2'),
      during: async () => {
        await until(
          `≥ ${killAt} machines of the new class`,
          () => e.counts('s2', 'v2').active >= killAt,
          120_000,
        );
        const fresh = e.counts('s2', 'v2').active;
        const old = e.counts('s2', 'v1').active;
        expect(old, 'the kill lands while old machines remain').to.be.greaterThan(0);
        const killedAt = Date.now();
        await leader.kill9();
        const next = await e.leader(60_000);
        expect(next, 'the other replica leads').to.not.equal(leader);
        return `${leader.name} killed at ${fresh} new / ${old} old machines, ${next.name} leading ${seconds(Date.now() - killedAt)} later`;
      },
      alsoWaitFor: () => beside.settle(),
      timeoutMs: 300_000,
    });
    expectClean(m);
    expect(m.analysis.deletions.length, 'every old machine was replaced').to.equal(replicas);
    await beside.check();
  });
});
