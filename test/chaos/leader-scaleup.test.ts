// Scenario 1: two manager replicas with leader election; the leader is killed with SIGKILL in the
// middle of a scale-up. The other replica must take over and finish it: no machine beyond the
// replicas, no VM without a machine, no machine deleted.

import { expect } from 'chai';

import { until } from '../integration/env/until.js';
import { ChaosEnv, expectExactly, fullRunOnly, seconds, size } from './env.js';

fullRunOnly('chaos 1: kill -9 of the leader during a scale-up', function () {
  this.timeout(600_000);
  let env: ChaosEnv | undefined;

  before(async () => {
    env = await ChaosEnv.start();
  });

  after(async () => {
    await env?.stop();
  });

  it('the other replica takes over and the scale-up converges', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    const replicas = size(60, 30);
    const killAt = Math.ceil(replicas / 3);
    await e.lc.createClass('c1');
    await e.lc.createDeployment('s1', 0, 'c1');
    await e.waitConverged('s1', 60_000);
    const leader = await e.leader();
    const m = await e.measure({
      id: '1',
      title: `leader killed (-9) during scale-up 0→${replicas}`,
      deployment: 's1',
      start: () => e.scale('s1', replicas),
      during: async () => {
        await until(`≥ ${killAt} machines`, () => e.counts('s1').active >= killAt, 120_000);
        const { active, running } = e.counts('s1');
        expect(running, 'the kill lands while the scale-up is under way').to.be.lessThan(replicas);
        const killedAt = Date.now();
        await leader.kill9();
        const next = await e.leader(60_000);
        expect(next, 'the other replica leads').to.not.equal(leader);
        return `${leader.name} killed at ${active} machines (${running} Running), ${next.name} leading ${seconds(Date.now() - killedAt)} later`;
      },
      timeoutMs: 300_000,
    });
    expectExactly(m, { created: replicas, deleted: 0 });
    expect(m.vmsPerMachine, 'every machine of the target').to.have.length(replicas);
  });
});
