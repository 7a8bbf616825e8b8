import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { MachineResource, type Machine } from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { processExists } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { until } from './env/until.js';

const devScript = path.join(repoRoot, 'dist', 'cmd', 'dev.js');

/** Every process below pid (children, their children, …), from /proc. */
function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // "pid (comm) state ppid …"; comm may contain spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parentOf.set(Number(entry), ppid);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const queue = [pid];
  for (let p = queue.shift(); p !== undefined; p = queue.shift()) {
    for (const [child, parent] of parentOf) {
      if (parent === p) {
        found.push(child);
        queue.push(child);
      }
    }
  }
  return found;
}

const COMPONENT_LOGS = [
  'etcd.log',
  'kube-apiserver.log',
  'kube-controller-manager.log',
  'kube-scheduler.log',
  'kwok.log',
];

describe('dev mode (npm start)', function () {
  this.timeout(300_000);

  const cases: [string, (pid: number) => void][] = [
    // What Ctrl-C in a terminal does: every process of the foreground group gets SIGINT.
    ['Ctrl-C (SIGINT to its whole process group)', (pid) => process.kill(-pid, 'SIGINT')],
    ['SIGTERM to the dev mode process alone', (pid) => process.kill(pid, 'SIGTERM')],
  ];
  for (const [how, signal] of cases) {
    it(`on ${how} stops every process, removes the control plane's directory and keeps the logs`, async () => {
      const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-devtest-'));
      const tmp = path.join(scratch, 'tmp');
      const devDir = path.join(scratch, 'dev');
      mkdirSync(tmp);
      const child = spawn(process.execPath, [devScript, '--no-autoscaler'], {
        env: { ...process.env, TMPDIR: tmp, MCM_DEV_DIR: devDir },
        // Its own process group, like a terminal's foreground job.
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const pid = child.pid ?? 0;
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      let code: number | null | undefined;
      void exited.then((c) => (code = c));
      try {
        await until(
          'dev mode ready (or exited)',
          () => out.includes('Ready in') || code !== undefined,
          240_000,
        );
        expect(code, `dev mode exited during start-up:\n${out}`).to.equal(undefined);
        const pids = descendants(pid);
        expect(pids.length, 'etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok').to.equal(
          5,
        );
        const workDirs = readdirSync(tmp);
        expect(workDirs.filter((d) => d.startsWith('mcm-cp-'))).to.have.length(1);

        signal(pid);
        expect(await exited).to.equal(0);
        expect(out).to.contain(
          `Stopped; nothing is left running. Logs of this run: ${path.join(devDir, 'logs')} (replaced by the next run)`,
        );
        await until('every component process gone', () => pids.every((p) => !processExists(p)), 15_000);
        expect(readdirSync(tmp), 'nothing left in the temporary directory').to.deep.equal([]);
        expect(readdirSync(devDir).sort()).to.deep.equal(['kubeconfig', 'logs']);
        expect(readdirSync(path.join(devDir, 'logs')).sort()).to.deep.equal(COMPONENT_LOGS);
      } finally {
        if (code === undefined) {
          try {
            process.kill(-pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
        rmSync(scratch, { recursive: true, force: true });
      }
    });
  }

  it('--provider=aws: the sample deployment runs on the EC2 emulator; Ctrl-C stops the emulator too', async () => {
    const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-devtest-'));
    const devDir = path.join(scratch, 'dev');
    const child = spawn(process.execPath, [devScript, '--no-autoscaler', '--provider=aws'], {
      env: { ...process.env, MCM_DEV_DIR: devDir },
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const pid = child.pid ?? 0;
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    let code: number | null | undefined;
    void exited.then((c) => (code = c));
    let client: KubeClient | undefined;
    try {
      await until(
        'dev mode ready (or exited)',
        () => out.includes('Ready in') || code !== undefined,
        240_000,
      );
      expect(code, `dev mode exited during start-up:\n${out}`).to.equal(undefined);
      expect(out).to.match(
        /The manager runs with the AWS provider on the EC2 emulator at http:\/\/127\.0\.0\.1:\d+/,
      );
      const kc = new KubeConfig();
      kc.loadFromFile(path.join(devDir, 'kubeconfig'));
      const kube = new KubeClient({ kubeConfig: kc, userAgent: 'dev-test' });
      client = kube;
      const machines = await until(
        'the 2 sample machines Running on EC2 instances',
        async () => {
          const list = await kube.list<Machine>(MachineResource, { namespace: 'default' });
          const running = list.items.filter(
            (m) =>
              m.status?.currentStatus?.phase === 'Running' &&
              (m.spec?.providerID ?? '').startsWith('aws:///eu-west-1/i-'),
          );
          return running.length === 2 ? running : undefined;
        },
        120_000,
      );
      expect(machines.map((m) => m.metadata.labels?.node)).to.satisfy((names: string[]) =>
        names.every((n) => n.endsWith('.eu-west-1.compute.internal')),
      );
      const pids = descendants(pid);
      expect(pids.length, 'the five components and moto_server').to.equal(6);
      process.kill(-pid, 'SIGINT');
      expect(await exited).to.equal(0);
      await until('every component process gone', () => pids.every((p) => !processExists(p)), 15_000);
      expect(readdirSync(path.join(devDir, 'logs')).sort()).to.deep.equal(
        [...COMPONENT_LOGS, 'moto.log'].sort(),
      );
    } finally {
      client?.close();
      if (code === undefined) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
