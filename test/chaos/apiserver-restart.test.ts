// Scenario 3: kube-apiserver is restarted in the middle of an operation, once during a scale-up and
// once during a rolling update. Both manager replicas lose their watches and requests; whatever
// they do meanwhile (a leader that cannot renew its Lease exits and is restarted), the operation
// must finish with no machine beyond replicas + maxSurge, no orphan VM and no wrong deletion.
// Beside the rolling update, a second deployment's machines expire and are replaced throughout
// (expiry-beside.ts).

import { expect } from 'chai';

import { until } from '../integration/env/until.js';
import { ChaosEnv, expectClean, REDUCED, seconds, size } from './env.js';
import { ExpiryBeside } from './expiry-beside.js';

describe('chaos 3: kube-apiserver restarted mid-operation', function () {
  this.timeout(900_000);
  let env: ChaosEnv | undefined;
  const replicas = size(40, 16);
  const restartAt = Math.ceil(replicas / 4);

  before(async () => {
    env = await ChaosEnv.start();
  });

  after(async () => {
    await env?.stop();
  });

  /** Restarts kube-apiserver (SIGTERM, start, /readyz) and says how long it was away. */
  async function restartApiServer(e: ChaosEnv): Promise<string> {
    const t0 = Date.now();
    await e.lc.cp.restartApiServer();
    return `kube-apiserver restarted (${seconds(Date.now() - t0)} until ready again)`;
  }

  it('a scale-up converges', async () => {
    if (env === undefined) throw new Error('no environment');
    const e = env;
    await e.lc.createClass('v1');
    await e.lc.createClass('v2');
    await e.lc.createDeployment('s3', 0, 'v1', {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 2, maxUnavailable: 1 } },
    });
    await e.waitConverged('s3', 60_000);
    const m = await e.measure({
      id: '3a',
      title: `kube-apiserver restarted during scale-up 0→${replicas}`,
      deployment: 's3',
      start: () => e.scale('s3', replicas),
      during: async () => {
        await until(`≥ ${restartAt} machines`, () => e.counts('s3').active >= restartAt, 120_000);
        const { active, running } = e.counts('s3');
        expect(running, 'the restart lands while the scale-up is under way').to.be.lessThan(replicas);
        return `${await restartApiServer(e)} at ${active} machines (${running} Running)`;
      },
      timeoutMs: 300_000,
    });
    expectClean(m);
  });

  // 3b runs in the full run only (see fullRunOnly in env.ts).
  if (!REDUCED)
    it('a rolling update converges, and an expiry beside it keeps its bounds', async () => {
      if (env === undefined) throw new Error('no environment');
      const e = env;
      const beside = new ExpiryBeside(e, 'x3', 4);
      await beside.start('v1');
      const m = await e.measure({
        id: '3b',
        title: `kube-apiserver restarted during rolling update of ${replicas} (maxSurge 2, maxUnavailable 1)`,
        deployment: 's3',
        start: () => e.changeClass('s3', 'v2'),
        during: async () => {
          await until(
            `≥ ${restartAt} machines of the new class`,
            () => e.counts('s3', 'v2').active >= restartAt,
            120_000,
          );
          const fresh = e.counts('s3', 'v2').active;
          const old = e.counts('s3', 'v1').active;
          expect(old, 'the restart lands while old machines remain').to.be.greaterThan(0);
          return `${await restartApiServer(e)} at ${fresh} new / ${old} old machines`;
        },
        alsoWaitFor: () => beside.settle(),
        timeoutMs: 300_000,
      });
      expectClean(m);
      expect(m.analysis.deletions.length, 'every old machine was replaced').to.equal(replicas);
      await beside.check();
    });
});
