import { existsSync, mkdirSync, readFileSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

/*
 * Free loopback ports for the components the harness starts. Asking the kernel for one (listen on
 * port 0, then close) is not enough when several test processes run at once (mocha's parallel
 * workers, two CI runs on one machine): the kernel hands out the same ephemeral range to outgoing
 * connections, so between the probe and the component's own bind a connection of any process may
 * take the port (etcd then exits with "address already in use"), and two harness processes may be
 * given the same port in turn. So a port is picked at random below the ephemeral range, reserved
 * across processes by a file created exclusively (removed when this process exits), and probed.
 */

/**
 * Where the reservations live: one file per port, holding the reserving process's pid. Ports are
 * the machine's, so the directory is too (/tmp, whatever TMPDIR a process was given).
 */
const RESERVATIONS = path.join(existsSync('/tmp') ? '/tmp' : tmpdir(), 'mcm-ts-ports');
/** The lowest port picked; below it sit many well-known services. */
const LOWEST = 20_000;
/** A reservation whose process is gone is taken over once it is this old. */
const STALE_MS = 10 * 60_000;

const held = new Set<string>();
let exitHookInstalled = false;

/** The first port of the range the kernel gives outgoing connections (Linux), else its default. */
function ephemeralLow(): number {
  try {
    const lo = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(lo) && lo > 0) return lo;
  } catch {
    // not Linux, or no /proc: the common default
  }
  return 32_768;
}

function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function releaseAll(): void {
  for (const file of held) rmSync(file, { force: true });
  held.clear();
  try {
    // The last process out removes the directory; another's reservation keeps it.
    rmdirSync(RESERVATIONS);
  } catch {
    // not empty, or already gone
  }
}

function release(file: string): void {
  rmSync(file, { force: true });
  held.delete(file);
}

/** Reserves port for this process; false when another live process holds it. */
function reserve(port: number): string | undefined {
  const file = path.join(RESERVATIONS, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      if (!exitHookInstalled) {
        exitHookInstalled = true;
        process.on('exit', releaseAll);
      }
      held.add(file);
      return file;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        mkdirSync(RESERVATIONS, { recursive: true });
        continue;
      }
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // Left by a process that was killed: taken over once old enough to be sure it is not in use.
      try {
        const owner = Number(readFileSync(file, 'utf8'));
        if (pidAlive(owner) || Date.now() - statSync(file).mtimeMs < STALE_MS) return undefined;
        rmSync(file, { force: true });
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** Whether this process can listen on 127.0.0.1:port right now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => {
      resolve(false);
    });
    srv.listen({ port, host: '127.0.0.1', exclusive: true }, () =>
      srv.close(() => {
        resolve(true);
      }),
    );
  });
}

/** A port the kernel picks (its ephemeral range): the fallback where no range is left below it. */
function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      if (addr === null || typeof addr === 'string') {
        reject(new Error('no port'));
        return;
      }
      srv.close(() => {
        resolve(addr.port);
      });
    });
  });
}

/**
 * A loopback port no other harness process holds and nothing listens on, kept for this process
 * until it exits.
 */
export async function freePort(): Promise<number> {
  const highest = Math.min(ephemeralLow(), 65_536) - 1;
  if (highest - LOWEST < 1_000) return kernelPort();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (highest - LOWEST + 1));
    const file = reserve(port);
    if (file === undefined) continue;
    if (await canListen(port)) return port;
    release(file);
  }
  throw new Error(`no free port found between ${LOWEST} and ${highest} in 100 attempts`);
}
