import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { livePids, processExists } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { until } from './env/until.js';

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
      for (const pid of pids) expect(processExists(pid), `pid ${pid} alive`).to.equal(true);

      const version = await cp.kubectl(['version', '-o', 'json']);
      expect(version.code, version.stderr).to.equal(0);
      const parsed = JSON.parse(version.stdout) as { serverVersion: { gitVersion: string } };
      expect(parsed.serverVersion.gitVersion).to.match(/^v1\.\d+\.\d+$/);

      const crds = await cp.kubectl(['get', 'crd', '-o', 'name']);
      expect(crds.stdout).to.contain('machinedeployments.machine.sapcloud.io');

      const workDir = cp.workDir;
      await cp.stop();
      for (const pid of pids) expect(processExists(pid), `pid ${pid} after stop`).to.equal(false);
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

  it('when the test process is interrupted (SIGINT) without stop(), kills its components and removes its work directory', async () => {
    const harness = pathToFileURL(path.join(repoRoot, 'dist', 'test', 'harness', 'controlplane.js')).href;
    // A test process that starts a control plane and is interrupted before it calls stop().
    const script = [
      `const { startControlPlane } = await import(${JSON.stringify(harness)});`,
      'const cp = await startControlPlane();',
      'process.stdout.write(JSON.stringify({ workDir: cp.workDir, pids: cp.pids() }) + "\\n");',
      'setInterval(() => undefined, 1000);',
    ].join('\n');
    const env = { ...process.env };
    delete env.MCM_KEEP_TEST_ARTIFACTS;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      const started = await until(
        'the control plane started',
        () => {
          const line = out.split('\n').find((l) => l.startsWith('{'));
          return line === undefined ? undefined : (JSON.parse(line) as { workDir: string; pids: number[] });
        },
        120_000,
      );
      expect(started.pids).to.have.length(2);
      expect(existsSync(started.workDir)).to.equal(true);
      child.kill('SIGINT');
      expect(await exited).to.equal(130);
      await until('its components gone', () => started.pids.every((pid) => !processExists(pid)), 10_000);
      expect(existsSync(started.workDir), `work directory removed\n${out}`).to.equal(false);
    } finally {
      child.kill('SIGKILL');
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
