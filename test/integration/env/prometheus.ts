// The chart's alerts and dashboard as Prometheus sees them: the PrometheusRule rendered by the real
// helm and turned into a plain rules file, and a real Prometheus (Debian's build, from the tools
// cache) scraping a manager and evaluating those rules, read through its HTTP API.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import yaml from 'js-yaml';

import { httpGetText } from '../../harness/http.js';
import { ManagedProcess, freePort, waitUntil } from '../../harness/process.js';
import { binaryPath } from '../../harness/tools.js';
import { CHART_DIR, type Helm, findDoc, parseManifests } from './chart.js';

/** Release and namespace the rules are rendered for; the alerts select job="<MCM_JOB>". */
export const RELEASE = 'mcm';
export const RELEASE_NAMESPACE = 'mcm-system';
/** The metrics Service's name: the job label the Prometheus Operator gives a ServiceMonitor's targets. */
export const MCM_JOB = 'mcm-machine-controller-manager-metrics';

export interface RuleGroup {
  name: string;
  rules: { alert?: string; record?: string; expr: string; for?: string }[];
}

/** The PrometheusRule's spec.groups as `helm template` renders them with these --set values. */
export async function renderRuleGroups(helm: Helm, setValues: readonly string[]): Promise<RuleGroup[]> {
  const set = ['metrics.prometheusRule.enabled=true', ...setValues].join(',');
  const manifest = await helm.template(RELEASE, RELEASE_NAMESPACE, [
    '--show-only',
    'templates/prometheusrule.yaml',
    '--set',
    set,
  ]);
  const rule = findDoc(parseManifests(manifest), 'PrometheusRule');
  return (rule.spec as { groups: RuleGroup[] }).groups;
}

/** Writes groups as a Prometheus rules file (what the Prometheus Operator hands Prometheus). */
export function writeRulesFile(file: string, groups: readonly RuleGroup[]): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, yaml.dump({ groups }, { lineWidth: -1, noRefs: true }));
}

export const alertNames = (groups: readonly RuleGroup[]): string[] =>
  groups.flatMap((g) => g.rules.flatMap((r) => (r.alert === undefined ? [] : [r.alert])));

/** The chart's Grafana dashboard, as shipped. */
export function readDashboard(): Dashboard {
  const file = path.join(CHART_DIR, 'dashboards', 'machine-controller-manager.json');
  return JSON.parse(readFileSync(file, 'utf8')) as Dashboard;
}

export interface DashboardTarget {
  expr: string;
  legendFormat?: string;
  refId?: string;
}
export interface DashboardPanel {
  title: string;
  type: string;
  targets?: DashboardTarget[];
  panels?: DashboardPanel[];
}
export interface DashboardVariable {
  name: string;
  type: string;
  definition?: string;
  includeAll?: boolean;
}
export interface Dashboard {
  panels: DashboardPanel[];
  templating: { list: DashboardVariable[] };
}

/** Every panel that queries something, rows' nested panels included. */
export function queryPanels(d: Dashboard): DashboardPanel[] {
  const out: DashboardPanel[] = [];
  const walk = (ps: readonly DashboardPanel[]): void => {
    for (const p of ps) {
      if ((p.targets ?? []).length > 0) out.push(p);
      walk(p.panels ?? []);
    }
  };
  walk(d.panels);
  return out;
}

// --- a real Prometheus ---------------------------------------------------------------------------

export interface PromSample {
  metric: Record<string, string>;
  value?: [number, string];
  values?: [number, string][];
}

export interface PromAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
  activeAt: string;
  value: string;
}

export interface PrometheusOptions {
  /** Scratch directory for its configuration, rules and TSDB. */
  dir: string;
  /** host:port of each target, scraped under the job MCM_JOB. */
  targets: string[];
  /** Labels the Prometheus Operator would give the target (pod, namespace, service…). */
  targetLabels: Record<string, string>;
  rules: readonly RuleGroup[];
  scrapeIntervalS: number;
  evaluationIntervalS: number;
}

