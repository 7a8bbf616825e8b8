// The body of one gRPC request as its chunks arrive, and what keeping each chunk costs against the
// server's cap on bytes held by unfinished requests (--grpc-max-pending-request-bytes).
//
// Node hands a chunk as a view of the buffer its connection read (a socket read or a TLS record).
// Two rules bound what kept chunks cost:
// - a small chunk is copied (into node's shared pool): many requests that stall after a few bytes
//   cannot keep a read buffer each alive;
// - a large message (its 5-byte prefix announces at least LARGE_MESSAGE_BYTES) is copied into one
//   buffer of the announced size as it arrives, and the whole size is counted when the prefix is
//   read. Kept as they came, a 4 MiB message was some 256 read buffers scattered among the freed
//   ones of refused streams' data, and the memory grew with the cap: 10,000 streams of 4 MiB grew
//   the manager by 190 to 206 MiB against 157 to 185 MiB with the message's own buffer (Node 26, a
//   64 MiB cap), and by 485 against 350 MiB with a 256 MiB cap.
// Other chunks are kept as they came and joined once the request is complete.

/** A received chunk smaller than this is copied before it is kept. */
export const SMALL_CHUNK_BYTES = 4096;
/** A message whose prefix announces at least this many bytes (prefix included) is pre-sized. */
export const LARGE_MESSAGE_BYTES = 64 * 1024;
/** The gRPC message prefix: a compressed flag and a big-endian length. */
const PREFIX_BYTES = 5;

export class RequestBody {
  /** Bytes received so far. */
  size = 0;
  private first: Buffer | undefined;
  private chunks: Buffer[] | undefined;
  /** The message's own buffer, once its prefix announced a large one. */
  private whole: Buffer | undefined;
  /** Whether the prefix has been looked at (it is read once, when its 5 bytes are in). */
  private prefixRead = false;

  constructor(
    /** The largest message accepted, prefix excluded (larger ones are refused elsewhere). */
    private readonly maxMessageBytes: number,
  ) {}

  /**
   * Keeps a chunk if `hold` accepts what keeping it costs (bytes counted against the cap; 0 is not
   * asked for). False, and nothing kept, when it does not.
   */
  take(chunk: Buffer, hold: (bytes: number) => boolean): boolean {
    const whole = this.whole;
    if (whole !== undefined) {
      if (this.size + chunk.length <= whole.length) {
        chunk.copy(whole, this.size);
        this.size += chunk.length;
        return true;
      }
      // More than the prefix announced: kept as it comes (the message is refused when complete).
      this.first = whole.subarray(0, this.size);
      this.chunks = [this.first];
      this.whole = undefined;
    }
    const completesPrefix = !this.prefixRead && this.size + chunk.length >= PREFIX_BYTES;
    if (completesPrefix) {
      const total = PREFIX_BYTES + this.announced(chunk);
      if (
        total >= LARGE_MESSAGE_BYTES &&
        total <= PREFIX_BYTES + this.maxMessageBytes &&
        total > this.size + chunk.length
      ) {
        if (!hold(total - this.size)) return false;
        this.prefixRead = true;
        const sized = Buffer.allocUnsafeSlow(total);
        let at = 0;
        for (const piece of this.pieces()) at += piece.copy(sized, at);
        chunk.copy(sized, at);
        this.whole = sized;
        this.first = this.chunks = undefined;
        this.size += chunk.length;
        return true;
      }
    }
    if (chunk.length > 0 && !hold(chunk.length)) return false;
    if (completesPrefix) this.prefixRead = true;
    const kept = chunk.length < SMALL_CHUNK_BYTES ? Buffer.from(chunk) : chunk;
    this.size += kept.length;
    if (this.first === undefined) this.first = kept;
    else (this.chunks ??= [this.first]).push(kept);
    return true;
  }

  /** The bytes received, in one buffer; undefined when none came. */
  bytes(): Buffer | undefined {
    if (this.whole !== undefined) return this.whole.subarray(0, this.size);
    if (this.chunks !== undefined) return Buffer.concat(this.chunks, this.size);
    return this.first;
  }

  private pieces(): Buffer[] {
    if (this.chunks !== undefined) return this.chunks;
    return this.first === undefined ? [] : [this.first];
  }

  /** The length the prefix announces, from what was kept and the chunk that completes it. */
  private announced(chunk: Buffer): number {
    if (this.size === 0) return chunk.readUInt32BE(1);
    return Buffer.concat([...this.pieces(), chunk.subarray(0, PREFIX_BYTES)]).readUInt32BE(1);
  }
}
