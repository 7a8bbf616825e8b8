/**
 * The externalgrpc server's mutual TLS at the process boundary: certificate files rotated on disk
 * (as the kubelet swaps a Secret volume after cert-manager renews it) are served without a
 * restart and without a failed call, a broken rotation is ignored, and --grpc-client-allowed-names
 * refuses client certificates of the right CA but the wrong name. Real TLS over loopback and real
 * file watches; the machine API behind the server is an in-memory fake (these calls do not need
 * machines).
 */
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';

import {
  credentials,
  makeGenericClientConstructor,
  status,
  type ChannelCredentials,
  type ServiceError,
} from '@grpc/grpc-js';
import { expect } from 'chai';

import { healthService } from '../../lib/autoscaler/proto.js';
import { AutoscalerServer } from '../../lib/autoscaler/server.js';
import { SharedInformers } from '../../lib/controllers/context.js';
import { RealClock } from '../../lib/kube/clock.js';
import { CapturingLogger } from '../../lib/observability/logger.js';
import { newRegistry, type Registry } from '../../lib/observability/metrics.js';
import { FakeKube } from '../fakes/kube.js';
import { createCA, issueCertificate, type CertKey, type CertificateAuthority } from '../harness/certs.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { metricValue } from '../harness/metrics.js';
import { SecretVolume } from '../harness/secretvolume.js';
import { until } from './env/until.js';

const serverCert = (ca: CertificateAuthority): CertKey =>
  issueCertificate(ca, {
    commonName: 'mcm-grpc',
    dnsNames: ['localhost'],
    ips: ['127.0.0.1'],
    usages: ['server'],
  });
const clientCert = (ca: CertificateAuthority, commonName = 'cluster-autoscaler'): CertKey =>
  issueCertificate(ca, { commonName, usages: ['client'] });
const fingerprint = (c: CertKey): string => new X509Certificate(c.certPem).fingerprint256;

interface Running {
  server: AutoscalerServer;
  logger: CapturingLogger;
  registry: Registry;
  informers: SharedInformers;
  address: string;
}

async function startServer(
  files: { certFile: string; keyFile: string; clientCAFile: string },
  allowedClientNames: string[] = [],
): Promise<Running> {
  const api = new FakeKube();
  const logger = new CapturingLogger();
  const registry = newRegistry();
  const informers = new SharedInformers({ client: api, target: api, namespace: 'default', logger });
  informers.start();
  await informers.waitForSync();
  const server = new AutoscalerServer({
    address: '127.0.0.1:0',
    tls: { ...files, allowedClientNames },
    groups: [],
    gpuLabel: '',
    gpuTypes: [],
    namespace: 'default',
    client: api,
    informers,
    clock: new RealClock(),
    logger,
    registry,
    unhealthy: () => undefined,
  });
  await server.start();
  return { server, logger, registry, informers, address: `127.0.0.1:${server.port}` };
}

async function stopServer(r: Running | undefined): Promise<void> {
  await r?.server.stop(1000);
  await r?.informers.stop();
}

function clientCreds(trusted: CertificateAuthority[], id: CertKey): ChannelCredentials {
  return credentials.createSsl(
    Buffer.from(trusted.map((c) => c.certPem).join('')),
    Buffer.from(id.keyPem),
    Buffer.from(id.certPem),
  );
}

/** A client on its own connection (no subchannel shared with other clients of the test). */
function newClient(address: string, trusted: CertificateAuthority[], id: CertKey): CloudProviderClient {
  return cloudProviderClient(address, clientCreds(trusted, id), {
    'grpc.use_local_subchannel_pool': 1,
    'grpc.ssl_target_name_override': 'localhost',
  });
}

/** The fingerprint of the certificate the server presents to a new connection. */
function presentedCertificate(port: number, trusted: CertificateAuthority[], id: CertKey): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect(
      {
        host: '127.0.0.1',
        port,
        servername: 'localhost',
        ca: trusted.map((c) => c.certPem),
        cert: id.certPem,
        key: id.keyPem,
        ALPNProtocols: ['h2'],
      },
      () => {
        resolve(socket.getPeerCertificate().fingerprint256);
        socket.end();
      },
    );
    socket.on('error', reject);
  });
}

