import { expect } from 'chai';
import { Counter, Histogram, Registry } from 'prom-client';

import { autoscalerMetrics, callRecorder } from '../../../lib/autoscaler/metrics.js';
import { newRegistry } from '../../../lib/observability/metrics.js';

/** Sample lines of the two request metrics, labels sorted, so that label order does not matter. */
async function samples(registry: Registry): Promise<string[]> {
  const text = await registry.metrics();
  return text
    .split('\n')
    .filter((l) => l.startsWith('mcm_autoscaler_grpc_request'))
    .map((l) => {
      const m = /^([^{ ]+)(?:\{(.*)\})? (.+)$/.exec(l);
      const labels = (m?.[2] ?? '')
        .split(',')
        .filter((x) => x !== '')
        .sort()
        .join(',');
      return `${m?.[1] ?? l}{${labels}} ${m?.[3] ?? ''}`;
    })
    .sort();
}

/** prom-client's own Counter and Histogram with the same names, labels and buckets. */
function reference(): {
  registry: Registry;
  record: (method: string, code: string, seconds: number) => void;
} {
  const registry = new Registry();
  const requests = new Counter({
    name: 'mcm_autoscaler_grpc_requests_total',
    help: 'cluster-autoscaler externalgrpc calls served, by method and gRPC status code name.',
    labelNames: ['method', 'code'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'mcm_autoscaler_grpc_request_duration_seconds',
    help: 'Latency of cluster-autoscaler externalgrpc calls by method.',
    labelNames: ['method'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  return {
    registry,
    record: (method, code, seconds) => {
      requests.inc({ method, code });
      duration.observe({ method }, seconds);
    },
  };
}

const CALLS: [string, string, number][] = [
  ['NodeGroupForNode', 'OK', 0.0002],
  ['NodeGroupForNode', 'OK', 0.0005],
  ['NodeGroupForNode', 'NOT_FOUND', 0.003],
  ['NodeGroupGetOptions', 'UNIMPLEMENTED', 0.0001],
  ['NodeGroupIncreaseSize', 'OK', 0.7],
  ['NodeGroupIncreaseSize', 'DEADLINE_EXCEEDED', 9],
  ['NodeGroupForNode', 'OK', 5],
];

describe('autoscaler call metrics', () => {
  it('export the same request counter and duration histogram as prom-client would, across scrapes', async () => {
    const ours = newRegistry();
    const metrics = autoscalerMetrics(ours);
    const recorders = new Map<string, ReturnType<typeof callRecorder>>();
    const ref = reference();
    const play = (calls: [string, string, number][]): void => {
      for (const [method, code, seconds] of calls) {
        let r = recorders.get(method);
        if (r === undefined) {
          r = callRecorder(metrics, method);
          recorders.set(method, r);
        }
        r.record(code, seconds);
        ref.record(method, code, seconds);
      }
    };
    play(CALLS.slice(0, 4));
    expect(await samples(ours)).to.deep.equal(await samples(ref.registry));
    // A second scrape after more calls counts each call once.
    play(CALLS.slice(4));
    expect(await samples(ours)).to.deep.equal(await samples(ref.registry));
    expect(await samples(ours)).to.include(
      'mcm_autoscaler_grpc_requests_total{code="OK",method="NodeGroupForNode"} 3',
    );
  });

  it('start from zero after a registry reset', async () => {
    const ours = newRegistry();
    const r = callRecorder(autoscalerMetrics(ours), 'NodeGroupForNode');
    r.record('OK', 0.001);
    ours.resetMetrics();
    r.record('OK', 0.001);
    const lines = await samples(ours);
    expect(lines).to.include('mcm_autoscaler_grpc_requests_total{code="OK",method="NodeGroupForNode"} 1');
    expect(lines).to.include(
      'mcm_autoscaler_grpc_request_duration_seconds_count{method="NodeGroupForNode"} 1',
    );
  });
});
