import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';

import { status } from '@grpc/grpc-js';
import { expect } from 'chai';

import {
  GrpcServer,
  parseGrpcTimeout,
  type ServerStreamCall,
  type UnaryCall,
} from '../../../lib/autoscaler/grpc.js';
import { cloudProviderService, encodeResponse, healthService } from '../../../lib/autoscaler/proto.js';
import { cloudProviderClient, grpcCode, grpcFrame as frame } from '../../harness/grpcclient.js';

const CLOUD = '/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider';
const HEALTH = '/grpc.health.v1.Health';

interface RawResponse {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  messages: Buffer[];
}

/** One HTTP/2 request as a gRPC client would send it, without a client-side deadline. */
function rawCall(
  port: number,
  path: string,
  body: Buffer,
  headers: http2.OutgoingHttpHeaders = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    const out: RawResponse = { headers: {}, trailers: {}, messages: [] };
    const chunks: Buffer[] = [];
    req.on('response', (h) => {
      out.headers = h;
    });
    req.on('trailers', (t: http2.IncomingHttpHeaders) => {
      out.trailers = t;
    });
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', reject);
    req.on('close', () => {
      const all = Buffer.concat(chunks);
      for (let i = 0; i + 5 <= all.length;) {
        const n = all.readUInt32BE(i + 1);
        out.messages.push(all.subarray(i + 5, i + 5 + n));
        i += 5 + n;
      }
      session.close();
      resolve(out);
    });
    req.end(body);
  });
}

/** grpc-status of a response: in the trailers, or in the headers of a trailers-only response. */
const statusOf = (r: RawResponse): number => Number(r.trailers['grpc-status'] ?? r.headers['grpc-status']);

