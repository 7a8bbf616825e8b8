// Commands for the image check: progress lines for long steps, logs under the cache, and the
// container tools (buildah, podman) with the settings that work on these machines.

import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/** Everything the check keeps between runs: the base image, the image store, downloads, logs. */
export const CACHE = process.env.MCM_IMAGE_CACHE ?? path.join(homedir(), '.cache', 'mcm-ts', 'image');
export const LOGS = path.join(CACHE, 'logs');

const started = Date.now();
const clock = (): string => `${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s`;

export function progress(message: string): void {
  console.log(`image-check ${clock()}  ${message}`);
}

export function seconds(ms: number): string {
  return ms < 60_000
    ? `${(ms / 1000).toFixed(1)} s`
    : `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/**
 * Runs a command, its output to LOGS/<log>.log; a line every 30 s while it runs, and lines that
 * match `show` as they come. Throws with the log's last lines when it fails.
 */
export async function step(
  title: string,
  command: string,
  args: readonly string[],
  opts: { log: string; show?: RegExp; stdin?: string } = { log: 'step' },
): Promise<number> {
  mkdirSync(LOGS, { recursive: true });
  const logFile = path.join(LOGS, `${opts.log}.log`);
  const out = createWriteStream(logFile);
  const t0 = Date.now();
  progress(`${title} …`);
  const heartbeat = setInterval(() => {
    progress(`  ${title}: still running (${seconds(Date.now() - t0)}; log ${logFile})`);
  }, 30_000);
  try {
    const code = await new Promise<number>((resolve, reject) => {
      const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
      let partial = '';
      const onData = (d: string): void => {
        out.write(d);
        if (opts.show === undefined) return;
        const lines = (partial + d).split('\n');
        partial = lines.pop() ?? '';
        for (const l of lines) if (opts.show.test(l)) progress(`  ${l.trim()}`);
      };
      child.stdout.setEncoding('utf8').on('data', onData);
      child.stderr.setEncoding('utf8').on('data', onData);
      child.on('error', reject);
      child.on('close', (c) => {
        resolve(c ?? -1);
      });
      // A command that exits without reading its input closes the pipe under our write (EPIPE):
      // its exit code and output are what count, not that error.
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.stdin ?? '');
    });
    await new Promise<void>((resolve) => out.end(resolve));
    const took = Date.now() - t0;
    if (code !== 0) {
      const tail = readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-25).join('\n');
      throw new Error(
        `${title} failed (exit ${code}) after ${seconds(took)}; last lines of ${logFile}:\n${tail}`,
      );
    }
    progress(`${title}: done in ${seconds(took)}`);
    return took;
  } finally {
    clearInterval(heartbeat);
  }
}

/** A short command's output; throws with its stderr when it fails. */
export function capture(command: string, args: readonly string[]): string {
  const r = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error !== undefined) throw r.error;
  if (r.status !== 0)
    throw new Error(`${command} ${args.join(' ')} failed (${r.status}): ${r.stderr.trim()}`);
  return r.stdout;
}

export function succeeds(command: string, args: readonly string[]): boolean {
  const r = spawnSync(command, args, { stdio: 'ignore' });
  return r.status === 0;
}

/** Debian package of each program the check needs. */
const TOOLS: Record<string, string> = {
  buildah: 'buildah',
  podman: 'podman',
  runc: 'runc',
  debootstrap: 'debootstrap',
  chroot: 'coreutils',
  tar: 'tar',
};

const found = (cmd: string): boolean => succeeds('sh', ['-c', `command -v ${cmd}`]);

/**
 * Installs the missing tools with apt-get when running as root on Debian; otherwise says which
 * packages to install.
 */
export async function ensureTools(): Promise<void> {
  const missing = Object.keys(TOOLS).filter((c) => !found(c));
  if (missing.length === 0) return;
  const packages = [...new Set(missing.map((c) => TOOLS[c] ?? c))];
  if (process.getuid?.() !== 0 || !found('apt-get'))
    throw new Error(
      `missing ${missing.join(', ')}: install the Debian packages ${packages.join(' ')} ` +
        '(the check needs root: debootstrap, chroot and the image store under the cache)',
    );
  progress(`installing the Debian packages ${packages.join(' ')} with apt-get (running as root)`);
  try {
    await step('apt-get install', 'apt-get', ['install', '-y', '-q', ...packages], { log: 'apt-get' });
  } catch {
    await step('apt-get update', 'apt-get', ['update', '-q'], { log: 'apt-get-update' });
    await step('apt-get install', 'apt-get', ['install', '-y', '-q', ...packages], { log: 'apt-get' });
  }
}

/**
 * The image store under the cache (overlay driver), shared by buildah and podman. podman runs
 * containers with runc and cgroupfs, and with limits at or below this process's own: these
 * machines have hybrid cgroups (which crun refuses) and no CAP_SYS_RESOURCE (podman's default
 * limits are higher than the machine's).
 */
export const STORE = [
  '--root',
  path.join(CACHE, 'storage'),
  '--runroot',
  path.join(CACHE, 'run'),
  '--storage-driver',
  'overlay',
];
export const PODMAN = [...STORE, '--runtime', 'runc', '--cgroup-manager', 'cgroupfs'];
export const ULIMITS = ['--ulimit', 'nofile=8192:8192', '--ulimit', 'nproc=4096:4096'];
