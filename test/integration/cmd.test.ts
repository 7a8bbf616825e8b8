import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';

import { expect } from 'chai';

import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { until } from './env/until.js';

const managerScript = path.join(repoRoot, 'dist', 'cmd', 'manager.js');

function get(port: number, p: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    http
      .get(`http://127.0.0.1:${port}${p}`, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, body });
        });
      })
      .on('error', () => {
        resolve({ status: 0, body: '' });
      });
  });
}

async function status(port: number, p: string): Promise<number> {
  return (await get(port, p)).status;
}

function run(args: string[]): {
  exited: Promise<number>;
  stderr: () => string;
  kill: (s: NodeJS.Signals) => void;
} {
  const child = spawn(process.execPath, [managerScript, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  return {
    exited: new Promise((resolve) =>
      child.on('exit', (code) => {
        resolve(code ?? -1);
      }),
    ),
    stderr: () => err,
    kill: (s) => child.kill(s),
  };
}

describe('the machine-controller-manager command', function () {
  this.timeout(180_000);
  let cp: ControlPlane;

  before(async function () {
    this.timeout(180_000);
    cp = await startControlPlane({ installCRDs: true });
  });

  after(async () => {
    await (cp as ControlPlane | undefined)?.stop();
  });

  it('rejects a bad flag with a message and exit code 2', async () => {
    const p = run(['--safety-up=-3']);
    expect(await p.exited).to.equal(2);
    expect(p.stderr()).to.contain('--safety-up: must be >= 0');
  });

  it('starts with leader election, becomes ready, and exits 0 on SIGTERM after releasing the Lease', async () => {
    const port = await freePort();
    const p = run([
      `--control-kubeconfig=${cp.kubeconfigPath}`,
      '--namespace=default',
      '--address=127.0.0.1',
      `--port=${port}`,
      '--leader-elect=true',
      '--v=2',
    ]);
    // Ready means caches synced and leading or standing by; this test needs the leader with its
    // controllers running. The leader gauge turns 1 in the same tick that starts the controllers,
    // so it (not the Lease object, written a moment earlier) is the state to wait for.
    await until('ready', async () => (await status(port, '/readyz')) === 200, 60_000);
    await until(
      'leading',
      async () =>
        (await get(port, '/metrics')).body.includes(
          'leader_election_master_status{name="machine-controller-manager"} 1',
        ),
      60_000,
    );
    const held = await cp.request(
      'GET',
      '/apis/coordination.k8s.io/v1/namespaces/default/leases/machine-controller-manager',
    );
    expect((held.body as { spec?: { holderIdentity?: string } }).spec?.holderIdentity).to.contain('_');
    expect(await status(port, '/healthz')).to.equal(200);
    p.kill('SIGTERM');
    expect(await p.exited, p.stderr()).to.equal(0);
    const lease = await cp.request(
      'GET',
      '/apis/coordination.k8s.io/v1/namespaces/default/leases/machine-controller-manager',
    );
    expect((lease.body as { spec?: { holderIdentity?: string } }).spec?.holderIdentity ?? '').to.equal('');
    const lines = p
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { message?: string; level?: string });
    expect(lines.map((l) => l.message)).to.include.members([
      'controllers started',
      'shutting down',
      'released leader lease',
    ]);
    expect(lines.filter((l) => l.level === 'error')).to.deep.equal([]);
  });

  it('exits with a clear error when the CRDs are missing', async () => {
    const bare = await startControlPlane();
    try {
      const p = run([`--control-kubeconfig=${bare.kubeconfigPath}`, '--leader-elect=false', '--port=0']);
      expect(await p.exited).to.equal(1);
      expect(p.stderr()).to.contain('CRDs are not installed');
    } finally {
      await bare.stop();
    }
  });
});
