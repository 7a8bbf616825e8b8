// The gRPC transport's limits against raw HTTP/2 clients (node:http2): what one misbehaving
// client can hold, how long a request may take to arrive, keepalive enforcement, connection idle
// and age limits, and compression as the gRPC spec has it.

import http2 from 'node:http2';
import net from 'node:net';
import { gzipSync } from 'node:zlib';

import { status } from '@grpc/grpc-js';
import { expect } from 'chai';

import {
  GrpcServer,
  OPEN_REQUEST_COST,
  type GrpcServerLimits,
  type UnaryCall,
} from '../../../lib/autoscaler/grpc.js';
import { cloudProviderService } from '../../../lib/autoscaler/proto.js';
import { grpcFrame as frame } from '../../harness/grpcclient.js';

const CLOUD = '/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider';
const MiB = 1024 * 1024;

interface Answer {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  /** grpc-status, from the trailers or a trailers-only response. */
  code: number;
  message: string;
  /** The RST_STREAM code when the stream was reset instead of answered. */
  rstCode?: number;
}

/** A request on an open session; `body` is written, and the stream ended unless `end` is false. */
function request(
  session: http2.ClientHttp2Session,
  path: string,
  body: Buffer,
  opts: { headers?: http2.OutgoingHttpHeaders; end?: boolean } = {},
): { stream: http2.ClientHttp2Stream; answer: Promise<Answer> } {
  const stream = session.request({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...opts.headers,
  });
  const answer = new Promise<Answer>((resolve) => {
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (headers = h));
    stream.on('trailers', (t: http2.IncomingHttpHeaders) => (trailers = t));
    stream.on('data', () => undefined);
    stream.on('error', () => undefined);
    // Answered when the response ends (the server's END_STREAM) or the stream closes (a reset),
    // whichever comes first: a client still sending keeps its stream open after the answer.
    let done = false;
    const settle = (): void => {
      if (done) return;
      done = true;
      const code = Number(trailers['grpc-status'] ?? headers['grpc-status'] ?? Number.NaN);
      const message = decodeURIComponent(String(trailers['grpc-message'] ?? headers['grpc-message'] ?? ''));
      resolve({
        headers,
        trailers,
        code,
        message,
        ...(Number.isNaN(code) ? { rstCode: stream.rstCode } : {}),
      });
    };
    stream.on('end', settle);
    stream.on('close', settle);
  });
  stream.write(body);
  if (opts.end !== false) stream.end();
  return { stream, answer };
}

const connect = (port: number): Promise<http2.ClientHttp2Session> =>
  new Promise((resolve, reject) => {
    const s = http2.connect(`http://127.0.0.1:${port}`);
    s.once('connect', () => {
      resolve(s);
    });
    s.once('error', reject);
  });

/** An HTTP/2 frame: 9-byte header (length, type, flags, stream id) and payload. */
function h2frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/** A header block of literal fields without indexing (HPACK, no Huffman; names and values < 127 bytes). */
function hpack(headers: [string, string][]): Buffer {
  const parts: Buffer[] = [];
  for (const [n, v] of headers)
    parts.push(Buffer.from([0, n.length]), Buffer.from(n), Buffer.from([v.length]), Buffer.from(v));
  return Buffer.concat(parts);
}

/**
 * A raw HTTP/2 client that ignores the server's SETTINGS: opens `streams` request streams at once
 * (headers only, bodies never sent) and resolves with the RST_STREAM codes the server sent, by
 * stream id, once `resets` of them came (or after 5 s).
 */
