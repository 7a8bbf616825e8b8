import path from 'node:path';

import { expect } from 'chai';

import { ManagedProcess } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

/**
 * The manager as users run it (`node dist/cmd/manager.js <flags>`), killed with SIGKILL while it
 * is creating machines: whatever it was doing, a restarted manager must never make a second VM
 * for a machine, nor leave a VM without a machine.
 */
describe('SIGKILL of the manager in the middle of creations (real kube-apiserver)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;
  let proc: ManagedProcess | undefined;

  before(async () => {
    env = await LifecycleEnv.start();
  });

  after(async () => {
    await proc?.stop();
    await env.stop();
  });

  function manager(run: number): ManagedProcess {
    return new ManagedProcess({
      name: `manager-${run}`,
      command: process.execPath,
      args: [
        managerScript,
        `--control-kubeconfig=${env.cp.kubeconfigPath}`,
        `--target-kubeconfig=${env.cp.kubeconfigPath}`,
        '--namespace=default',
        '--leader-elect=false',
        '--address=127.0.0.1',
        '--port=0',
        '--kube-api-qps=100',
        '--kube-api-burst=200',
      ],
      logFile: path.join(env.cp.workDir, `manager-${run}.log`),
    });
  }

  it('never creates a second VM for a machine, and leaves no VM without a machine', async () => {
    const replicas = 40;
    // Slow cloud calls keep many creations in flight at any moment.
    await env.createClass('slow', { apiLatency: '400ms' });
    await env.createDeployment('crash', replicas, 'slow');
    const vmCount = async (): Promise<number> =>
      (await env.nodes()).filter((n) => n.metadata.labels?.['virtual.mcm-ts.io/vm'] === 'true').length;

    let kills = 0;
    for (let run = 0; run < 3; run++) {
      proc = manager(run);
      proc.start();
      if (run === 2) break;
      // Kill once some VMs exist but creations are still going on.
      const target = run === 0 ? 5 : 20;
      await until(
        `at least ${target} VMs during run ${run}`,
        async () => (await vmCount()) >= target,
        90_000,
      );
      const running = (await env.machines('crash')).filter((m) => phaseOf(m) === 'Running').length;
      expect(running, 'the kill lands while machines are still being created').to.be.lessThan(replicas);
      await proc.kill();
      kills++;
    }
    expect(kills).to.equal(2);

    await until(
      `${replicas} Running machines after the restarts`,
      async () => {
        const ms = await env.machines('crash');
        return ms.length === replicas && ms.every((m) => phaseOf(m) === 'Running');
      },
      150_000,
    );
    const machines = await env.machines('crash');
    const vms = (await env.nodes()).filter((n) => n.metadata.labels?.['virtual.mcm-ts.io/vm'] === 'true');
    expect(vms, 'exactly one VM per machine').to.have.length(replicas);
    const byProviderID = new Map(vms.map((n) => [n.spec?.providerID ?? '', n]));
    const seen = new Set<string>();
    for (const m of machines) {
      const id = m.spec?.providerID ?? '';
      expect(byProviderID.has(id), `machine ${m.metadata.name ?? ''} has its VM`).to.be.true;
      expect(seen.has(id), `providerID ${id} belongs to one machine`).to.be.false;
      seen.add(id);
      expect(byProviderID.get(id)?.metadata.annotations?.['virtual.mcm-ts.io/machine']).to.equal(
        `default/${m.metadata.name ?? ''}`,
      );
    }
  });
});
