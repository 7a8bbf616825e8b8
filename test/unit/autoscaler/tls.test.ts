import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { autoscalerMetrics } from '../../../lib/autoscaler/metrics.js';
import {
  ReloadingServerTls,
  TlsMaterialError,
  validateTlsMaterial,
  type TlsFiles,
} from '../../../lib/autoscaler/tls.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';
import { newRegistry, type Registry } from '../../../lib/observability/metrics.js';
import { eventually } from '../helpers/eventually.js';
import { createCA, issueCertificate, type CertKey } from '../../harness/certs.js';
import { metricValue } from '../../harness/metrics.js';

const FILES: TlsFiles = { certFile: '/tls/tls.crt', keyFile: '/tls/tls.key', clientCAFile: '/tls/ca.crt' };
const ca = createCA('server-ca');
const clientCA = createCA('client-ca');
const leaf = (): CertKey =>
  issueCertificate(ca, { commonName: 'mcm-grpc', dnsNames: ['localhost'], usages: ['server'] });
const a = leaf();
const b = leaf();
const buf = (s: string): Buffer => Buffer.from(s);

describe('gRPC server TLS material', () => {
  describe('validateTlsMaterial', () => {
    it('accepts a certificate with its key and a client CA bundle, and describes them without key material', () => {
      const m = validateTlsMaterial(
        FILES,
        buf(a.certPem + ca.certPem),
        buf(a.keyPem),
        buf(clientCA.certPem + ca.certPem),
      );
      const x = new X509Certificate(a.certPem);
      expect(m.server).to.deep.equal({
        subject: 'CN=mcm-grpc',
        notAfter: new Date(x.validTo).toISOString(),
        sha256: x.fingerprint256,
      });
      expect(m.serverExpiresAt).to.equal(Date.parse(x.validTo));
      expect(m.clientCAs.map((c) => c.subject)).to.deep.equal(['CN=client-ca', 'CN=server-ca']);
    });

    const refused: [string, () => [string, string, string], RegExp][] = [
      [
        'a certificate with another key (a rotation half written)',
        () => [b.certPem, a.keyPem, clientCA.certPem],
        /the certificate in \/tls\/tls\.crt \(CN=mcm-grpc\) does not belong to the key in \/tls\/tls\.key/,
      ],
      [
        'an empty certificate file',
        () => ['', a.keyPem, clientCA.certPem],
        /\/tls\/tls\.crt holds no PEM certificate/,
      ],
      [
        'a certificate that does not parse',
        () => ['-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n', a.keyPem, clientCA.certPem],
        /\/tls\/tls\.crt: certificate 1 does not parse/,
      ],
      [
        'a key that is not a key',
        () => [a.certPem, 'garbage', clientCA.certPem],
        /\/tls\/tls\.key holds no usable PEM private key/,
      ],
      ['an empty client CA file', () => [a.certPem, a.keyPem, ''], /\/tls\/ca\.crt holds no PEM certificate/],
    ];
    for (const [what, files, message] of refused) {
      it(`refuses ${what}, naming the file`, () => {
        const [cert, key, cas] = files();
        let err: unknown;
        try {
          validateTlsMaterial(FILES, buf(cert), buf(key), buf(cas));
        } catch (e) {
          err = e;
        }
        expect(err).to.be.instanceOf(TlsMaterialError);
        expect((err as Error).message).to.match(message);
        expect((err as Error).message).to.not.contain('PRIVATE KEY');
      });
    }
  });

  describe('ReloadingServerTls', () => {
    let dir: string;
    let files: TlsFiles;
    beforeEach(() => {
      dir = mkdtempSync(path.join(tmpdir(), 'mcm-tls-unit-'));
      files = {
        certFile: path.join(dir, 'tls.crt'),
        keyFile: path.join(dir, 'tls.key'),
        clientCAFile: path.join(dir, 'ca.crt'),
      };
      writeFileSync(files.certFile, a.certPem);
      writeFileSync(files.keyFile, a.keyPem);
      writeFileSync(files.clientCAFile, clientCA.certPem);
    });
    afterEach(() => {
      rmSync(dir, { recursive: true, force: true });
    });

    const load = async (
      clock = new FakeClock(),
    ): Promise<{
      tls: ReloadingServerTls;
      logger: CapturingLogger;
      registry: Registry;
    }> => {
      const logger = new CapturingLogger();
      const registry = newRegistry();
      const tls = await ReloadingServerTls.load(files, {
        clock,
        logger,
        metrics: autoscalerMetrics(registry),
      });
      return { tls, logger, registry };
    };

    it('refuses to start with files that cannot serve, naming the problem', async () => {
      writeFileSync(files.keyFile, b.keyPem);
      let err: unknown;
      try {
        await load();
      } catch (e) {
        err = e;
      }
      expect((err as Error | undefined)?.message).to.match(/does not belong to the key/);
    });

    it('keeps the current set through a broken change (logged once, counted once), then takes the repaired set and its expiry', async () => {
      const { tls, logger, registry } = await load();
      const expiry = 'mcm_autoscaler_grpc_server_certificate_expiry_timestamp_seconds';
      expect(await metricValue(registry, expiry)).to.equal(
        Date.parse(new X509Certificate(a.certPem).validTo) / 1000,
      );
      expect(await tls.reload()).to.equal('unchanged');

      writeFileSync(files.certFile, b.certPem);
      expect(await tls.reload()).to.equal('rejected');
      expect(await tls.reload()).to.equal('rejected');
      expect(tls.current().server.sha256).to.equal(new X509Certificate(a.certPem).fingerprint256);
      const warnings = logger.lines.filter((l) => l.level === 'warn');
      expect(warnings).to.have.length(1);
      expect(warnings[0]?.fields.problem).to.match(/does not belong to the key/);
      expect(
        await metricValue(registry, 'mcm_autoscaler_grpc_tls_reloads_total', { result: 'failure' }),
      ).to.equal(1);

      writeFileSync(files.keyFile, b.keyPem);
      expect(await tls.reload()).to.equal('reloaded');
      expect(tls.current().server.sha256).to.equal(new X509Certificate(b.certPem).fingerprint256);
      expect(
        await metricValue(registry, 'mcm_autoscaler_grpc_tls_reloads_total', { result: 'success' }),
      ).to.equal(1);
      expect(await metricValue(registry, expiry)).to.equal(
        Date.parse(new X509Certificate(b.certPem).validTo) / 1000,
      );
      const info = logger.lines.filter((l) => l.level === 'info');
      expect(info.map((l) => l.fields.changed)).to.deep.equal([['certificate', 'key']]);
      expect(JSON.stringify(logger.lines)).to.not.contain('PRIVATE KEY');

      // The same problem coming back after a good set is news again.
      writeFileSync(files.keyFile, a.keyPem);
      expect(await tls.reload()).to.equal('rejected');
      expect(logger.lines.filter((l) => l.level === 'warn')).to.have.length(2);
    });

    it('a changed client CA bundle alone is a reload', async () => {
      const { tls, logger } = await load();
      writeFileSync(files.clientCAFile, clientCA.certPem + ca.certPem);
      expect(await tls.reload()).to.equal('reloaded');
      expect(tls.current().clientCAs).to.have.length(2);
      expect(logger.lines.find((l) => l.level === 'info')?.fields.changed).to.deep.equal(['client CA']);
    });

    it('follows the files once started (a file event or the minute’s re-check) and no longer after stop()', async () => {
      const clock = new FakeClock();
      const { tls } = await load(clock);
      const fingerprintOf = (c: CertKey): string => new X509Certificate(c.certPem).fingerprint256;
      tls.start();
      try {
        writeFileSync(files.certFile, b.certPem);
        writeFileSync(files.keyFile, b.keyPem);
        await clock.advance(60_000);
        await eventually(() => tls.current().server.sha256 === fingerprintOf(b), 'the new set in use');
      } finally {
        tls.stop();
      }
      writeFileSync(files.certFile, a.certPem);
      writeFileSync(files.keyFile, a.keyPem);
      await clock.advance(120_000);
      expect(await tls.reload()).to.equal('unchanged');
      expect(tls.current().server.sha256).to.equal(fingerprintOf(b));
    });
  });
});
