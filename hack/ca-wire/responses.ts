// The answers hack/ca-wire.sh gives each cluster-autoscaler version's client, encoded by the
// server's own encoders. test/unit/autoscaler/wire-versions.test.ts encodes them again and compares
// them with test/fixtures/externalgrpc/<version>/responses/*.bin: while they are equal, what the
// Go clients read back (read-back.json) is what they would read from our server today.

import { writeFileSync } from 'node:fs';
import path from 'node:path';

import { encodeGetOptionsResponse } from '../../lib/autoscaler/options-wire.js';
import type { WireOptions } from '../../lib/autoscaler/options.js';
import { encodeResponse } from '../../lib/autoscaler/proto.js';

/**
 * The group's options in the GetOptions answer: each differs from the defaults the generator sends
 * (0.5, 0.6, 10m, 20m, 15m, false, true) or is an unmistakable value, so a client that read the
 * defaults, or the wrong field, shows in read-back.json.
 */
export const ANSWERED_OPTIONS: WireOptions = {
  scaleDownUtilizationThreshold: 0.3,
  scaleDownGpuUtilizationThreshold: 0.6,
  zeroOrMaxNodeScaling: false,
  ignoreDaemonSetsUtilization: true,
  scaleDownUnneededNs: 10e9,
  scaleDownUnreadyNs: 1200e9,
  maxNodeProvisionNs: 900e9,
};

export const ANSWERED_PRICE = 1.5;

/** The one node group the generator's client sees. */
export const ANSWERED_GROUP = { id: 'ns/workers', minSize: 0, maxSize: 10 };

/** The encoded answer of each method the generator calls, by method name. */
export function caWireResponses(): Record<string, Buffer> {
  return {
    NodeGroups: encodeResponse('NodeGroups', { nodeGroups: [ANSWERED_GROUP] }),
    PricingNodePrice: encodeResponse('PricingNodePrice', { price: ANSWERED_PRICE }),
    PricingPodPrice: encodeResponse('PricingPodPrice', { price: ANSWERED_PRICE }),
    NodeGroupGetOptions: encodeGetOptionsResponse(ANSWERED_OPTIONS),
  };
}

/** Writes <dir>/<Method>.bin for every answer (hack/ca-wire.sh). */
export function writeCaWireResponses(dir: string): void {
  for (const [method, bytes] of Object.entries(caWireResponses())) {
    writeFileSync(path.join(dir, `${method}.bin`), bytes);
  }
}