/**
 * Prometheus scraping the manager the way a ServiceMonitor of the chart does (job = the metrics
 * Service's name, honor_labels, the target's pod/namespace labels) and evaluating the rules.
 */
export class Prometheus {
  private readonly proc: ManagedProcess;

  private constructor(
    readonly url: string,
    proc: ManagedProcess,
  ) {
    this.proc = proc;
  }

  static async start(o: PrometheusOptions): Promise<Prometheus> {
    const port = await freePort();
    const rulesFile = path.join(o.dir, 'rules.yaml');
    writeRulesFile(rulesFile, o.rules);
    const config = {
      global: {
        scrape_interval: `${o.scrapeIntervalS}s`,
        scrape_timeout: `${o.scrapeIntervalS}s`,
        evaluation_interval: `${o.evaluationIntervalS}s`,
      },
      rule_files: [rulesFile],
      scrape_configs: [
        {
          job_name: MCM_JOB,
          honor_labels: true,
          static_configs: [{ targets: o.targets, labels: o.targetLabels }],
        },
      ],
    };
    const configFile = path.join(o.dir, 'prometheus.yml');
    writeFileSync(configFile, yaml.dump(config, { lineWidth: -1 }));
    const proc = new ManagedProcess({
      name: 'prometheus',
      command: binaryPath('prometheus'),
      args: [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${path.join(o.dir, 'tsdb')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      logFile: path.join(o.dir, 'prometheus.log'),
    });
    proc.start();
    const p = new Prometheus(`http://127.0.0.1:${port}`, proc);
    await waitUntil(
      'prometheus ready',
      async () => (await httpGetText(`${p.url}/-/ready`, 2000)).status === 200,
      { timeoutMs: 30_000, process: proc },
    );
    return p;
  }

  private async api<T>(pathAndQuery: string): Promise<T> {
    const r = await httpGetText(`${this.url}${pathAndQuery}`, 10_000);
    const body = JSON.parse(r.text) as { status: string; data: T; error?: string; errorType?: string };
    if (body.status !== 'success') {
      throw new Error(`prometheus ${pathAndQuery}: ${body.errorType ?? ''} ${body.error ?? r.text}`);
    }
    return body.data;
  }

  /** An instant query (/api/v1/query) at `time` (Unix seconds; default now). */
  async query(expr: string, time?: number): Promise<PromSample[]> {
    const q = new URLSearchParams({ query: expr });
    if (time !== undefined) q.set('time', String(time));
    return (await this.api<{ result: PromSample[] }>(`/api/v1/query?${q.toString()}`)).result;
  }

  /** A range query (/api/v1/query_range), as a Grafana panel over a time range issues it. */
  async queryRange(expr: string, start: number, end: number, stepS: number): Promise<PromSample[]> {
    const q = new URLSearchParams({
      query: expr,
      start: String(start),
      end: String(end),
      step: String(stepS),
    });
    return (await this.api<{ result: PromSample[] }>(`/api/v1/query_range?${q.toString()}`)).result;
  }

  /** Label values of series matching a selector between start and end (/api/v1/label/<name>/values). */
  async labelValues(label: string, match: string, start: number, end: number): Promise<string[]> {
    const q = new URLSearchParams({ 'match[]': match, start: String(start), end: String(end) });
    return this.api<string[]>(`/api/v1/label/${encodeURIComponent(label)}/values?${q.toString()}`);
  }

  /** Active alerts (pending and firing), /api/v1/alerts. */
  async alerts(): Promise<PromAlert[]> {
    return (await this.api<{ alerts: PromAlert[] }>('/api/v1/alerts')).alerts;
  }

  /** Health of the scrape targets, /api/v1/targets. */
  async targets(): Promise<{ health: string; lastError: string; scrapeUrl: string }[]> {
    return (
      await this.api<{ activeTargets: { health: string; lastError: string; scrapeUrl: string }[] }>(
        '/api/v1/targets',
      )
    ).activeTargets;
  }

  /** Last lines of its log, for failure messages. */
  tail(lines = 30): string {
    return this.proc.tail(lines);
  }

  async stop(): Promise<void> {
    await this.proc.stop(5_000);
  }
}
