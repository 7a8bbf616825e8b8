// Request budgets (issue #49): counts of calls by key, before and after a scenario, turned into
// calls per machine and checked against a budget per key. Shared by the API, EC2 and gRPC budget
// tests.

import type { Registry } from 'prom-client';

/** A client's requests so far by `verb resource`, from its rest_client metrics in `registry`. */
export async function clientRequestCounts(registry: Registry): Promise<Map<string, number>> {
  const metric = await registry.getSingleMetric('rest_client_request_duration_seconds')?.get();
  const counts = new Map<string, number>();
  for (const v of metric?.values ?? []) {
    const name = (v as { metricName?: string }).metricName ?? '';
    if (!name.endsWith('_count')) continue;
    const key = `${String(v.labels.verb ?? '')} ${String(v.labels.resource ?? '')}`;
    counts.set(key, (counts.get(key) ?? 0) + v.value);
  }
  return counts;
}

export interface BudgetCheck {
  /** Calls per machine by key, most first (keys with no call left out). */
  rows: [string, number][];
  total: number;
  /** The keys over their budget, described. */
  over: string[];
  /** The rows and the total as one line, for the test's output. */
  summary: string;
}

/** The calls made between `before` and `after`, per machine, against the budget of each key. */
export function perMachineBudget(
  before: ReadonlyMap<string, number>,
  after: ReadonlyMap<string, number>,
  machines: number,
  budgets: Readonly<Record<string, number>>,
  unlisted: number,
): BudgetCheck {
  const rows: [string, number][] = [];
  for (const [k, n] of after) {
    const d = n - (before.get(k) ?? 0);
    if (d > 0) rows.push([k, d / machines]);
  }
  rows.sort((a, b) => b[1] - a[1]);
  const total = rows.reduce((s, [, v]) => s + v, 0);
  const over = rows
    .filter(([k, v]) => v > (budgets[k] ?? unlisted))
    .map(([k, v]) => `${k}: ${v.toFixed(2)} per machine, budget ${budgets[k] ?? unlisted}`);
  const summary = `${rows.map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}; total ${total.toFixed(2)}`;
  return { rows, total, over, summary };
}
