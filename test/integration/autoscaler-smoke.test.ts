/**
 * Smoke test of the real cluster-autoscaler builds: every pinned version starts against a real
 * control plane with `--cloud-provider=externalgrpc` and an mTLS cloud-config, reaches a stub
 * externalgrpc server defined here, and runs its loop through it. The stub loads the
 * autoscaler's own externalgrpc.proto (staged by hack/tools.sh from the module cache); the RPCs
 * used here have the same wire form in every pinned version.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { expect } from 'chai';

import { requireAutoscaler, startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle, type MtlsBundle, type MtlsFiles } from '../harness/certs.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { waitUntil } from '../harness/process.js';
import { autoscalerProto, autoscalerVersions } from '../harness/tools.js';

const SERVICE = 'clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider';
const GROUP = { id: 'smoke/workers', minSize: 0, maxSize: 3, debug: 'smoke test group' };

interface Call {
  method: string;
  request: unknown;
  /** Common name of the client certificate the call came with. */
  peerCN: string | undefined;
}

/** Canned answers; every other RPC of the service is answered UNIMPLEMENTED. */
const answers: Record<string, (request: unknown) => unknown> = {
  Refresh: () => ({}),
  Cleanup: () => ({}),
  NodeGroups: () => ({ nodeGroups: [GROUP] }),
  NodeGroupForNode: () => ({ nodeGroup: { id: '' } }),
  NodeGroupTargetSize: () => ({ targetSize: 0 }),
  NodeGroupNodes: () => ({ instances: [] }),
  GPULabel: () => ({ label: '' }),
  GetAvailableGPUTypes: () => ({ gpuTypes: {} }),
};

class StubCloudProvider {
  readonly calls: Call[] = [];
  private readonly server = new grpc.Server();
  port = 0;

  constructor(private readonly bundle: MtlsBundle) {
    const { includeDir, file } = autoscalerProto();
    const definition = protoLoader.loadSync(file, {
      includeDirs: [includeDir],
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
    });
    const service = definition[SERVICE] as grpc.ServiceDefinition | undefined;
    if (service === undefined) throw new Error(`${file} defines no ${SERVICE}`);
    const handlers: grpc.UntypedServiceImplementation = {};
    // Keys are the RPC names as in the .proto (originalName is a camel-cased alias).
    for (const method of Object.keys(service)) {
      handlers[method] = (
        call: grpc.ServerUnaryCall<unknown, unknown>,
        callback: grpc.sendUnaryData<unknown>,
      ) => {
        const name = method;
        const subject = call.getAuthContext().sslPeerCertificate?.subject as
          Record<string, string> | undefined;
        this.calls.push({ method: name, request: call.request, peerCN: subject?.CN });
        const answer = answers[name];
        if (answer === undefined) {
          callback({ code: grpc.status.UNIMPLEMENTED, details: `${name} is not implemented by the stub` });
        } else {
          callback(null, answer(call.request));
        }
      };
    }
    this.server.addService(service, handlers);
  }

  async start(): Promise<void> {
    const creds = grpc.ServerCredentials.createSsl(
      Buffer.from(this.bundle.ca.certPem),
      [
        {
          cert_chain: Buffer.from(this.bundle.server.certPem),
          private_key: Buffer.from(this.bundle.server.keyPem),
        },
      ],
      true,
    );
    this.port = await new Promise<number>((resolve, reject) => {
      this.server.bindAsync('127.0.0.1:0', creds, (err, port) => {
        if (err === null) resolve(port);
        else reject(err);
      });
    });
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.server.tryShutdown(() => {
        resolve();
      });
    });
  }
}

describe('cluster-autoscaler smoke: real binaries against a stub externalgrpc server over mTLS', function () {
  this.timeout(120_000);
  let cp: ControlPlane | undefined;
  let certDir: string | undefined;
  let bundle: MtlsBundle;
  let files: MtlsFiles;

  before(async function () {
    this.timeout(120_000);
    cp = await startControlPlane();
    certDir = mkdtempSync(path.join(tmpdir(), 'mcm-ca-smoke-'));
    bundle = createMtlsBundle();
    files = writeMtlsBundle(certDir, bundle);
  });

  after(async () => {
    await cp?.stop();
    if (certDir !== undefined) rmSync(certDir, { recursive: true, force: true });
  });

  for (const version of autoscalerVersions()) {
    it(`cluster-autoscaler ${version} dials the server with its client certificate, runs Refresh and NodeGroups every loop, serves metrics, and calls Cleanup on SIGTERM`, async function () {
      requireAutoscaler(version);
      if (cp === undefined) throw new Error('no control plane');
      const started = Date.now();
      const stub = new StubCloudProvider(bundle);
      await stub.start();
      let ca: Autoscaler | undefined;
      try {
        ca = await startAutoscaler({
          version,
          controlPlane: cp,
          address: `127.0.0.1:${stub.port}`,
          tls: { certFile: files.clientCertFile, keyFile: files.clientKeyFile, caFile: files.caFile },
          grpcTimeout: '5s',
          verbosity: 4,
        });
        await ca.waitForLog(new RegExp(`Cluster Autoscaler ${version.replace(/\./g, '\\.')}\\b`), {
          timeoutMs: 5000,
        });
        // Two loops (scan interval 1 s) prove the connection is kept and the loop runs on it.
        await waitUntil(
          `cluster-autoscaler ${version}: two loops through the stub`,
          () => Promise.resolve(stub.count('Refresh') >= 2 && stub.count('NodeGroups') >= 2),
          { timeoutMs: 25_000, intervalMs: 100 },
        );
        expect(stub.calls.map((c) => c.peerCN)).to.satisfy((cns: (string | undefined)[]) =>
          cns.every((cn) => cn === 'cluster-autoscaler'),
        );
        const targetSizeCalls = stub.calls.filter((c) => c.method === 'NodeGroupTargetSize');
        for (const c of targetSizeCalls) expect(c.request).to.deep.include({ id: GROUP.id });

        // The metrics endpoint (--address) serves the autoscaler's own series.
        expect(await ca.metrics()).to.match(/^cluster_autoscaler_last_activity\{activity="main"\} /m);

        const before = stub.count('Cleanup');
        await ca.stop(10_000);
        expect(ca.running).to.equal(false);
        expect(stub.count('Cleanup'), 'Cleanup after SIGTERM').to.equal(before + 1);
        const methods = [...new Set(stub.calls.map((c) => c.method))].sort();
        console.log(
          `      cluster-autoscaler ${version}: ${stub.calls.length} calls (${methods.join(', ')}) in ${((Date.now() - started) / 1000).toFixed(1)} s`,
        );
      } catch (err) {
        if (ca !== undefined) {
          const tail = ca.log().split('\n').slice(-40).join('\n');
          throw new Error(
            `${err instanceof Error ? err.message : String(err)}\n--- ${ca.logFile} (tail)\n${tail}`,
            { cause: err },
          );
        }
        throw err;
      } finally {
        await ca?.stop(5000);
        await stub.stop();
      }
    });
  }
});
