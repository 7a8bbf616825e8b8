import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, openSync, readFileSync, rmSync } from 'node:fs';

/**
 * Every child process started by the harness, so that they can be killed synchronously when the
 * test process exits for any reason (including an uncaught exception or a signal).
 */
const live = new Set<ChildProcess>();
/** Scratch directories to remove when the process exits before their owner removed them. */
const scratch = new Set<string>();
let exitHookInstalled = false;
/** Whether children get a process group of their own (see detachChildProcesses). */
let detachChildren = false;

/**
 * Children started from now on get a process group of their own, so a Ctrl-C at the terminal
 * (SIGINT to the foreground group) reaches only this process, which then stops them in order (dev
 * mode: the manager before the API server it talks to). Not for tests: a runner that kills the
 * test's process group would leave such children running.
 */
export function detachChildProcesses(): void {
  detachChildren = true;
}

function killAll(): void {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    killAll();
    for (const dir of scratch) {
      try {
        // A child killed a moment ago may still be closing a file in it: retry briefly.
        rmSync(dir, { recursive: true, force: true, maxRetries: 3, retryDelay: 50 });
      } catch {
        // nothing more can be done while exiting
      }
    }
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      // A program with its own handler (dev mode) shuts down in order and exits itself; the exit
      // hook above then finishes what it left.
      if (process.listenerCount(sig) > 1) return;
      killAll();
      process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1));
    });
  }
}

/**
 * Removes dir (recursively) when the process exits, unless cancelRemoveOnExit(dir) was called
 * first: for directories whose owner normally removes them itself but may not get to (a signal,
 * a crash, a test that never calls stop()).
 */
export function removeOnExit(dir: string): void {
  installExitHook();
  scratch.add(dir);
}

/** The owner removed dir itself, or keeps it on purpose. */
export function cancelRemoveOnExit(dir: string): void {
  scratch.delete(dir);
}

/** Whether a process of that pid exists (signal 0 probes without signalling). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** PIDs of harness-started processes that are still running (used to prove teardown). */
export function livePids(): number[] {
  return [...live].map((c) => c.pid).filter((p): p is number => p !== undefined);
}

export interface ManagedProcessOptions {
  name: string;
  command: string;
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/**
 * A long-running component (etcd, kube-apiserver, …) with its output in a log file. The child
 * writes to the file itself: a pipe read by this process would make every child's writes wait
 * for this event loop (a Node child blocks on a full stdout pipe, a Go one stalls the goroutine
 * that logs), so a busy test or benchmark process would slow down what it measures.
 */
export class ManagedProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<number | null> = Promise.resolve(null);
  private exitCode: number | null | undefined;

  constructor(readonly opts: ManagedProcessOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && this.exitCode === undefined;
  }

  start(): void {
    if (this.running) throw new Error(`${this.opts.name} is already running`);
    installExitHook();
    this.exitCode = undefined;
    const fd = openSync(this.opts.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn(this.opts.command, this.opts.args, {
        env: this.opts.env ?? process.env,
        cwd: this.opts.cwd,
        stdio: ['ignore', fd, fd],
        detached: detachChildren,
      });
    } finally {
      // The child holds its own copy of the descriptor.
      closeSync(fd);
    }
    this.child = child;
    live.add(child);
    this.exited = new Promise((resolve) => {
      child.once('exit', (code) => {
        live.delete(child);
        this.exitCode = code;
        resolve(code);
      });
      child.once('error', (err) => {
        live.delete(child);
        this.exitCode = -1;
        appendFileSync(this.opts.logFile, `spawn error: ${err.message}\n`);
        resolve(-1);
      });
    });
  }

  /** Resolves with the exit code when the process ends on its own (used to fail fast on start). */
  waitExit(): Promise<number | null> {
    return this.exited;
  }

  /** SIGTERM, then SIGKILL after graceMs; resolves once the process is gone. */
  async stop(graceMs = 10_000): Promise<void> {
    const child = this.child;
    if (child === undefined || this.exitCode !== undefined) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** SIGKILL without grace (simulates a crash). */
  async kill(): Promise<void> {
    const child = this.child;
    if (child === undefined || this.exitCode !== undefined) return;
    child.kill('SIGKILL');
    await this.exited;
  }

  /** Last lines of the log, for error messages. */
  tail(lines = 30): string {
    try {
      const text = readFileSync(this.opts.logFile, 'utf8');
      return text.split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  }
}

export { freePort } from './ports.js';

/**
 * Polls check() until it returns true, failing early when the process dies. Start-up readiness is
 * the one place the harness polls: the components expose no event to wait on.
 */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  opts: { timeoutMs: number; intervalMs?: number; process?: ManagedProcess },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  let lastError: unknown;
  const state = { died: false };
  void opts.process?.waitExit().then(() => {
    state.died = true;
  });
  while (Date.now() < deadline) {
    if (state.died) {
      throw new Error(`${what}: process exited during start-up\n${opts.process?.tail() ?? ''}`);
    }
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 200));
  }
  const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
  throw new Error(`${what}: not ready after ${opts.timeoutMs} ms${detail}\n${opts.process?.tail() ?? ''}`);
}
