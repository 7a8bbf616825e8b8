// NodeGroupGetOptions on the wire, for every autoscaler version from 1.33: the request is read
// without a full decode (the autoscaler sends it for every node in every loop, and only the id
// and the defaults' bytes matter until a group has options of its own), and the answer carries the
// durations both as the 1.35+ google.protobuf.Duration fields and as the metav1.Duration fields
// that 1.33 and 1.34 read.

import { encodeResponse, decodeOptionsMessage } from './proto.js';
import type { WireOptions } from './options.js';

/** What the server needs of a NodeGroupAutoscalingOptionsRequest. */
export interface GetOptionsRequest {
  id: string;
  /** The encoded `defaults` message (empty when the autoscaler sent none). */
  defaults: Buffer;
}

const EMPTY: Buffer = Buffer.alloc(0);

function varint(buf: Buffer, at: number): [value: number, next: number] {
  let value = 0;
  let shift = 0;
  let i = at;
  for (;;) {
    if (i >= buf.length) throw new RangeError('truncated varint');
    const b = buf[i++] ?? 0;
    value += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return [value, i];
    shift += 7;
    if (shift > 63) throw new RangeError('varint too long');
  }
}

/** Reads field 1 (id) and field 2 (defaults) and skips anything else; throws on malformed bytes. */
export function readGetOptionsRequest(buf: Buffer): GetOptionsRequest {
  let id = '';
  let defaults: Buffer = EMPTY;
  let i = 0;
  while (i < buf.length) {
    const [tag, afterTag] = varint(buf, i);
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    i = afterTag;
    if (wire === 0) {
      i = varint(buf, i)[1];
    } else if (wire === 1) {
      i += 8;
    } else if (wire === 5) {
      i += 4;
    } else if (wire === 2) {
      const [len, start] = varint(buf, i);
      const end = start + len;
      if (end > buf.length) throw new RangeError('truncated field');
      if (field === 1) id = buf.toString('utf8', start, end);
      else if (field === 2) defaults = buf.subarray(start, end);
      i = end;
    } else {
      throw new RangeError(`unsupported wire type ${wire}`);
    }
    if (i > buf.length) throw new RangeError('truncated field');
  }
  return { id, defaults };
}

interface DurationLike {
  seconds?: number;
  nanos?: number;
}

const nsOf = (d: DurationLike | null | undefined): number | undefined =>
  d === null || d === undefined ? undefined : (d.seconds ?? 0) * 1e9 + (d.nanos ?? 0);

/**
 * The defaults the autoscaler sent: the 1.35+ Duration fields first, else the metav1.Duration
 * ones (1.33 sends only those; 1.34 both).
 */
export function decodeDefaults(bytes: Buffer): WireOptions {
  const m = decodeOptionsMessage(bytes);
  const legacy = (v: unknown): number | undefined => {
    const d = v as { duration?: number } | null | undefined;
    return d === null || d === undefined ? undefined : (d.duration ?? 0);
  };
  return {
    scaleDownUtilizationThreshold: Number(m.scaleDownUtilizationThreshold ?? 0),
    scaleDownGpuUtilizationThreshold: Number(m.scaleDownGpuUtilizationThreshold ?? 0),
    zeroOrMaxNodeScaling: m.zeroOrMaxNodeScaling === true,
    ignoreDaemonSetsUtilization: m.ignoreDaemonSetsUtilization === true,
    scaleDownUnneededNs:
      nsOf(m.scaleDownUnneededDuration as DurationLike) ?? legacy(m.scaleDownUnneededTime) ?? 0,
    scaleDownUnreadyNs:
      nsOf(m.scaleDownUnreadyDuration as DurationLike) ?? legacy(m.scaleDownUnreadyTime) ?? 0,
    maxNodeProvisionNs:
      nsOf(m.MaxNodeProvisionDuration as DurationLike) ?? legacy(m.MaxNodeProvisionTime) ?? 0,
  };
}

const duration = (ns: number): { seconds: number; nanos: number } => ({
  seconds: Math.floor(ns / 1e9),
  nanos: Math.round(ns % 1e9),
});

/** The answer to NodeGroupGetOptions: no options (the autoscaler's defaults apply) or these. */
export function encodeGetOptionsResponse(options: WireOptions | undefined): Buffer {
  if (options === undefined) return EMPTY;
  return encodeResponse('NodeGroupGetOptions', {
    nodeGroupAutoscalingOptions: {
      scaleDownUtilizationThreshold: options.scaleDownUtilizationThreshold,
      scaleDownGpuUtilizationThreshold: options.scaleDownGpuUtilizationThreshold,
      zeroOrMaxNodeScaling: options.zeroOrMaxNodeScaling,
      ignoreDaemonSetsUtilization: options.ignoreDaemonSetsUtilization,
      scaleDownUnneededTime: { duration: options.scaleDownUnneededNs },
      scaleDownUnreadyTime: { duration: options.scaleDownUnreadyNs },
      MaxNodeProvisionTime: { duration: options.maxNodeProvisionNs },
      scaleDownUnneededDuration: duration(options.scaleDownUnneededNs),
      scaleDownUnreadyDuration: duration(options.scaleDownUnreadyNs),
      MaxNodeProvisionDuration: duration(options.maxNodeProvisionNs),
    },
  });
}