describe('autoscaler gRPC transport (node:http2)', () => {
  let server: GrpcServer;
  let port: number;
  let pending: UnaryCall[];
  let watches: ServerStreamCall[];
  let cancelled: number;

  beforeEach(async () => {
    pending = [];
    watches = [];
    cancelled = 0;
    server = new GrpcServer();
    const targetSize = encodeResponse('NodeGroupTargetSize', { targetSize: 7 });
    server.addService(cloudProviderService(), {
      Refresh: (call: UnaryCall) => {
        call.answer({});
      },
      NodeGroupTargetSize: (call: UnaryCall) => {
        call.answer(targetSize);
      },
      // Echoes the id it was asked about as the group's debug text, with the call's deadline.
      NodeGroupForNode: (call: UnaryCall) => {
        const req = call.request as { node?: { name?: string } };
        call.answer({
          nodeGroup: { id: req.node?.name ?? '', debug: String(call.deadline) },
        });
      },
      NodeGroupTemplateNodeInfo: (call: UnaryCall) => {
        call.fail({ code: status.NOT_FOUND, details: 'no group "ä/b" – 100% gone' });
      },
      NodeGroupIncreaseSize: (call: UnaryCall) => {
        pending.push(call);
      },
      NodeGroupNodes: () => {
        throw new Error('boom');
      },
    });
    server.addService(healthService(), {
      Watch: (call: ServerStreamCall) => {
        watches.push(call);
        call.onCancelled(() => cancelled++);
        call.write({ status: 'SERVING' });
      },
    });
    port = await server.listen('127.0.0.1:0', undefined);
  });

  afterEach(async () => {
    await server.shutdown(100);
  });

  it('answers with the message a handler gives, an encoded Buffer sent as it is', async () => {
    const ca = cloudProviderClient(`127.0.0.1:${port}`);
    try {
      expect(await ca.call('Refresh')).to.deep.equal({});
      expect((await ca.call('NodeGroupTargetSize', { id: 'a/b' })).targetSize).to.equal(7);
      const g = (await ca.call('NodeGroupForNode', { node: { name: 'n1' } }, { deadlineMs: 10_000 }))
        .nodeGroup as { id: string; debug: string };
      expect(g.id).to.equal('n1');
      // The deadline the client set (10 s from the call), in epoch milliseconds.
      expect(Number(g.debug) - Date.now()).to.be.within(8_000, 10_500);
    } finally {
      ca.close();
    }
  });

  it('fails a call with the status and message the handler gave; a handler that throws answers INTERNAL', async () => {
    const ca = cloudProviderClient(`127.0.0.1:${port}`);
    try {
      const err = await ca.call('NodeGroupTemplateNodeInfo', { id: 'a/b' }).catch((e: unknown) => e);
      expect(grpcCode(err)).to.equal(status.NOT_FOUND);
      expect((err as { details: string }).details).to.equal('no group "ä/b" – 100% gone');
      expect(grpcCode(await ca.call('NodeGroupNodes', { id: 'a/b' }).catch((e: unknown) => e))).to.equal(
        status.INTERNAL,
      );
    } finally {
      ca.close();
    }
  });

  it('answers UNIMPLEMENTED for a method it does not serve and 415 for a request that is not gRPC', async () => {
    const ca = cloudProviderClient(`127.0.0.1:${port}`);
    try {
      const err = await ca.call('GPULabel').catch((e: unknown) => e);
      expect(grpcCode(err)).to.equal(status.UNIMPLEMENTED);
    } finally {
      ca.close();
    }
    const r = await rawCall(port, `${CLOUD}/Refresh`, frame(Buffer.alloc(0)), {
      'content-type': 'text/plain',
    });
    expect(r.headers[':status']).to.equal(415);
  });

  it('answers DEADLINE_EXCEEDED once the grpc-timeout has passed without an answer, and drops the late one', async () => {
    const started = Date.now();
    const r = await rawCall(port, `${CLOUD}/NodeGroupIncreaseSize`, frame(Buffer.alloc(0)), {
      'grpc-timeout': '150m',
    });
    expect(statusOf(r)).to.equal(status.DEADLINE_EXCEEDED);
    expect(Date.now() - started).to.be.within(140, 2000);
    expect(pending).to.have.length(1);
    pending[0]?.answer({});
  });

  it('refuses a malformed grpc-timeout (INTERNAL) and a message above 4 MiB (RESOURCE_EXHAUSTED)', async () => {
    const bad = await rawCall(port, `${CLOUD}/Refresh`, frame(Buffer.alloc(0)), { 'grpc-timeout': '1x' });
    expect(statusOf(bad)).to.equal(status.INTERNAL);
    const big = await rawCall(port, `${CLOUD}/Refresh`, frame(Buffer.alloc(4 * 1024 * 1024 + 1)));
    expect(statusOf(big)).to.equal(status.RESOURCE_EXHAUSTED);
  });

  it('reads a gzip-compressed request', async () => {
    const req = cloudProviderService().NodeGroupForNode?.requestSerialize({ node: { name: 'zipped' } });
    const r = await rawCall(
      port,
      `${CLOUD}/NodeGroupForNode`,
      frame(gzipSync(req ?? Buffer.alloc(0)), true),
      {
        'grpc-encoding': 'gzip',
      },
    );
    expect(statusOf(r)).to.equal(status.OK);
    const res = cloudProviderService().NodeGroupForNode?.responseDeserialize(
      r.messages[0] ?? Buffer.alloc(0),
    ) as {
      nodeGroup: { id: string };
    };
    expect(res.nodeGroup.id).to.equal('zipped');
  });

  it("gives handlers the deadline in whole milliseconds, also from a Go client's microseconds", async () => {
    const def = cloudProviderService().NodeGroupForNode;
    const req = def?.requestSerialize({ node: { name: 'go' } }) ?? Buffer.alloc(0);
    const before = Date.now();
    const r = await rawCall(port, `${CLOUD}/NodeGroupForNode`, frame(req), { 'grpc-timeout': '9999873u' });
    const after = Date.now();
    const res = def?.responseDeserialize(r.messages[0] ?? Buffer.alloc(0)) as {
      nodeGroup: { debug: string };
    };
    const deadline = Number(res.nodeGroup.debug);
    expect(Number.isInteger(deadline), res.nodeGroup.debug).to.equal(true);
    // 9999873 µs is 9999 whole ms from when the server read the headers, some time in the call.
    expect(deadline).to.be.within(before + 9999, after + 9999);
  });

  it('streams the messages of a server-streaming call and ends it with OK', async () => {
    const done = rawCall(port, `${HEALTH}/Watch`, frame(Buffer.alloc(0)));
    while (watches.length === 0) await new Promise((r) => setTimeout(r, 5));
    watches[0]?.write({ status: 'NOT_SERVING' });
    watches[0]?.end();
    const r = await done;
    expect(statusOf(r)).to.equal(status.OK);
    const decode = healthService().Watch?.responseDeserialize;
    expect(r.messages.map((m) => (decode?.(m) as { status: string }).status)).to.deep.equal([
      'SERVING',
      'NOT_SERVING',
    ]);
    expect(cancelled).to.equal(0);
  });

  it('tells a server-streaming call that its client went away', async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const req = session.request({
      ':method': 'POST',
      ':path': `${HEALTH}/Watch`,
      'content-type': 'application/grpc',
    });
    req.on('error', () => undefined);
    req.end(frame(Buffer.alloc(0)));
    while (watches.length === 0) await new Promise((r) => setTimeout(r, 5));
    req.close(http2.constants.NGHTTP2_CANCEL);
    while (cancelled === 0) await new Promise((r) => setTimeout(r, 5));
    expect(watches[0]?.cancelled).to.equal(true);
    session.close();
  });

  it('shutdown lets a running call finish before it closes', async () => {
    const ca = cloudProviderClient(`127.0.0.1:${port}`);
    try {
      const call = ca.call('NodeGroupIncreaseSize', { id: 'a/b', delta: 1 });
      while (pending.length === 0) await new Promise((r) => setTimeout(r, 5));
      const stopped = server.shutdown(5000);
      setTimeout(() => pending[0]?.answer({}), 50);
      expect(await call).to.deep.equal({});
      await stopped;
    } finally {
      ca.close();
    }
  });

  it('reads grpc-timeout in every unit as whole milliseconds and refuses what is not 1 to 8 digits and a unit', () => {
    expect(
      ['2H', '3M', '4S', '5m', '6000u', '7000000n', '9999873u', '999n'].map(parseGrpcTimeout),
    ).to.deep.equal([7_200_000, 180_000, 4000, 5, 6, 7, 9999, 0]);
    for (const bad of ['', 'S', '123456789S', '1.5S', '-1S', '10s'])
      expect(parseGrpcTimeout(bad), bad).to.be.NaN;
  });
});
