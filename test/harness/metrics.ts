import type { Registry } from '../../lib/observability/metrics.js';

/** The value of one series of a metric (the first whose labels include labels), 0 when absent. */
export async function metricValue(
  registry: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const m = registry.getSingleMetric(name);
  if (m === undefined) throw new Error(`no metric ${name}`);
  const { values } = await m.get();
  return values.find((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want))?.value ?? 0;
}
