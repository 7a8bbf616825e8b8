import { expect } from 'chai';

import {
  NOTIONAL_RATES,
  notionalPricePerHour,
  podPricePerHour,
  priceOverride,
  windowHours,
  type PricedShape,
} from '../../../lib/autoscaler/pricing.js';
import { decodePodRequests } from '../../../lib/autoscaler/proto.js';
import path from 'node:path';
import protobuf from 'protobufjs';
import { repoRoot } from '../../harness/tools.js';

const GiB = 2 ** 30;
const shapes: PricedShape[] = [
  { group: 'ns/small', pricePerHour: 1, cpu: 2, memory: 4 * GiB },
  { group: 'ns/big', pricePerHour: 3, cpu: 8, memory: 32 * GiB },
];

describe('autoscaler pricing (pure)', () => {
  it('prices a pod at its dominant share of the node that hosts it most cheaply', () => {
    // small: max(1/2, 1/4) * 1 = 0.5; big: max(1/8, 1/32) * 3 = 0.375 → big.
    expect(podPricePerHour({ cpu: 1, memory: GiB }, shapes)).to.equal(0.375);
    // Memory-heavy: small max(0.25, 0.75)*1 = 0.75; big max(1/16, 3/32)*3 = 0.28125.
    expect(podPricePerHour({ cpu: 0.5, memory: 3 * GiB }, shapes)).to.equal(0.28125);
    expect(podPricePerHour({ cpu: 0, memory: 0 }, shapes)).to.equal(0);
  });

  it('prices a pod no node holds at the cheapest rate of its dominant resource, and nothing without shapes', () => {
    expect(podPricePerHour({ cpu: 16, memory: GiB }, shapes)).to.equal(6); // 16/8 * 3 vs 16/2 * 1 = 8
    expect(podPricePerHour({ cpu: 1, memory: GiB }, [])).to.equal(undefined);
  });

  it('prices a size notionally at the per-vCPU and per-GiB rates, so a smaller shape is always cheaper', () => {
    // m5.large's size: 2 × 0.04048 + 8 × 0.004445.
    expect(notionalPricePerHour(2, 8 * GiB)).to.be.closeTo(0.11652, 1e-9);
    expect(notionalPricePerHour(1, 0)).to.equal(NOTIONAL_RATES.perVcpuHour);
    expect(notionalPricePerHour(0, GiB)).to.equal(NOTIONAL_RATES.perGiBHour);
    expect(notionalPricePerHour(0, 0)).to.equal(undefined);
    expect(notionalPricePerHour(-1, Number.NaN)).to.equal(undefined);
    const small = notionalPricePerHour(2, 4 * GiB) ?? Infinity;
    expect(small).to.be.below(notionalPricePerHour(2, 8 * GiB) ?? 0);
    expect(small).to.be.below(notionalPricePerHour(4, 4 * GiB) ?? 0);
  });

  it('reads the price-per-hour annotation: a decimal >= 0, empty is unset, anything else a problem', () => {
    expect(priceOverride('0.096', 'x')).to.deep.include({ pricePerHour: 0.096 });
    expect(priceOverride('0', 'x')).to.deep.include({ pricePerHour: 0 });
    expect(priceOverride('', 'x')).to.equal(undefined);
    expect(priceOverride(undefined, 'x')).to.equal(undefined);
    expect(priceOverride('-1', 'MachineClass c'))
      .to.have.property('problem')
      .that.matches(/on MachineClass c: "-1"/);
    expect(priceOverride('1$', 'x')).to.have.property('problem');
  });

  it('measures the window in hours and refuses one that ends before it starts or lacks an end', () => {
    expect(windowHours(0, 3_600_000)).to.equal(1);
    expect(windowHours(0, 900_000)).to.equal(0.25);
    expect(windowHours(10, 5)).to.equal(undefined);
    expect(windowHours(0, Number.NaN)).to.equal(undefined);
  });

  it("sums a pod's containers and sidecars, takes a larger init container, and adds the overhead", () => {
    const type = protobuf
      .loadSync(path.join(repoRoot, 'protos', 'k8s-pod.proto'))
      .lookupType('k8s.io.api.core.v1.Pod');
    const req = (cpu: string, memory: string): unknown => ({
      resources: { requests: { cpu: { string: cpu }, memory: { string: memory } } },
    });
    const bytes = type
      .encode(
        type.fromObject({
          metadata: { name: 'web', namespace: 'shop' },
          spec: {
            containers: [req('250m', '256Mi'), req('750m', '256Mi')],
            initContainers: [
              { ...(req('100m', '1Gi') as object), restartPolicy: 'Always' },
              req('2', '64Mi'),
            ],
            overhead: { cpu: { string: '100m' }, memory: { string: '10Mi' } },
          },
        }),
      )
      .finish();
    const pod = decodePodRequests(bytes);
    expect(pod.name).to.equal('shop/web');
    expect(pod.cpu).to.be.closeTo(2.1, 1e-9); // max(1 + 0.1, 2) + 0.1
    expect(pod.memory).to.equal((256 + 256 + 1024 + 10) * 2 ** 20); // max(1.5Gi, 64Mi) + 10Mi
  });
});

describe('autoscaler request logging', () => {
  it('logs a pod price request without the pod (only its size)', async () => {
    const { loggable } = await import('../../../lib/autoscaler/server.js');
    const secret = Buffer.from('env PASSWORD=hunter2');
    const out = JSON.stringify(
      loggable({ pod_bytes: secret, pod: Buffer.alloc(0), startTimestamp: { seconds: 1 } }),
    );
    expect(out).to.not.include('hunter2');
    expect(out).to.not.include(String(secret[0]));
    expect(out).to.include('<20 bytes>');
    expect(loggable({ id: 'a/b' })).to.deep.equal({ id: 'a/b' });
  });
});
