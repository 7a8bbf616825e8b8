import { mkdtempSync, rmSync, writeFileSync, readFileSync, renameSync, unlinkSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { TLSSocket } from 'node:tls';

import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { KubeClient } from '../../../lib/kube/client.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { KubeObject } from '../../../lib/kube/types.js';
import { createCA, issueCertificate, type CertKey } from '../../harness/certs.js';

/**
 * A CA, a server certificate for 127.0.0.1, and client certificates for alice and bob, as PEM files
 * (made in-process by the test harness: no openssl needed, so the tests always run).
 */
function makePki(dir: string): void {
  const ca = createCA('test-ca', 1);
  const write = (name: string, ck: CertKey): void => {
    writeFileSync(path.join(dir, `${name}.crt`), ck.certPem);
    writeFileSync(path.join(dir, `${name}.key`), ck.keyPem);
  };
  writeFileSync(path.join(dir, 'ca.crt'), ca.certPem);
  write(
    'server',
    issueCertificate(ca, { commonName: 'server', ips: ['127.0.0.1'], usages: ['server'], days: 1 }),
  );
  write('alice', issueCertificate(ca, { commonName: 'alice', usages: ['client'], days: 1 }));
  write('bob', issueCertificate(ca, { commonName: 'bob', usages: ['client'], days: 1 }));
}

describe('KubeClient credentials (client certificate files)', function () {
  this.timeout(30_000);
  let dir: string;
  let server: https.Server | undefined;
  let port: number;

  before(function () {
    dir = mkdtempSync(path.join(tmpdir(), 'mcm-creds-'));
    makePki(dir);
    const s = https.createServer(
      {
        key: readFileSync(path.join(dir, 'server.key')),
        cert: readFileSync(path.join(dir, 'server.crt')),
        ca: readFileSync(path.join(dir, 'ca.crt')),
        requestCert: true,
        rejectUnauthorized: true,
      },
      (req, res) => {
        const cn = req.socket instanceof TLSSocket ? req.socket.getPeerCertificate().subject.CN : undefined;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: String(cn) } }));
      },
    );
    server = s;
    return new Promise<void>((resolve) => {
      s.listen(0, '127.0.0.1', () => {
        port = (s.address() as AddressInfo).port;
        resolve();
      });
    });
  });

  after(async () => {
    const s = server;
    if (s === undefined) return;
    s.closeAllConnections();
    await new Promise<void>((r) => {
      s.close(() => {
        r();
      });
    });
    rmSync(dir, { recursive: true, force: true });
  });

  /** Installs a user's certificate and key the way a Secret volume does: new files moved in place. */
  function install(user: string): void {
    for (const ext of ['crt', 'key']) {
      const tmp = path.join(dir, `client.${ext}.tmp`);
      writeFileSync(tmp, readFileSync(path.join(dir, `${user}.${ext}`)));
      renameSync(tmp, path.join(dir, `client.${ext}`));
    }
  }

  function client(clock: FakeClock): KubeClient {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        {
          name: 'c',
          server: `https://127.0.0.1:${port}`,
          caFile: path.join(dir, 'ca.crt'),
          skipTLSVerify: false,
        },
      ],
      users: [{ name: 'u', certFile: path.join(dir, 'client.crt'), keyFile: path.join(dir, 'client.key') }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    return new KubeClient({ kubeConfig: kc, clock, credentialCheckIntervalMs: 10_000 });
  }

  const whoami = async (c: KubeClient): Promise<string | undefined> =>
    (await c.get<KubeObject>(CoreResources.namespaces, 'x')).metadata.name;

  it('reads the files once: requests go on while they are briefly missing', async () => {
    install('alice');
    const clock = new FakeClock(0);
    const c = client(clock);
    try {
      expect(await whoami(c)).to.equal('alice');
      unlinkSync(path.join(dir, 'client.crt'));
      unlinkSync(path.join(dir, 'client.key'));
      expect(await whoami(c)).to.equal('alice');
      await clock.advance(10_000); // the check finds no files and keeps what it has
      expect(await whoami(c)).to.equal('alice');
    } finally {
      c.close();
    }
  });

  it('picks up a rotated client certificate once the check interval has passed', async () => {
    install('alice');
    const clock = new FakeClock(0);
    const c = client(clock);
    try {
      expect(await whoami(c)).to.equal('alice');
      install('bob');
      expect(await whoami(c), 'within the interval the cached certificate is used').to.equal('alice');
      await clock.advance(10_000);
      expect(await whoami(c)).to.equal('bob');
    } finally {
      c.close();
    }
  });

  it('keeps the current certificate while a rotation is half done (certificate and key do not match)', async () => {
    install('alice');
    const clock = new FakeClock(0);
    const c = client(clock);
    try {
      expect(await whoami(c)).to.equal('alice');
      writeFileSync(path.join(dir, 'client.crt'), readFileSync(path.join(dir, 'bob.crt')));
      await clock.advance(10_000);
      expect(await whoami(c)).to.equal('alice');
      writeFileSync(path.join(dir, 'client.key'), readFileSync(path.join(dir, 'bob.key')));
      await clock.advance(10_000);
      expect(await whoami(c)).to.equal('bob');
    } finally {
      c.close();
    }
  });
});
