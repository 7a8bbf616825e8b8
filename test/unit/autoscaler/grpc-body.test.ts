// RequestBody: how a gRPC request's chunks are kept, and what each costs against the server's cap.

import { expect } from 'chai';

import { LARGE_MESSAGE_BYTES, RequestBody, SMALL_CHUNK_BYTES } from '../../../lib/autoscaler/grpc-body.js';

const MAX = 4 * 1024 * 1024;

/** A gRPC frame: uncompressed flag, big-endian length, a message of `length` bytes of `fill`. */
function frame(length: number, fill = 7): Buffer {
  const out = Buffer.alloc(5 + length, fill);
  out[0] = 0;
  out.writeUInt32BE(length, 1);
  return out;
}

/** Chunks of `size` bytes, each a view of a larger read buffer (as node hands them). */
function chunksOf(bytes: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) {
    const piece = bytes.subarray(at, at + size);
    const read = Buffer.alloc(piece.length + 1024);
    piece.copy(read, 512);
    out.push(read.subarray(512, 512 + piece.length));
  }
  return out;
}

/** Takes the chunks until one is refused (as the server stops), recording what each asks to hold. */
function takeAll(
  body: RequestBody,
  chunks: Buffer[],
  refuseAbove = Infinity,
): { asked: number[]; taken: boolean[] } {
  const asked: number[] = [];
  const taken: boolean[] = [];
  let total = 0;
  const hold = (bytes: number): boolean => {
    asked.push(bytes);
    if (total + bytes > refuseAbove) return false;
    total += bytes;
    return true;
  };
  for (const c of chunks) {
    taken.push(body.take(c, hold));
    if (!taken[taken.length - 1]) break;
  }
  return { asked, taken };
}

describe('autoscaler gRPC transport: the request body', () => {
  it('keeps a small message whole and counts its bytes, copying chunks under 4 KiB off their read buffer', () => {
    const message = frame(100);
    const body = new RequestBody(MAX);
    const chunks = chunksOf(message, message.length);
    expect(chunks).to.have.length(1);
    const { asked } = takeAll(body, chunks);
    expect(asked).to.deep.equal([message.length]);
    const bytes = body.bytes();
    expect(bytes).to.deep.equal(message);
    expect(bytes?.buffer).to.not.equal(chunks[0]?.buffer);
    expect(body.size).to.equal(message.length);
  });

  it('counts a large message whole when its prefix is in, then fills its own buffer without asking again', () => {
    const message = frame(200_000);
    const body = new RequestBody(MAX);
    const chunks = chunksOf(message, 16_384);
    const { asked, taken } = takeAll(body, chunks);
    expect(asked).to.deep.equal([message.length]);
    expect(taken.every(Boolean)).to.equal(true);
    const bytes = body.bytes();
    expect(bytes).to.deep.equal(message);
    // Its own buffer: no read buffer of node's (and what else they held) is kept alive.
    for (const c of chunks) expect(bytes?.buffer).to.not.equal(c.buffer);
  });

  it('reads a prefix split over chunks', () => {
    const message = frame(LARGE_MESSAGE_BYTES * 2);
    const body = new RequestBody(MAX);
    const chunks = [
      message.subarray(0, 2),
      message.subarray(2, 3),
      message.subarray(3, 9000),
      message.subarray(9000),
    ];
    const { asked } = takeAll(body, chunks);
    // The first two bytes are counted as they come; the chunk that completes the prefix asks for
    // the rest of the announced message.
    expect(asked).to.deep.equal([2, 1, message.length - 3]);
    expect(body.bytes()).to.deep.equal(message);
  });

  it('keeps what comes beyond the announced message, so that the message is refused when complete', () => {
    const message = frame(100_000);
    const extra = Buffer.alloc(SMALL_CHUNK_BYTES * 2, 9);
    const body = new RequestBody(MAX);
    const { asked } = takeAll(body, [...chunksOf(message, 16_384), extra]);
    expect(asked).to.deep.equal([message.length, extra.length]);
    expect(body.bytes()).to.deep.equal(Buffer.concat([message, extra]));
  });

  it('keeps nothing of a chunk whose cost is refused', () => {
    const body = new RequestBody(MAX);
    const large = frame(100_000);
    const { taken } = takeAll(body, chunksOf(large, 16_384), 50_000);
    expect(taken[0]).to.equal(false);
    expect(body.size).to.equal(0);
    expect(body.bytes()).to.equal(undefined);
    const small = new RequestBody(MAX);
    const result = takeAll(small, chunksOf(frame(30_000), 10_000), 15_000);
    expect(result.taken).to.deep.equal([true, false]);
    expect(small.size).to.equal(10_000);
  });

  it('does not pre-size a message announced beyond the largest accepted: its bytes are counted as they come', () => {
    const body = new RequestBody(1000);
    const header = frame(0);
    header.writeUInt32BE(5000, 1);
    const { asked } = takeAll(body, [Buffer.concat([header, Buffer.alloc(2000)])]);
    expect(asked).to.deep.equal([2005]);
  });
});
