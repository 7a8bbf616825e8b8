import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { expect } from 'chai';

import { freePort } from '../../harness/ports.js';

const reservation = (port: number): string => path.join('/tmp', 'mcm-ts-ports', String(port));

describe('harness freePort', () => {
  it('gives ports below the kernel’s ephemeral range, each reserved for this process, never the same twice', async () => {
    const lo = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
    expect(new Set(ports).size, 'distinct').to.equal(ports.length);
    for (const p of ports) {
      expect(p, 'below the ephemeral range').to.be.below(lo).and.at.least(20_000);
      expect(readFileSync(reservation(p), 'utf8'), 'reserved by this process').to.equal(String(process.pid));
    }
  });

  it('gives a port another process can then listen on', async () => {
    const port = await freePort();
    const srv = net.createServer();
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(port, '127.0.0.1', resolve);
    });
    await new Promise((r) => srv.close(r));
  });

  it('releases its reservations when the process exits', async () => {
    const script = `import('${path.resolve('dist/test/harness/ports.js')}').then(async (m) => { console.log(await m.freePort()); })`;
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    await new Promise((r) => child.once('exit', r));
    const port = Number(out.trim());
    expect(port, 'the child got a port').to.be.above(0);
    expect(existsSync(reservation(port)), 'its reservation is gone').to.equal(false);
  });
});
