/**
 * The builds dev mode runs while it runs. `npm start` (hack/start.sh) builds only what the manager
 * needs before it starts — etcd and kube-apiserver, and the EC2 emulator for --provider=aws — so
 * a new machine is Ready in minutes; the other components are built here afterwards, one
 * hack/tools.sh component at a time, and each joins the running system as soon as its build ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import path from 'node:path';

import { repoRoot } from '../test/harness/tools.js';

/** What a finished build brings into the running system. */
export type Joiner = 'kube' | 'kwok' | 'cluster-autoscaler';

export interface LateBuild {
  /** The hack/tools.sh component to build. */
  tool: string;
  joins: Joiner;
  /** What it is, for the terminal. */
  what: string;
}

export interface Built {
  /** kube-scheduler, kube-controller-manager and kubectl (tools component `kube`). */
  kube: boolean;
  kwok: boolean;
  /** The cluster-autoscaler dev mode runs; undefined when it is not wanted or cannot be built here. */
  autoscaler?: { built: boolean; version: string; tool: string } | undefined;
}

/**
 * The builds still to run, in the order that brings the most soonest: the rest of Kubernetes
 * (incremental over the apiserver's packages: pods get scheduled), kwok (pods run on the virtual
 * nodes), then the cluster-autoscaler (the largest).
 */
export function lateBuilds(built: Built): LateBuild[] {
  const out: LateBuild[] = [];
  if (!built.kube)
    out.push({ tool: 'kube', joins: 'kube', what: 'kube-scheduler, kube-controller-manager and kubectl' });
  if (!built.kwok)
    out.push({ tool: 'kwok', joins: 'kwok', what: 'kwok (runs the pods of the virtual nodes)' });
  const ca = built.autoscaler;
  if (ca !== undefined && !ca.built)
    out.push({ tool: ca.tool, joins: 'cluster-autoscaler', what: `cluster-autoscaler ${ca.version}` });
  return out;
}

/**
 * Whether a line of hack/tools.sh's output belongs on the terminal while dev mode runs: its own
 * start, cached, built, skipped and failed lines; not the progress lines of every 30 seconds nor
 * the summary table (all of it is in the build log).
 */
export function terminalLine(line: string): boolean {
  return line.startsWith('[tools ') && !line.includes('still working') && !line.includes('building into ');
}

/** One hack/tools.sh run in its own process group, its output appended to a log file. */
export class ToolBuild {
  private child: ChildProcess | undefined;

  constructor(
    private readonly tool: string,
    private readonly logFile: string,
    private readonly onLine: (line: string) => void,
  ) {}

  /** Resolves with the build's exit code (1 when it could not start). */
  run(): Promise<number> {
    return new Promise((resolve) => {
      const child = spawn('bash', [path.join(repoRoot, 'hack', 'tools.sh'), this.tool], {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
        // Its own group: Ctrl-C in the terminal reaches dev mode, which ends the build itself.
        detached: true,
      });
      this.child = child;
      let pending = '';
      const take = (chunk: Buffer): void => {
        const text = pending + chunk.toString('utf8');
        appendFileSync(this.logFile, chunk);
        const lines = text.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) this.onLine(line);
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      child.on('error', (err) => {
        appendFileSync(this.logFile, `cannot start hack/tools.sh: ${err.message}\n`);
        resolve(1);
      });
      child.on('close', (code) => {
        this.child = undefined;
        if (pending !== '') this.onLine(pending);
        resolve(code ?? 1);
      });
    });
  }

  /** Ends the build and everything it started (an interrupted build is redone by the next run). */
  kill(): void {
    const pid = this.child?.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, 'SIGTERM');
    } catch {
      // ended meanwhile
    }
  }
}