function rawStreams(
  port: number,
  path: string,
  streams: number,
  resets: number,
): Promise<Map<number, number>> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const got = new Map<number, number>();
    const done = (): void => {
      clearTimeout(timer);
      sock.destroy();
      resolve(got);
    };
    const timer = setTimeout(done, 5_000);
    let buf = Buffer.alloc(0);
    sock.on('error', reject);
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3);
        if (buf.length < 9 + len) break;
        const type = buf[3];
        const id = buf.readUInt32BE(5) & 0x7fffffff;
        if (type === 0x3) got.set(id, buf.readUInt32BE(9));
        // SETTINGS without ACK: acknowledge it, as a client must.
        if (type === 0x4 && (buf[4] ?? 0) === 0) sock.write(h2frame(0x4, 0x1, 0, Buffer.alloc(0)));
        buf = buf.subarray(9 + len);
      }
      if (got.size >= resets) done();
    });
    sock.on('connect', () => {
      const out: Buffer[] = [
        Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
        h2frame(0x4, 0, 0, Buffer.alloc(0)),
      ];
      const block = hpack([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', path],
        [':authority', 'localhost'],
        ['content-type', 'application/grpc'],
      ]);
      // END_HEADERS only: the request bodies never come.
      for (let i = 0; i < streams; i++) out.push(h2frame(0x1, 0x4, 1 + 2 * i, block));
      sock.write(Buffer.concat(out));
    });
  });
}

/** Waits until cond() holds (polling every 5 ms), failing with `what` after 5 s. */
async function eventually(what: string, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The GOAWAY a session receives (its code and debug text), or undefined by `ms`. */
function goaway(
  session: http2.ClientHttp2Session,
  ms: number,
): Promise<{ code: number; debug: string } | undefined> {
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      resolve(undefined);
    }, ms);
    session.once('goaway', (code: number, _last: number, data?: Buffer) => {
      clearTimeout(t);
      resolve({ code, debug: data?.toString() ?? '' });
    });
  });
}

const ping = (session: http2.ClientHttp2Session): Promise<void> =>
  new Promise((resolve, reject) => {
    session.ping((err) => {
      err === null ? resolve() : reject(err);
    });
  });