/**
 * Calls NodeGroups back to back until stopped: over one connection, or (fresh) over a new
 * connection each time, so that handshakes happen throughout a swap.
 */
interface CallLoop {
  calls: () => number;
  stop: () => Promise<{ ok: number; failures: string[] }>;
}

/** Loops still running; afterEach stops them, so a failed assertion leaves none behind. */
const loops: CallLoop[] = [];

function callContinuously(connect: () => CloudProviderClient, fresh: boolean): CallLoop {
  const state = { stopped: false };
  let ok = 0;
  const failures: string[] = [];
  const loop = (async () => {
    let client = connect();
    while (!state.stopped) {
      try {
        await client.call('NodeGroups');
        ok++;
      } catch (err) {
        failures.push(String(err));
      }
      if (fresh) {
        client.close();
        client = connect();
      }
    }
    client.close();
  })();
  const handle: CallLoop = {
    calls: () => ok + failures.length,
    stop: async () => {
      state.stopped = true;
      await loop;
      return { ok, failures };
    },
  };
  loops.push(handle);
  return handle;
}

/**
 * Runs swap while two clients call back to back (one on its open connection, one on a new
 * connection per call), and asserts that none of their calls failed before, during or after it.
 */
async function expectNoFailedCallAcross(
  connect: () => CloudProviderClient,
  swap: () => Promise<void>,
): Promise<void> {
  const steady = callContinuously(connect, false);
  const fresh = callContinuously(connect, true);
  await until('calls before the swap', () => steady.calls() > 20 && fresh.calls() > 5, 10_000);
  await swap();
  const [steadyAt, freshAt] = [steady.calls(), fresh.calls()];
  await until(
    'calls after the swap',
    () => steady.calls() > steadyAt + 20 && fresh.calls() > freshAt + 5,
    10_000,
  );
  const [s, f] = [await steady.stop(), await fresh.stop()];
  expect(s.failures, 'calls on the open connection').to.deep.equal([]);
  expect(f.failures, 'calls on new connections').to.deep.equal([]);
}

async function expectCode(p: Promise<unknown>, code: status): Promise<string> {
  try {
    await p;
  } catch (err) {
    expect(grpcCode(err), String(err)).to.equal(code);
    return (err as ServiceError).details;
  }
  expect.fail(`expected gRPC status ${status[code]}`);
}

