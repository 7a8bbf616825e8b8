import { Counter, Gauge, Histogram, type LabelValues, type Registry } from 'prom-client';

export interface AutoscalerMetrics {
  requests: Counter<'method' | 'code'>;
  duration: Histogram<'method'>;
  groups: Gauge;
  serverCertificateExpiry: Gauge;
  tlsReloads: Counter<'result'>;
}

const byRegistry = new WeakMap<Registry, AutoscalerMetrics>();

const DURATION = 'mcm_autoscaler_grpc_request_duration_seconds';
const DURATION_HELP = 'Latency of cluster-autoscaler externalgrpc calls by method.';

/** Upper bounds of the duration histogram's buckets (seconds). */
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Per-RPC metrics of the externalgrpc server (one set per registry). */
export function autoscalerMetrics(registry: Registry): AutoscalerMetrics {
  let m = byRegistry.get(registry);
  if (m === undefined) {
    const series = new Map<string, MethodSeries>();
    const created: AutoscalerMetrics = {
      requests: new Counter({
        name: 'mcm_autoscaler_grpc_requests_total',
        help: 'cluster-autoscaler externalgrpc calls served, by method and gRPC status code name.',
        labelNames: ['method', 'code'],
        registers: [registry],
        collect: () => {
          flushCalls(created, series);
        },
      }),
      duration: new CallDurations(series, registry),
      groups: new Gauge({
        name: 'mcm_autoscaler_node_groups',
        help: 'Node groups (MachineDeployments) served to the cluster-autoscaler.',
        registers: [registry],
      }),
      serverCertificateExpiry: new Gauge({
        name: 'mcm_autoscaler_grpc_server_certificate_expiry_timestamp_seconds',
        help: 'When the gRPC server certificate in use expires (Unix time); follows the files as they are reloaded.',
        registers: [registry],
      }),
      tlsReloads: new Counter({
        name: 'mcm_autoscaler_grpc_tls_reloads_total',
        help: 'Changes of the gRPC TLS files: success when taken into use, failure when a changed set could not be used (counted once per problem).',
        labelNames: ['result'],
        registers: [registry],
      }),
    };
    m = created;
    byRegistry.set(registry, m);
    seriesByMetrics.set(m, series);
  }
  return m;
}

/**
 * One method's calls. The autoscaler calls ~20,000 times per loop, so recording stays off
 * prom-client's per-call path (label hashing and validation, an object per observation): counts
 * and bucket counts go into arrays here, and the metrics read them when scraped.
 */
export interface CallRecorder {
  record(code: string, seconds: number): void;
}

interface MethodSeries {
  method: string;
  /** Observations per bucket, not cumulative; the last slot is above the largest bound. */
  buckets: Float64Array;
  sum: number;
  count: number;
  /** Calls by status code name, and how much of each the counter was already given. */
  codes: Map<string, { calls: number; reported: number }>;
}

/** Per-method series behind both request metrics of one metrics set. */
const seriesByMetrics = new WeakMap<AutoscalerMetrics, Map<string, MethodSeries>>();

export function callRecorder(metrics: AutoscalerMetrics, method: string): CallRecorder {
  const all = seriesByMetrics.get(metrics);
  if (all === undefined) throw new Error('callRecorder: metrics not made by autoscalerMetrics()');
  let series = all.get(method);
  if (series === undefined) {
    series = { method, buckets: new Float64Array(BUCKETS.length + 1), sum: 0, count: 0, codes: new Map() };
    all.set(method, series);
  }
  const s = series;
  let ok: { calls: number; reported: number } | undefined;
  return {
    record(code, seconds) {
      let c = code === 'OK' ? ok : s.codes.get(code);
      if (c === undefined) {
        c = { calls: 0, reported: 0 };
        s.codes.set(code, c);
        if (code === 'OK') ok = c;
      }
      c.calls++;
      let i = 0;
      while (i < BUCKETS.length && seconds > (BUCKETS[i] ?? Infinity)) i++;
      s.buckets[i] = (s.buckets[i] ?? 0) + 1;
      s.sum += seconds;
      s.count++;
    },
  };
}

/** Gives the request counter the calls recorded since the last scrape. */
function flushCalls(metrics: AutoscalerMetrics, series: Map<string, MethodSeries>): void {
  for (const s of series.values()) {
    for (const [code, c] of s.codes) {
      if (c.calls > c.reported) metrics.requests.inc({ method: s.method, code }, c.calls - c.reported);
      c.reported = c.calls;
    }
  }
}

type HistogramValues = Awaited<ReturnType<Histogram<'method'>['get']>>;

/** The duration histogram, exported from the recorders' arrays (same series prom-client would write). */
class CallDurations extends Histogram<'method'> {
  /** Unset while prom-client's constructor runs (it calls reset()). */
  private readonly series: Map<string, MethodSeries> | undefined;

  constructor(series: Map<string, MethodSeries>, registry: Registry) {
    super({
      name: DURATION,
      help: DURATION_HELP,
      labelNames: ['method'],
      buckets: BUCKETS,
      registers: [registry],
    });
    this.series = series;
  }

  /** prom-client sets `type` on its metrics without declaring it in its typings. */
  private readonly kind = (this as unknown as { type: HistogramValues['type'] }).type;

  override get(): Promise<HistogramValues> {
    const values: HistogramValues['values'] = [];
    // prom-client's own histogram adds `le` to the bucket series' labels the same way.
    const bucket = (method: string, le: number | string): LabelValues<'method'> =>
      ({ method, le }) as LabelValues<'method'>;
    for (const s of this.series?.values() ?? []) {
      let acc = 0;
      BUCKETS.forEach((le, i) => {
        acc += s.buckets[i] ?? 0;
        values.push({ labels: bucket(s.method, le), value: acc, metricName: `${DURATION}_bucket` });
      });
      values.push(
        { labels: bucket(s.method, '+Inf'), value: s.count, metricName: `${DURATION}_bucket` },
        { labels: { method: s.method }, value: s.sum, metricName: `${DURATION}_sum` },
        { labels: { method: s.method }, value: s.count, metricName: `${DURATION}_count` },
      );
    }
    return Promise.resolve({
      name: DURATION,
      help: DURATION_HELP,
      type: this.kind,
      values,
      aggregator: 'sum',
      collect: () => undefined,
    });
  }

  /** prom-client's registry prefers this to get() when it exists. */
  getForPromString(): Promise<HistogramValues> {
    return this.get();
  }

  /** Also the counter's baseline: a registry reset clears both metrics together. */
  override reset(): void {
    super.reset();
    for (const s of this.series?.values() ?? []) {
      s.buckets.fill(0);
      s.sum = 0;
      s.count = 0;
      for (const c of s.codes.values()) c.reported = c.calls;
    }
  }
}