describe('autoscaler gRPC transport: limits against a misbehaving client', () => {
  let server: GrpcServer;
  let port: number;
  let sessions: http2.ClientHttp2Session[];
  let held: UnaryCall[];

  async function start(limits: Partial<GrpcServerLimits> = {}, refuse = false): Promise<void> {
    held = [];
    server = new GrpcServer(
      limits,
      refuse
        ? (path) =>
            path.endsWith('/Refresh')
              ? { code: status.PERMISSION_DENIED, details: 'not on the allowlist' }
              : undefined
        : undefined,
    );
    server.addService(cloudProviderService(), {
      Refresh: (call: UnaryCall) => {
        call.answer({});
      },
      NodeGroupForNode: (call: UnaryCall) => {
        const req = call.request as { node?: { name?: string } };
        call.answer({ nodeGroup: { id: String(req.node?.name?.length ?? 0) } });
      },
      // Held until the test answers it.
      NodeGroupIncreaseSize: (call: UnaryCall) => {
        held.push(call);
      },
    });
    port = await server.listen('127.0.0.1:0', undefined);
  }

  const session = async (): Promise<http2.ClientHttp2Session> => {
    const s = await connect(port);
    s.on('error', () => undefined);
    sessions.push(s);
    return s;
  };

  beforeEach(() => {
    sessions = [];
  });

  afterEach(async () => {
    for (const s of sessions) s.destroy();
    await server.shutdown(100);
  });

  it('tells clients the concurrent stream limit and refuses the streams beyond it (REFUSED_STREAM), holding nothing for them', async () => {
    await start({ maxConcurrentStreams: 2, requestReadTimeoutMs: 5_000 });
    const s = await session();
    // The server's SETTINGS arrive after the connection's preface.
    await ping(s);
    expect(s.remoteSettings.maxConcurrentStreams).to.equal(2);
    // node's client queues streams beyond the setting; a raw client that ignores it opens 5.
    const resets = await rawStreams(port, `${CLOUD}/Refresh`, 5, 3);
    expect([...resets.entries()].sort()).to.deep.equal([
      [5, http2.constants.NGHTTP2_REFUSED_STREAM],
      [7, http2.constants.NGHTTP2_REFUSED_STREAM],
      [9, http2.constants.NGHTTP2_REFUSED_STREAM],
    ]);
    await eventually('nothing held', () => server.pendingRequestBytes === 0);
  });

  it('answers RESOURCE_EXHAUSTED to a request beyond the bytes all unfinished requests may hold, and releases them all', async () => {
    await start({ maxPendingRequestBytes: 100_000 });
    const s = await session();
    const big = frame(
      cloudProviderService().NodeGroupForNode?.requestSerialize({ node: { name: 'n'.repeat(70_000) } }) ??
        Buffer.alloc(0),
    );
    const first = request(s, `${CLOUD}/NodeGroupForNode`, big.subarray(0, 70_000), { end: false });
    // An unfinished request holds its open stream's cost and, once the prefix of a large message
    // is in, the whole message it announced (its own buffer, filled as the bytes arrive).
    await eventually(
      `${big.length} bytes held`,
      () => server.pendingRequestBytes === OPEN_REQUEST_COST + big.length,
    );
    const second = request(s, `${CLOUD}/Refresh`, frame(Buffer.alloc(40_000)));
    const refused = await second.answer;
    expect(refused.code).to.equal(status.RESOURCE_EXHAUSTED);
    expect(refused.message).to.include('--grpc-max-pending-request-bytes');
    // The first completes: its last bytes are within the cap again.
    first.stream.end(big.subarray(70_000));
    expect((await first.answer).code).to.equal(status.OK);
    expect(server.pendingRequestBytes).to.equal(0);
    // A client that goes away mid-request leaves nothing held either.
    const gone = request(s, `${CLOUD}/Refresh`, Buffer.alloc(50_000), { end: false });
    await eventually('50,000 bytes held', () => server.pendingRequestBytes === OPEN_REQUEST_COST + 50_000);
    gone.stream.close(http2.constants.NGHTTP2_CANCEL);
    await gone.answer;
    await eventually('nothing held', () => server.pendingRequestBytes === 0);
  });

  it('counts open streams against the cap: stalled requests without a byte of body are refused past it', async () => {
    await start({ maxPendingRequestBytes: 4 * OPEN_REQUEST_COST });
    const s = await session();
    const stalled = [1, 2, 3, 4].map(() => request(s, `${CLOUD}/Refresh`, Buffer.alloc(0), { end: false }));
    await eventually('four open requests held', () => server.pendingRequestBytes === 4 * OPEN_REQUEST_COST);
    const fifth = await request(s, `${CLOUD}/Refresh`, Buffer.alloc(0), { end: false }).answer;
    expect(fifth.code).to.equal(status.RESOURCE_EXHAUSTED);
    for (const r of stalled) r.stream.close(http2.constants.NGHTTP2_CANCEL);
    await Promise.all(stalled.map((r) => r.answer));
    await eventually('nothing held', () => server.pendingRequestBytes === 0);
  });

  it("past the cap, still takes a connection's requests within its share of it (the cap over the connections): one client cannot starve another's calls", async () => {
    await start({ maxPendingRequestBytes: 200_000 });
    const flooder = await session();
    const other = await session();
    // The flooder holds nearly the whole cap over its connection: 195,000 bytes in two requests,
    // so that the open stream of any other request is past the cap.
    const floods = [0, 1].map(() =>
      request(flooder, `${CLOUD}/Refresh`, Buffer.alloc(97_500 - OPEN_REQUEST_COST), { end: false }),
    );
    await eventually('the flooder holds 195,000 bytes', () => server.pendingRequestBytes === 195_000);
    // Its next request is over the cap and over its share (100,000 of 2 connections): refused.
    const refused = await request(flooder, `${CLOUD}/Refresh`, Buffer.alloc(30_000), { end: false }).answer;
    expect(refused.code).to.equal(status.RESOURCE_EXHAUSTED);
    // The other connection's call, also past the cap, is within its share: answered.
    const r = request(other, `${CLOUD}/NodeGroupForNode`, frame(Buffer.alloc(0)));
    expect((await r.answer).code).to.equal(status.OK);
    for (const f of floods) f.stream.close(http2.constants.NGHTTP2_CANCEL);
    await Promise.all(floods.map((f) => f.answer));
    await eventually('nothing held', () => server.pendingRequestBytes === 0);
  });

  it('answers what is not gRPC as grpc-go: another content type 415 with INVALID_ARGUMENT, another method 405 with INTERNAL', async () => {
    await start();
    const s = await session();
    const json = await request(s, `${CLOUD}/Refresh`, Buffer.from('{}'), {
      headers: { 'content-type': 'application/json' },
    }).answer;
    expect([json.headers[':status'], json.code]).to.deep.equal([415, status.INVALID_ARGUMENT]);
    const stream = s.request({
      ':method': 'GET',
      ':path': `${CLOUD}/Refresh`,
      'content-type': 'application/grpc',
    });
    const got = await new Promise<http2.IncomingHttpHeaders>((resolve) => {
      stream.on('response', resolve);
    });
    stream.destroy();
    expect([got[':status'], Number(got['grpc-status'])]).to.deep.equal([405, status.INTERNAL]);
  });

  it('counts the deadline from the headers: a stalled body is answered DEADLINE_EXCEEDED at its grpc-timeout', async () => {
    await start();
    const s = await session();
    const before = Date.now();
    const stalled = request(s, `${CLOUD}/Refresh`, frame(Buffer.alloc(10)).subarray(0, 3), {
      headers: { 'grpc-timeout': '200m' },
      end: false,
    });
    const a = await stalled.answer;
    const took = Date.now() - before;
    expect(a.code).to.equal(status.DEADLINE_EXCEEDED);
    expect(took).to.be.within(190, 2_000);
    expect(server.pendingRequestBytes).to.equal(0);
  });

  it('answers a request without grpc-timeout that is not complete within the read timeout DEADLINE_EXCEEDED', async () => {
    await start({ requestReadTimeoutMs: 200 });
    const s = await session();
    const before = Date.now();
    const stalled = request(s, `${CLOUD}/Refresh`, Buffer.alloc(2), { end: false });
    const a = await stalled.answer;
    expect(a.code).to.equal(status.DEADLINE_EXCEEDED);
    expect(a.message).to.equal('the request was not complete 200 ms after its headers');
    expect(Date.now() - before).to.be.within(190, 2_000);
    // A complete request is not bound by it: a held call waits for its handler past 200 ms.
    const call = request(s, `${CLOUD}/NodeGroupIncreaseSize`, frame(Buffer.alloc(0)));
    let settled = false;
    void call.answer.then(() => (settled = true));
    await eventually('the call held', () => held.length === 1);
    await sleep(400);
    expect(settled, 'answered before its handler did').to.equal(false);
    held[0]?.answer({});
    expect((await call.answer).code).to.equal(status.OK);
  });

  it('does not fire a grpc-timeout beyond what a Node.js timer holds (~24.8 days) at once', async () => {
    await start();
    const s = await session();
    // 99,999,999 hours: a timer with that delay would fire after 1 ms.
    const call = request(s, `${CLOUD}/NodeGroupIncreaseSize`, frame(Buffer.alloc(0)), {
      headers: { 'grpc-timeout': '99999999H' },
    });
    let settled = false;
    void call.answer.then(() => (settled = true));
    await eventually('the call held', () => held.length === 1);
    await sleep(200);
    expect(settled, 'answered before its handler did').to.equal(false);
    held[0]?.answer({});
    expect((await call.answer).code).to.equal(status.OK);
  });

  it('refuses a client the allowlist refuses when its stream opens, before its body is read', async () => {
    await start({}, true);
    const s = await session();
    // Headers and a first chunk only: the answer must not wait for the rest.
    const r = request(s, `${CLOUD}/Refresh`, Buffer.alloc(1000), { end: false });
    const a = await r.answer;
    expect(a.code).to.equal(status.PERMISSION_DENIED);
    expect(server.pendingRequestBytes).to.equal(0);
  });

  it('closes a connection that floods pings with GOAWAY ENHANCE_YOUR_CALM "too_many_pings", as grpc-go', async () => {
    await start({ keepaliveMinTimeMs: 60_000 });
    const s = await session();
    const away = goaway(s, 3_000);
    for (let i = 0; i < 4; i++) await ping(s).catch(() => undefined);
    const g = await away;
    expect(g).to.deep.equal({ code: http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, debug: 'too_many_pings' });
  });

  it('takes pings with calls between them (as a client measuring bandwidth sends), and pings as far apart as the policy asks', async () => {
    await start({ keepaliveMinTimeMs: 100, keepalivePermitWithoutStream: true });
    const s = await session();
    const away = goaway(s, 1_500);
    for (let i = 0; i < 5; i++) {
      await ping(s);
      expect((await request(s, `${CLOUD}/Refresh`, frame(Buffer.alloc(0))).answer).code).to.equal(status.OK);
    }
    for (let i = 0; i < 4; i++) {
      await sleep(120);
      await ping(s);
    }
    expect(await away).to.equal(undefined);
  });

  it('tells a connection without calls for --grpc-max-connection-idle to go away, never one with a call under way', async () => {
    await start({ maxConnectionIdleMs: 300 });
    const busy = await session();
    const call = request(busy, `${CLOUD}/NodeGroupIncreaseSize`, frame(Buffer.alloc(0)));
    const busyAway = goaway(busy, 700);
    const idle = await session();
    const g = await goaway(idle, 2_000);
    expect(g).to.deep.equal({ code: http2.constants.NGHTTP2_NO_ERROR, debug: 'max_idle' });
    expect(await busyAway, 'the connection with a call under way').to.equal(undefined);
    held[0]?.answer({});
    expect((await call.answer).code).to.equal(status.OK);
  });

  it('tells a connection older than --grpc-max-connection-age to go away, and closes it after the grace', async () => {
    await start({ maxConnectionAgeMs: 200, maxConnectionAgeGraceMs: 200 });
    const s = await session();
    const call = request(s, `${CLOUD}/NodeGroupIncreaseSize`, frame(Buffer.alloc(0)));
    const g = await goaway(s, 2_000);
    expect(g).to.deep.equal({ code: http2.constants.NGHTTP2_NO_ERROR, debug: 'max_age' });
    // The held call is cut when the grace ends.
    const a = await call.answer;
    expect(a.code).to.not.equal(status.OK);
    await eventually('the connection closed', () => server.connectionCount === 0);
  });

  it('compression as the spec has it: an unknown grpc-encoding on an uncompressed message is read; a compressed one is UNIMPLEMENTED with grpc-accept-encoding; one that inflates past 4 MiB is RESOURCE_EXHAUSTED', async () => {
    await start();
    const s = await session();
    const plain = await request(s, `${CLOUD}/Refresh`, frame(Buffer.alloc(0)), {
      headers: { 'grpc-encoding': 'snappy' },
    }).answer;
    expect(plain.code).to.equal(status.OK);
    const compressed = await request(s, `${CLOUD}/Refresh`, frame(Buffer.from('x'), true), {
      headers: { 'grpc-encoding': 'snappy' },
    }).answer;
    expect(compressed.code).to.equal(status.UNIMPLEMENTED);
    expect(compressed.headers['grpc-accept-encoding']).to.equal('identity,deflate,gzip');
    const bomb = await request(s, `${CLOUD}/Refresh`, frame(gzipSync(Buffer.alloc(5 * MiB)), true), {
      headers: { 'grpc-encoding': 'gzip' },
    }).answer;
    expect(bomb.code).to.equal(status.RESOURCE_EXHAUSTED);
    // The connection still serves.
    expect((await request(s, `${CLOUD}/Refresh`, frame(Buffer.alloc(0))).answer).code).to.equal(status.OK);
  });
});
