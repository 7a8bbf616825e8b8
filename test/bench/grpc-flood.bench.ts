// A client with a valid certificate floods the autoscaler's gRPC server: 10,000 streams over 100
// connections, each sending a 4 MiB message it never ends (test/grpc-edge, case "flood"), while
// another client makes a small call every 10 ms. Measured: the server's resident memory (sampled
// every 50 ms) and the other client's latency. Ours is the real manager (`node dist/cmd/manager.js`
// as the image starts it, mutual TLS, the default --grpc-max-pending-request-bytes of 64 MiB);
// the stock grpc-go server has no such cap (a stream's message is read as it arrives), so it runs
// the same flood at BENCH_FLOOD_GO_STREAMS streams only (default 250: 1 GiB would already be read),
// ours too at that size for the comparison. Last, a fresh manager takes 10,000 streams of 100
// bytes: what node's HTTP/2 holds for the open streams themselves. The integration suite asserts
// the memory bound and that every other call succeeds (test/integration/grpc-edge.test.ts); the
// latency is measured here.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';

import { DEFAULT_GRPC_LIMITS, OPEN_REQUEST_COST } from '../../lib/autoscaler/grpc.js';
import { startControlPlane } from '../harness/controlplane.js';
import { flood, startGrpcGo, startOurs, writeEdgeCerts, type EdgeServer } from '../harness/grpcedge.js';
import { repoRoot } from '../harness/tools.js';
import { markdownTable, printTable } from './table.js';

const MIB = 1024 * 1024;
/** What each flood stream sends (test/grpc-edge's default): just under the 4 MiB message limit. */
const FLOOD_BYTES = 4 * MIB - 1024;

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');

export async function benchGrpcFlood(): Promise<void> {
  const runs = Number(process.env.BENCH_FLOOD_RUNS ?? 3);
  const streams = Number(process.env.BENCH_FLOOD_STREAMS ?? 10_000);
  const goStreams = Number(process.env.BENCH_FLOOD_GO_STREAMS ?? 250);
  const dir = mkdtempSync(path.join(tmpdir(), 'mcm-grpc-flood-'));
  const certs = writeEdgeCerts(dir);
  const cp = await startControlPlane({ installCRDs: true });
  const servers: EdgeServer[] = [];
  const rows: (string | number)[][] = [];
  const loadBefore = load();
  try {
    const ours = await startOurs(cp, dir, certs);
    servers.push(ours);
    const grpcGo = await startGrpcGo(dir, certs);
    servers.push(grpcGo);
    // [server, streams, bytes each stream sends]; a fresh manager last, for what the open streams
    // themselves cost (messages of 100 bytes: the cap then holds some 6,500 streams open).
    const plan: [() => Promise<EdgeServer>, number, number][] = [];
    const started = (s: EdgeServer) => () => Promise.resolve(s);
    for (let i = 0; i < runs; i++) plan.push([started(ours), streams, FLOOD_BYTES]);
    plan.push([started(ours), goStreams, FLOOD_BYTES], [started(grpcGo), goStreams, FLOOD_BYTES]);
    plan.push([
      async () => {
        await ours.stop();
        const fresh = await startOurs(cp, dir, certs);
        servers.push(fresh);
        return fresh;
      },
      streams,
      100,
    ]);
    for (const [serverOf, n, bytes] of plan) {
      const server = await serverOf();
      const { result, rssBefore, rssPeak } = await flood(server, certs, [
        `--streams=${n}`,
        `--connections=${Math.max(1, Math.ceil(n / 100))}`,
        `--stream-bytes=${bytes}`,
        '--stream-deadline=15s',
      ]);
      const f = result.figures as {
        otherClientCalls?: Record<string, number>;
        other_p50_ms?: number;
        other_p99_ms?: number;
        other_max_ms?: number;
        streamCodes?: Record<string, number>;
        seconds?: number;
      };
      const calls = Object.values(f.otherClientCalls ?? {}).reduce((a, b) => a + b, 0);
      const failed = calls - (f.otherClientCalls?.OK ?? 0);
      rows.push([
        server.name,
        n,
        bytes === FLOOD_BYTES ? '4 MiB' : `${bytes} B`,
        Math.round(rssBefore),
        Math.round(rssPeak),
        Math.round(rssPeak - rssBefore),
        calls,
        failed,
        f.other_p50_ms ?? Number.NaN,
        f.other_p99_ms ?? Number.NaN,
        f.other_max_ms ?? Number.NaN,
        Object.entries(f.streamCodes ?? {})
          .map(([k, v]) => `${k} ${v}`)
          .join(', '),
      ]);
    }
  } finally {
    for (const s of servers) await s.stop();
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const header = [
    'server',
    'streams',
    'message',
    'RSS before (MiB)',
    'RSS peak (MiB)',
    'growth (MiB)',
    'other calls',
    'failed',
    'p50 (ms)',
    'p99 (ms)',
    'max (ms)',
    'the flood streams ended',
  ];
  const title = `gRPC flood: streams never ended, over connections of 100 streams, and another client's call every 10 ms (cap ${DEFAULT_GRPC_LIMITS.maxPendingRequestBytes / MIB} MiB; ${cpus().length} CPUs, load average ${loadBefore} before)`;
  printTable(title, header, rows);
  const out = path.join(repoRoot, 'test', 'bench', 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(
    path.join(out, 'grpc-flood.md'),
    [
      '# gRPC flood: the autoscaler server against a client that opens streams and never ends them',
      '',
      `Written by \`npm run bench grpc-flood\` (test/bench/grpc-flood.bench.ts) on ${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs, load average ${loadBefore} (1 / 5 / 15 min) before and ${load()} after.`,
      '',
      `The flooding client (test/grpc-edge, case "flood", grpc-go) and the other client run in one process on the same machine as the server. Ours: the manager command with its default limits (\`--grpc-max-pending-request-bytes\` 64 MiB, 100 streams per connection). grpc-go: the stock server of the conformance suite, which has no cap on what unfinished requests hold, at a size this machine survives. The last row is a fresh manager flooded with streams of 100 bytes: the cap then holds some ${Math.floor(DEFAULT_GRPC_LIMITS.maxPendingRequestBytes / OPEN_REQUEST_COST)} streams open (${OPEN_REQUEST_COST / 1024} KiB each), so its growth is what node's HTTP/2 holds for the open streams and their connections.`,
      '',
      markdownTable(header, rows),
      '',
    ].join('\n'),
  );
}
