import { existsSync } from 'node:fs';

import { expect } from 'chai';

import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { livePids } from '../harness/process.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('test harness control plane', function () {
  this.timeout(240_000);

  it('starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, and stop() leaves no process or directory behind', async () => {
    let cp: ControlPlane | undefined;
    try {
      cp = await startControlPlane({
        controllerManager: true,
        scheduler: true,
        kwok: true,
        installCRDs: true,
      });
      const pids = cp.pids();
      expect(pids).to.have.length(5);
      for (const pid of pids) expect(alive(pid), `pid ${pid} alive`).to.equal(true);

      const version = await cp.kubectl(['version', '-o', 'json']);
      expect(version.code, version.stderr).to.equal(0);
      const parsed = JSON.parse(version.stdout) as { serverVersion: { gitVersion: string } };
      expect(parsed.serverVersion.gitVersion).to.match(/^v1\.\d+\.\d+$/);

      const crds = await cp.kubectl(['get', 'crd', '-o', 'name']);
      expect(crds.stdout).to.contain('machinedeployments.machine.sapcloud.io');

      const workDir = cp.workDir;
      await cp.stop();
      for (const pid of pids) expect(alive(pid), `pid ${pid} after stop`).to.equal(false);
      expect(existsSync(workDir), 'work directory removed').to.equal(false);
      expect(livePids()).to.deep.equal([]);
    } finally {
      await cp?.stop();
    }
  });

  it('restarts the apiserver and serves the same data afterwards', async () => {
    const cp = await startControlPlane();
    try {
      const created = await cp.request('POST', '/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: 'survives-restart' },
      });
      expect(created.status).to.equal(201);
      const before = cp.pids();
      await cp.restartApiServer();
      const after = cp.pids();
      expect(after).to.have.length(2);
      expect(after).to.not.deep.equal(before);
      const got = await cp.request('GET', '/api/v1/namespaces/survives-restart');
      expect(got.status).to.equal(200);
    } finally {
      await cp.stop();
    }
  });

  it('tears down what it started when start-up fails', async () => {
    const before = livePids();
    let error: unknown;
    try {
      await startControlPlane({ apiServerFlags: ['--no-such-flag-exists=true'] });
    } catch (err) {
      error = err;
    }
    expect(error).to.be.instanceOf(Error);
    expect((error as Error).message).to.contain('kube-apiserver');
    expect(livePids()).to.deep.equal(before);
  });
});
