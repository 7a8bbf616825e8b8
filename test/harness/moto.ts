// The EC2 emulator (moto_server from the tools venv) on a free loopback port, for the AWS
// provider's tests. One per test file; reset() clears every resource between tests.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { ManagedProcess, cancelRemoveOnExit, removeOnExit, waitUntil } from './process.js';
import { motoServerPath } from './tools.js';

export interface Moto {
  /** `http://127.0.0.1:<port>`: what AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL point at. */
  readonly endpoint: string;
  readonly pid: number | undefined;
  /** Clears every resource of every service (moto's reset API). */
  reset(): Promise<void>;
  stop(): Promise<void>;
}

export interface MotoOptions {
  /** Where moto.log goes (default: a scratch directory removed by stop()). */
  logDir?: string;
}

/** Starts moto_server on 127.0.0.1 with a port of its own choosing and waits until it answers. */
export async function startMoto(opts: MotoOptions = {}): Promise<Moto> {
  const scratch = opts.logDir === undefined ? mkdtempSync(path.join(tmpdir(), 'moto-')) : undefined;
  if (scratch !== undefined) removeOnExit(scratch);
  const logDir = opts.logDir ?? scratch ?? tmpdir();
  const proc = new ManagedProcess({
    name: 'moto_server',
    command: motoServerPath(),
    // Port 0: the server binds a free port and logs it, so two test files never race for one.
    args: ['-H', '127.0.0.1', '-p', '0'],
    logFile: path.join(logDir, 'moto.log'),
    env: { ...process.env, PYTHONUNBUFFERED: '1' },
  });
  proc.start();
  let endpoint = '';
  try {
    await waitUntil(
      'moto_server',
      async () => {
        if (endpoint === '') {
          const m = /Running on (http:\/\/127\.0\.0\.1:\d+)/.exec(proc.tail(50));
          if (m?.[1] === undefined) return false;
          endpoint = m[1];
        }
        const r = await fetch(`${endpoint}/moto-api/data.json`);
        return r.ok;
      },
      { timeoutMs: 30_000, intervalMs: 100, process: proc },
    );
  } catch (err) {
    await proc.stop();
    throw err;
  }
  return {
    endpoint,
    get pid() {
      return proc.pid;
    },
    async reset() {
      const r = await fetch(`${endpoint}/moto-api/reset`, { method: 'POST' });
      if (!r.ok) throw new Error(`moto reset: HTTP ${r.status}`);
    },
    async stop() {
      await proc.stop(5_000);
      if (scratch !== undefined) {
        rmSync(scratch, { recursive: true, force: true });
        cancelRemoveOnExit(scratch);
      }
    },
  };
}