describe('autoscaler externalgrpc server: certificate rotation and client allowlist (real TLS, real files)', function () {
  this.timeout(60_000);
  let dir: string;
  let running: Running | undefined;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'mcm-grpc-tls-'));
  });

  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.stop()));
    await stopServer(running);
    running = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves a renewed server certificate (same CA) to new connections without a restart, and no call fails during the swap', async () => {
    const ca = createCA('grpc-ca');
    const [a, b] = [serverCert(ca), serverCert(ca)];
    const me = clientCert(ca);
    const vol = new SecretVolume(dir);
    vol.write({ 'tls.crt': a.certPem, 'tls.key': a.keyPem, 'ca.crt': ca.certPem });
    running = await startServer({
      certFile: vol.path('tls.crt'),
      keyFile: vol.path('tls.key'),
      clientCAFile: vol.path('ca.crt'),
    });
    const { address, server, registry, logger } = running;
    expect(await presentedCertificate(server.port, [ca], me)).to.equal(fingerprint(a));

    await expectNoFailedCallAcross(
      () => newClient(address, [ca], me),
      async () => {
        vol.write({ 'tls.crt': b.certPem, 'tls.key': b.keyPem, 'ca.crt': ca.certPem });
        await until(
          'the renewed certificate on a new connection',
          async () => (await presentedCertificate(server.port, [ca], me)) === fingerprint(b),
          10_000,
        );
      },
    );

    expect(
      await metricValue(registry, 'mcm_autoscaler_grpc_server_certificate_expiry_timestamp_seconds'),
    ).to.equal(Date.parse(new X509Certificate(b.certPem).validTo) / 1000);
    expect(
      await metricValue(registry, 'mcm_autoscaler_grpc_tls_reloads_total', { result: 'success' }),
    ).to.equal(1);
    const reloads = logger.lines.filter((l) => l.msg.startsWith('reloaded the gRPC TLS files'));
    expect(reloads).to.have.length(1);
    expect(reloads[0]?.level).to.equal('info');
    expect(reloads[0]?.fields.changed).to.deep.equal(['certificate', 'key']);
    expect(JSON.stringify(reloads[0]?.fields)).to.contain(fingerprint(b));
    const everything = JSON.stringify(logger.lines);
    expect(everything).to.not.contain('PRIVATE KEY');
    expect(everything).to.not.contain(b.keyPem.split('\n')[1]);
  });

  it('rotates to a new CA: clients trusting both during the overlap never fail, a client of the new CA connects without a restart, one trusting only the old CA no longer does', async () => {
    const [ca1, ca2] = [createCA('grpc-ca-1'), createCA('grpc-ca-2')];
    const [s1, s2] = [serverCert(ca1), serverCert(ca2)];
    const [c1, c2] = [clientCert(ca1), clientCert(ca2)];
    const vol = new SecretVolume(dir);
    vol.write({ 'tls.crt': s1.certPem, 'tls.key': s1.keyPem, 'ca.crt': ca1.certPem });
    running = await startServer({
      certFile: vol.path('tls.crt'),
      keyFile: vol.path('tls.key'),
      clientCAFile: vol.path('ca.crt'),
    });
    const { address, server } = running;
    // The autoscaler's side was updated first: it trusts both CAs and still has its old certificate.
    await expectNoFailedCallAcross(
      () => newClient(address, [ca1, ca2], c1),
      async () => {
        // The overlap: the server certificate comes from the new CA, clients of either CA are accepted.
        vol.write({ 'tls.crt': s2.certPem, 'tls.key': s2.keyPem, 'ca.crt': ca1.certPem + ca2.certPem });
        const newOnly = newClient(address, [ca2], c2);
        try {
          await until(
            'a client of the new CA served',
            () => newOnly.call('NodeGroups').then(() => true),
            10_000,
          );
        } finally {
          newOnly.close();
        }
      },
    );

    const oldOnly = newClient(address, [ca1], c1);
    try {
      await expectCode(oldOnly.call('NodeGroups'), status.UNAVAILABLE);
    } finally {
      oldOnly.close();
    }

    // The overlap ends: only the new CA's clients are accepted.
    vol.write({ 'tls.crt': s2.certPem, 'tls.key': s2.keyPem, 'ca.crt': ca2.certPem });
    await until(
      'a client of the old CA refused at the handshake',
      async () => {
        const old = newClient(address, [ca2], c1);
        try {
          await old.call('NodeGroups');
          return false;
        } catch (err) {
          return grpcCode(err) === status.UNAVAILABLE;
        } finally {
          old.close();
        }
      },
      10_000,
    );
    expect(await presentedCertificate(server.port, [ca2], c2)).to.equal(fingerprint(s2));
  });

  it('ignores a half-written rotation (new certificate, old key) with a warning, keeps serving the old certificate, and takes the set once it is complete', async () => {
    const ca = createCA('grpc-ca');
    const [a, b] = [serverCert(ca), serverCert(ca)];
    const me = clientCert(ca);
    // Plain files rewritten in place, one after the other (no atomic swap).
    const files = {
      certFile: path.join(dir, 'tls.crt'),
      keyFile: path.join(dir, 'tls.key'),
      clientCAFile: path.join(dir, 'ca.crt'),
    };
    writeFileSync(files.certFile, a.certPem);
    writeFileSync(files.keyFile, a.keyPem, { mode: 0o600 });
    writeFileSync(files.clientCAFile, ca.certPem);
    running = await startServer(files);
    const { address, server, registry, logger } = running;

    writeFileSync(files.certFile, b.certPem);
    const refused = await until(
      'the half-written set refused',
      () => logger.lines.find((l) => l.msg.includes('cannot be used')),
      10_000,
    );
    expect(refused.level).to.equal('warn');
    expect(String(refused.fields.problem)).to.contain('does not belong to the key');
    expect(await presentedCertificate(server.port, [ca], me)).to.equal(fingerprint(a));
    const client = newClient(address, [ca], me);
    try {
      await client.call('NodeGroups');
    } finally {
      client.close();
    }
    expect(
      await metricValue(registry, 'mcm_autoscaler_grpc_tls_reloads_total', { result: 'failure' }),
    ).to.equal(1);

    writeFileSync(files.keyFile, b.keyPem, { mode: 0o600 });
    await until(
      'the completed set served',
      async () => (await presentedCertificate(server.port, [ca], me)) === fingerprint(b),
      10_000,
    );
  });

  it('--grpc-client-allowed-names: a client certificate of the same CA with another name gets PERMISSION_DENIED (counted, logged once), the allowed one is served, health stays open', async () => {
    const ca = createCA('grpc-ca');
    const server = serverCert(ca);
    const vol = new SecretVolume(dir);
    vol.write({ 'tls.crt': server.certPem, 'tls.key': server.keyPem, 'ca.crt': ca.certPem });
    running = await startServer(
      { certFile: vol.path('tls.crt'), keyFile: vol.path('tls.key'), clientCAFile: vol.path('ca.crt') },
      ['cluster-autoscaler'],
    );
    const { address, registry, logger } = running;
    const allowed = newClient(address, [ca], clientCert(ca, 'cluster-autoscaler'));
    const intruderCert = clientCert(ca, 'intruder');
    const intruder = newClient(address, [ca], intruderCert);
    try {
      expect((await allowed.call('NodeGroups')).nodeGroups).to.deep.equal([]);
      for (let i = 0; i < 5; i++) {
        const details = await expectCode(intruder.call('NodeGroups'), status.PERMISSION_DENIED);
        expect(details).to.contain('CN="intruder"');
        expect(details).to.not.contain('cluster-autoscaler');
      }
      await expectCode(
        intruder.call('NodeGroupDeleteNodes', { id: 'default/workers', nodes: [{ name: 'n1' }] }),
        status.PERMISSION_DENIED,
      );
      expect(
        await metricValue(registry, 'mcm_autoscaler_grpc_requests_total', {
          method: 'NodeGroups',
          code: 'PERMISSION_DENIED',
        }),
      ).to.equal(5);
      expect(
        await metricValue(registry, 'mcm_autoscaler_grpc_requests_total', {
          method: 'NodeGroupDeleteNodes',
          code: 'PERMISSION_DENIED',
        }),
      ).to.equal(1);
      expect(
        await metricValue(registry, 'mcm_autoscaler_grpc_requests_total', {
          method: 'NodeGroups',
          code: 'OK',
        }),
      ).to.equal(1);
      const lines = logger.lines.filter((l) => l.msg.startsWith('autoscaler client refused'));
      expect(lines).to.have.length(1);
      expect(lines[0]?.level).to.equal('info');
      expect(lines[0]?.fields.client).to.equal('CN="intruder"');

      const Health = makeGenericClientConstructor(healthService(), 'Health');
      const health = new Health(address, clientCreds([ca], intruderCert), {
        'grpc.ssl_target_name_override': 'localhost',
      }) as unknown as {
        Check(req: unknown, cb: (err: ServiceError | null, res: { status: string }) => void): void;
        close(): void;
      };
      try {
        const res = await new Promise<{ status: string }>((resolve, reject) => {
          health.Check({ service: '' }, (err, r) => {
            if (err === null) resolve(r);
            else reject(err);
          });
        });
        expect(res.status).to.equal('SERVING');
      } finally {
        health.close();
      }
    } finally {
      allowed.close();
      intruder.close();
    }
  });
});
