import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { MachineResource, type Machine } from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Pod } from '../../lib/kube/types.js';
import { processExists } from '../harness/process.js';
import {
  binaryPath,
  newestAutoscalerVersion,
  readToolVersions,
  repoRoot,
  toolsDir,
} from '../harness/tools.js';
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

/**
 * A tools directory as a new machine has it when dev mode starts (hack/start.sh built etcd and
 * kube-apiserver alone): links to this machine's builds of those two, nothing else.
 */
function partialToolsDir(scratch: string): string {
  const v = readToolVersions();
  const dir = path.join(scratch, 'tools');
  mkdirSync(path.join(dir, `kube-apiserver-${v.KUBERNETES_VERSION}`, 'bin'), { recursive: true });
  symlinkSync(path.join(toolsDir(), `etcd-${v.ETCD_VERSION}`), path.join(dir, `etcd-${v.ETCD_VERSION}`));
  symlinkSync(
    binaryPath('kube-apiserver'),
    path.join(dir, `kube-apiserver-${v.KUBERNETES_VERSION}`, 'bin', 'kube-apiserver'),
  );
  return dir;
}

/**
 * The tools directory of a clone without ../shared: links to every build of this machine except
 * the cluster-autoscaler releases built from the source tarballs there.
 */
function bareCloneToolsDir(scratch: string): string {
  const fromSources = new Set(
    readToolVersions()
      .CLUSTER_AUTOSCALER_SOURCE_VERSIONS.split(',')
      .map((v) => `cluster-autoscaler-${v.trim()}`),
  );
  const dir = path.join(scratch, 'tools');
  mkdirSync(dir);
  for (const entry of readdirSync(toolsDir())) {
    if (!fromSources.has(entry)) symlinkSync(path.join(toolsDir(), entry), path.join(dir, entry));
  }
  return dir;
}

