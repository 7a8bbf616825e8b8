/**
 * The gRPC edge suite's parts (test/grpc-edge, built by `bash hack/tools.sh grpc-edge`): the stock
 * grpc-go server, our server as the real command (`node dist/cmd/manager.js` with mutual TLS and an
 * allowlist, against a harness control plane), and the grpc-go client that plays one case against
 * either; used by test/integration/grpc-edge.test.ts and `npm run bench grpc-flood`.
 */
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { NODE_FLAGS } from '../../lib/runtime.js';
import { createMtlsBundle, issueCertificate, writeMtlsBundle, type MtlsFiles } from './certs.js';
import type { ControlPlane } from './controlplane.js';
import { ManagedProcess, freePort, waitUntil } from './process.js';
import { grpcEdgeBinary, repoRoot } from './tools.js';

const run = promisify(execFile);

/** A client's certificate and key files. */
export interface ClientCert {
  cert: string;
  key: string;
}

/** The certificates of a run: the server's, an allowed client's and a client not on the allowlist. */
export interface EdgeCerts {
  files: MtlsFiles;
  allowed: ClientCert;
  intruder: ClientCert;
}

/** The client name our server allows (--grpc-client-allowed-names). */
export const ALLOWED_CLIENT = 'cluster-autoscaler';

export function writeEdgeCerts(dir: string): EdgeCerts {
  const bundle = createMtlsBundle({ clientName: ALLOWED_CLIENT });
  const files = writeMtlsBundle(dir, bundle);
  // Signed by the same CA, so the TLS handshake succeeds; a name not on the allowlist.
  const other = issueCertificate(bundle.ca, { commonName: 'intruder', usages: ['client'] });
  const intruder = writeMtlsBundle(path.join(dir, 'intruder'), { ...bundle, client: other });
  return {
    files,
    allowed: { cert: files.clientCertFile, key: files.clientKeyFile },
    intruder: { cert: intruder.clientCertFile, key: intruder.clientKeyFile },
  };
}

/** A server under test. */
export interface EdgeServer {
  name: string;
  address: string;
  pid: number;
  stop: () => Promise<void>;
}

/** One case's output (cases.go): the answer is compared, the figures recorded. */
export interface CaseResult {
  case: string;
  answer: Record<string, unknown>;
  figures: Record<string, unknown>;
}

/** The grpc-edge binary, or an error naming the command that builds it. */
export function edgeBinary(): string {
  const bin = grpcEdgeBinary();
  if ('missing' in bin) throw new Error(bin.missing);
  return bin.path;
}

/** The stock grpc-go server (server.go), mutual TLS, 100 streams per connection as ours. */
export async function startGrpcGo(dir: string, certs: EdgeCerts): Promise<EdgeServer> {
  const port = await freePort();
  const logFile = path.join(dir, 'grpc-go.log');
  const proc = new ManagedProcess({
    name: 'grpc-go reference server',
    command: edgeBinary(),
    args: [
      'serve',
      `--address=127.0.0.1:${port}`,
      `--tls-cert=${certs.files.serverCertFile}`,
      `--tls-key=${certs.files.serverKeyFile}`,
      `--client-ca=${certs.files.caFile}`,
    ],
    logFile,
  });
  proc.start();
  await waitUntil(
    'the grpc-go server listening',
    () => Promise.resolve(readFileSync(logFile, 'utf8').includes('listening on')),
    { timeoutMs: 10_000, process: proc },
  );
  return { name: 'grpc-go', address: `127.0.0.1:${port}`, pid: proc.pid ?? 0, stop: () => proc.stop() };
}

/**
 * Our server: the manager command as the image starts it (NODE_FLAGS), mutual TLS, the allowlist,
 * and `extraFlags` (e.g. a shorter --grpc-request-read-timeout).
 */
export async function startOurs(
  cp: ControlPlane,
  dir: string,
  certs: EdgeCerts,
  extraFlags: string[] = [],
): Promise<EdgeServer> {
  const port = await freePort();
  const metricsPort = await freePort();
  const proc = new ManagedProcess({
    name: 'machine-controller-manager',
    command: process.execPath,
    args: [
      ...NODE_FLAGS,
      path.join(repoRoot, 'dist', 'cmd', 'manager.js'),
      `--control-kubeconfig=${cp.kubeconfigPath}`,
      '--namespace=default',
      '--leader-elect=false',
      '--address=127.0.0.1',
      `--port=${metricsPort}`,
      `--grpc-address=127.0.0.1:${port}`,
      `--grpc-tls-cert-file=${certs.files.serverCertFile}`,
      `--grpc-tls-key-file=${certs.files.serverKeyFile}`,
      `--grpc-client-ca-file=${certs.files.caFile}`,
      `--grpc-client-allowed-names=${ALLOWED_CLIENT}`,
      ...extraFlags,
    ],
    logFile: path.join(dir, 'manager.log'),
  });
  proc.start();
  await waitUntil(
    'our manager ready',
    async () => (await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).status === 200,
    { timeoutMs: 60_000, process: proc },
  );
  return { name: 'ours', address: `127.0.0.1:${port}`, pid: proc.pid ?? 0, stop: () => proc.stop() };
}

/** Plays one case (cases.go) against a server with a client certificate. */
export async function playCase(
  server: EdgeServer,
  name: string,
  certs: EdgeCerts,
  flags: string[] = [],
  client: ClientCert = certs.allowed,
): Promise<CaseResult> {
  const { stdout } = await run(
    edgeBinary(),
    [
      'run',
      `--case=${name}`,
      `--target=${server.address}`,
      `--cert=${client.cert}`,
      `--key=${client.key}`,
      `--ca=${certs.files.caFile}`,
      ...flags,
    ],
    { timeout: 150_000, maxBuffer: 16 * 1024 * 1024 },
  );
  const line = stdout.trim().split('\n').pop() ?? '';
  return JSON.parse(line) as CaseResult;
}

/** Resident memory of a process, MiB. */
export function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? Number.NaN) / 1024;
}

export function openFiles(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** The flood case (10,000 streams of 4 MiB by default) with the server's RSS sampled every 50 ms. */
export async function flood(
  server: EdgeServer,
  certs: EdgeCerts,
  flags: string[],
): Promise<{ result: CaseResult; rssBefore: number; rssPeak: number }> {
  const rssBefore = rssMiB(server.pid);
  let rssPeak = rssBefore;
  const sampler = setInterval(() => {
    rssPeak = Math.max(rssPeak, rssMiB(server.pid));
  }, 50);
  try {
    const result = await playCase(server, 'flood', certs, flags);
    rssPeak = Math.max(rssPeak, rssMiB(server.pid));
    return { result, rssBefore, rssPeak };
  } finally {
    clearInterval(sampler);
  }
}
