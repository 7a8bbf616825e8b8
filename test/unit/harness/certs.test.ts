import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';

import { expect } from 'chai';

import { createMtlsBundle, writeMtlsBundle, type MtlsBundle } from '../../harness/certs.js';

/** One TLS handshake on loopback; resolves with the server-side view or the client's error. */
async function handshake(
  bundle: MtlsBundle,
  client: { cert?: string; key?: string; ca: string; servername?: string; host?: string },
): Promise<{ ok: true; peerCN: string | undefined } | { ok: false; error: string }> {
  let peerCN: string | undefined;
  const server = tls.createServer(
    {
      cert: bundle.server.certPem,
      key: bundle.server.keyPem,
      ca: bundle.ca.certPem,
      requestCert: true,
      rejectUnauthorized: true,
    },
    (socket) => {
      const subject = socket.getPeerCertificate().subject as Record<string, string> | undefined;
      peerCN = subject?.CN;
      socket.end('hello');
    },
  );
  server.on('tlsClientError', () => {
    // the client side reports the failure
  });
  await new Promise<void>((resolve) => server.listen(0, client.host ?? '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  try {
    return await new Promise((resolve) => {
      const socket = tls.connect({
        host: client.host ?? '127.0.0.1',
        port,
        ca: client.ca,
        ...(client.cert === undefined ? {} : { cert: client.cert }),
        ...(client.key === undefined ? {} : { key: client.key }),
        ...(client.servername === undefined ? {} : { servername: client.servername }),
      });
      let data = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (data += d));
      socket.on('end', () => {
        resolve(
          data === 'hello' ? { ok: true, peerCN } : { ok: false, error: 'connection closed by server' },
        );
      });
      socket.on('error', (err: Error) => {
        resolve({ ok: false, error: err.message });
      });
    });
  } finally {
    await new Promise<void>((resolve) => {
      server.close(() => {
        resolve();
      });
    });
  }
}

describe('test harness certificates', () => {
  const bundle = createMtlsBundle();

  it('issues a CA and server/client certificates that chain to it, with the requested names', () => {
    const ca = new X509Certificate(bundle.ca.certPem);
    const server = new X509Certificate(bundle.server.certPem);
    const client = new X509Certificate(bundle.client.certPem);
    expect(ca.ca).to.equal(true);
    expect(ca.verify(ca.publicKey)).to.equal(true);
    for (const leaf of [server, client]) {
      expect(leaf.ca).to.equal(false);
      expect(leaf.checkIssued(ca)).to.equal(true);
      expect(leaf.verify(ca.publicKey)).to.equal(true);
      expect(new Date(leaf.validFrom).getTime()).to.be.below(Date.now());
      expect(new Date(leaf.validTo).getTime()).to.be.above(Date.now() + 86_400_000);
    }
    expect(server.checkIP('127.0.0.1')).to.equal('127.0.0.1');
    expect(server.checkIP('::1')).to.equal('::1');
    expect(server.checkHost('localhost')).to.equal('localhost');
    expect(server.checkIP('10.0.0.1')).to.equal(undefined);
    expect(server.keyUsage).to.deep.equal(['1.3.6.1.5.5.7.3.1']);
    expect(client.keyUsage).to.deep.equal(['1.3.6.1.5.5.7.3.2']);
    expect(client.subject).to.equal('CN=cluster-autoscaler');
    // Distinct serial numbers, all positive.
    const serials = [ca, server, client].map((c) => c.serialNumber);
    expect(new Set(serials).size).to.equal(3);
  });

  it('completes a mutual TLS handshake on 127.0.0.1, and the server sees the client certificate', async () => {
    const r = await handshake(bundle, {
      ca: bundle.ca.certPem,
      cert: bundle.client.certPem,
      key: bundle.client.keyPem,
    });
    expect(r).to.deep.equal({ ok: true, peerCN: 'cluster-autoscaler' });
  });

  it('fails the handshake for a server name the certificate does not carry and for a foreign CA', async () => {
    const wrongName = await handshake(bundle, {
      ca: bundle.ca.certPem,
      cert: bundle.client.certPem,
      key: bundle.client.keyPem,
      servername: 'example.com',
    });
    expect(wrongName.ok).to.equal(false);
    const other = createMtlsBundle();
    const foreign = await handshake(bundle, {
      ca: other.ca.certPem,
      cert: other.client.certPem,
      key: other.client.keyPem,
    });
    expect(foreign.ok).to.equal(false);
  });

  it('writes PEM files with private keys readable only by the owner', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcm-certs-'));
    try {
      const files = writeMtlsBundle(dir, bundle);
      expect(readFileSync(files.caFile, 'utf8')).to.equal(bundle.ca.certPem);
      expect(readFileSync(files.clientKeyFile, 'utf8')).to.match(/^-----BEGIN PRIVATE KEY-----\n/);
      expect(statSync(files.serverKeyFile).mode & 0o777).to.equal(0o600);
      expect(statSync(files.clientKeyFile).mode & 0o777).to.equal(0o600);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