/** dev.js in its own process group (a terminal's foreground job), its output collected. */
function startDev(
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; pid: number; out: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, [devScript, ...args], {
    env: { ...process.env, ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { child, pid: child.pid ?? 0, out: () => out, exited };
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

describe('dev mode (npm start)', function () {
  this.timeout(300_000);

  const oldest = readToolVersions().CLUSTER_AUTOSCALER_VERSION;
  const cases: { how: string; signal: (pid: number) => void; bareClone: boolean }[] = [
    // What Ctrl-C in a terminal does: every process of the foreground group gets SIGINT.
    {
      how: 'Ctrl-C (SIGINT to its whole process group)',
      signal: (pid) => process.kill(-pid, 'SIGINT'),
      bareClone: false,
    },
    // On a clone without ../shared (no sources of the newer autoscaler releases), with the
    // autoscaler: it runs the module proxy's release and says why that one.
    {
      how: 'SIGTERM to the dev mode process alone',
      signal: (pid) => process.kill(pid, 'SIGTERM'),
      bareClone: true,
    },
  ];
  for (const { how, signal, bareClone } of cases) {
    const title = bareClone
      ? `on a clone without ../shared runs cluster-autoscaler ${oldest} and says why; on ${how} stops every process, removes the control plane's directory and keeps the logs`
      : `on ${how} stops every process, removes the control plane's directory and keeps the logs`;
    it(title, async () => {
      const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-devtest-'));
      const tmp = path.join(scratch, 'tmp');
      const devDir = path.join(scratch, 'dev');
      mkdirSync(tmp);
      const child = spawn(process.execPath, [devScript, ...(bareClone ? [] : ['--no-autoscaler'])], {
        env: {
          ...process.env,
          TMPDIR: tmp,
          MCM_DEV_DIR: devDir,
          ...(bareClone
            ? {
                MCM_CA_SOURCES_DIR: path.join(scratch, 'no-shared'),
                MCM_TOOLS_DIR: bareCloneToolsDir(scratch),
              }
            : {}),
        },
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
        if (bareClone) {
          expect(out).to.contain(
            `Using cluster-autoscaler ${oldest}, the newest that can be built here, not ${newestAutoscalerVersion()}: ` +
              `cluster-autoscaler ${newestAutoscalerVersion()} is built from source tarballs, and ${path.join(scratch, 'no-shared')} is absent`,
          );
          expect(out).to.contain(`cluster-autoscaler ${oldest} scales "workers"`);
        }
        const pids = descendants(pid);
        expect(
          pids.length,
          `etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok${bareClone ? ', cluster-autoscaler' : ''}`,
        ).to.equal(bareClone ? 6 : 5);
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
        expect(readdirSync(path.join(devDir, 'logs')).sort()).to.deep.equal(
          bareClone ? [`cluster-autoscaler-${oldest}-1.log`, ...COMPONENT_LOGS].sort() : COMPONENT_LOGS,
        );
      } finally {
        if (code === undefined) {
          // A failed assertion left dev mode running: Ctrl-C first, so that it stops the
          // components it started in their own process groups (SIGKILL to its group leaves them).
          try {
            process.kill(-pid, 'SIGINT');
          } catch {
            // already gone
          }
          await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 20_000))]);
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
  // A new machine: only what the manager needs is built when dev mode starts. The builds here run
  // the real hack/tools.sh into a scratch tools directory; with Go's build cache warm (the suite's
  // tools were built before it) each is a link of cached packages, seconds to a minute.
  it('with only etcd and kube-apiserver built, it is Ready at once; the rest is built while it runs and joins, and a pod then runs on a machine’s node', async () => {
    const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-devtest-'));
    const devDir = path.join(scratch, 'dev');
    const dev = startDev([], { MCM_DEV_DIR: devDir, MCM_TOOLS_DIR: partialToolsDir(scratch) });
    let code: number | null | undefined;
    void dev.exited.then((c) => (code = c));
    let client: KubeClient | undefined;
    try {
      await until(
        'dev mode ready (or exited)',
        () => dev.out().includes('Ready in') || code !== undefined,
        120_000,
      );
      expect(code, `dev mode exited during start-up:\n${dev.out()}`).to.equal(undefined);
      const ready = dev.out();
      expect(ready).to.contain('Starting a local control plane (etcd, kube-apiserver)...');
      expect(ready).to.contain(
        'Still building (first run on this machine; cached afterwards): kube-scheduler, kube-controller-manager and kubectl, kwok (runs the pods of the virtual nodes) and cluster-autoscaler',
      );
      expect(ready, 'nothing joined before Ready').not.to.contain('[dev]');
      const kc = new KubeConfig();
      kc.loadFromFile(path.join(devDir, 'kubeconfig'));
      const kube = new KubeClient({ kubeConfig: kc, userAgent: 'dev-test' });
      client = kube;
      // The manager works before anything joins: the sample machines get Running with their nodes.
      await until(
        'the 2 sample machines Running',
        async () => {
          const list = await kube.list<Machine>(MachineResource, { namespace: 'default' });
          return list.items.filter((m) => m.status?.currentStatus?.phase === 'Running').length === 2;
        },
        60_000,
      );
      for (const what of [
        'kube-scheduler, kube-controller-manager and kubectl joined',
        'kwok (runs the pods of the virtual nodes) joined',
        'cluster-autoscaler',
      ]) {
        await until(
          `"${what}" on the terminal`,
          () =>
            dev
              .out()
              .split('\n')
              .some((l) => l.startsWith('[dev] ') && l.includes(what)) || code !== undefined,
          600_000,
        );
        expect(code, dev.out()).to.equal(undefined);
      }
      expect(dev.out()).to.match(
        /\[dev\] cluster-autoscaler [\d.]+ joined \(built in \d+s\)\. It scales "workers"/,
      );
      expect(dev.out()).not.to.contain('could not');
      // The scheduler binds it, kwok runs it on one of the machines' nodes.
      await kube.create(CoreResources.pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'hello', namespace: 'default' },
        spec: { containers: [{ name: 'c', image: 'example' }] },
      });
      const pod = await until(
        'the pod Running on a node',
        async () => {
          const p = await kube.get<Pod>(CoreResources.pods, 'hello', 'default');
          return p.status?.phase === 'Running' && p.spec?.nodeName !== undefined ? p : undefined;
        },
        60_000,
      );
      const machines = await kube.list<Machine>(MachineResource, { namespace: 'default' });
      expect(machines.items.map((m) => m.metadata.labels?.node)).to.include(pod.spec?.nodeName);
      const pids = descendants(dev.pid);
      process.kill(-dev.pid, 'SIGINT');
      expect(await dev.exited).to.equal(0);
      await until('every component process gone', () => pids.every((p) => !processExists(p)), 15_000);
      expect(readdirSync(path.join(devDir, 'logs'))).to.include('tools.log');
    } finally {
      client?.close();
      if (code === undefined) killGroup(dev.pid);
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it('Ctrl-C while a component is still being built ends the build too', async () => {
    const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-devtest-'));
    const dev = startDev(['--no-autoscaler'], {
      MCM_DEV_DIR: path.join(scratch, 'dev'),
      MCM_TOOLS_DIR: partialToolsDir(scratch),
    });
    let code: number | null | undefined;
    void dev.exited.then((c) => (code = c));
    try {
      await until(
        'the kube build under way (or exited)',
        () => / kube v[\d.]+: building/.test(dev.out()) || code !== undefined,
        120_000,
      );
      expect(code, dev.out()).to.equal(undefined);
      const pids = descendants(dev.pid);
      const builders = pids.filter((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('tools.sh');
        } catch {
          return false;
        }
      });
      expect(builders, 'hack/tools.sh runs').to.have.length.greaterThan(0);
      process.kill(-dev.pid, 'SIGINT');
      expect(await dev.exited).to.equal(0);
      await until('the build and every component gone', () => pids.every((p) => !processExists(p)), 15_000);
    } finally {
      if (code === undefined) killGroup(dev.pid);
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
