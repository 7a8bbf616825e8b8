import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export interface AutoscalerMetrics {
  requests: Counter<'method' | 'code'>;
  duration: Histogram<'method'>;
  groups: Gauge;
  serverCertificateExpiry: Gauge;
  tlsReloads: Counter<'result'>;
}

const byRegistry = new WeakMap<Registry, AutoscalerMetrics>();

/** Per-RPC metrics of the externalgrpc server (one set per registry). */
export function autoscalerMetrics(registry: Registry): AutoscalerMetrics {
  let m = byRegistry.get(registry);
  if (m === undefined) {
    m = {
      requests: new Counter({
        name: 'mcm_autoscaler_grpc_requests_total',
        help: 'cluster-autoscaler externalgrpc calls served, by method and gRPC status code name.',
        labelNames: ['method', 'code'],
        registers: [registry],
      }),
      duration: new Histogram({
        name: 'mcm_autoscaler_grpc_request_duration_seconds',
        help: 'Latency of cluster-autoscaler externalgrpc calls by method.',
        labelNames: ['method'],
        buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
        registers: [registry],
      }),
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
    byRegistry.set(registry, m);
  }
  return m;
}

/** Records one method's calls; label sets are bound once, not built per call. */
export interface CallRecorder {
  record(code: string, seconds: number): void;
}

export function callRecorder(metrics: AutoscalerMetrics, method: string): CallRecorder {
  const duration = metrics.duration.labels({ method });
  const ok = metrics.requests.labels({ method, code: 'OK' });
  const others = new Map<string, { inc: () => void }>();
  return {
    record(code, seconds) {
      if (code === 'OK') ok.inc();
      else {
        let c = others.get(code);
        if (c === undefined) {
          c = metrics.requests.labels({ method, code });
          others.set(code, c);
        }
        c.inc();
      }
      duration.observe(seconds);
    },
  };
}
