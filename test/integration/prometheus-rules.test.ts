// The chart's alerts under `promtool test rules`: the PrometheusRule is rendered by the real helm
// (as shipped: default values, and the variants the tests name), its groups written as rules files
// into a scratch directory beside copies of the test files under test/prometheus/, and the real
// promtool runs each test file there.

import { copyFileSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';
import yaml from 'js-yaml';

import { removeOnExit } from '../harness/process.js';
import { binaryPath, repoRoot } from '../harness/tools.js';
import { Helm, run } from './env/chart.js';
import { alertNames, renderRuleGroups, writeRulesFile, type RuleGroup } from './env/prometheus.js';

const TESTS_DIR = path.join(repoRoot, 'test', 'prometheus');

/** The rules files the tests load (rule_files: rules/<name>.yaml) and the chart values of each. */
const VARIANTS: Record<string, string[]> = {
  default: [],
  'target-none': [
    'targetCluster.mode=none',
    'metrics.prometheusRule.machineNotRunningFor=10m',
    'metrics.prometheusRule.alertLabels.team=platform',
  ],
};

interface PromtoolTestFile {
  rule_files: string[];
  tests: {
    name?: string;
    input_series?: { series: string; values: string }[];
    alert_rule_test?: { alertname: string; eval_time: string; exp_alerts?: unknown[] }[];
  }[];
}

const testFiles = readdirSync(TESTS_DIR)
  .filter((f) => f.endsWith('.test.yaml'))
  .sort();
const parsed = (file: string): PromtoolTestFile =>
  yaml.load(readFileSync(path.join(TESTS_DIR, file), 'utf8')) as PromtoolTestFile;

/** Metric names and label names of docs/reference/metrics.md (generated from a real manager). */
function referenceMetrics(): Map<string, string[]> {
  const text = readFileSync(path.join(repoRoot, 'docs', 'reference', 'metrics.md'), 'utf8');
  const out = new Map<string, string[]>();
  for (const m of text.matchAll(/^\| `([a-z_:]+)` \| (\w+) \| ([^|]*) \|/gm)) {
    const [, name = '', type, labels = ''] = m;
    const names = [...labels.matchAll(/`(\w+)`/g)].map((l) => l[1] ?? '');
    if (type === 'histogram') {
      out.set(`${name}_bucket`, [...names, 'le']);
      out.set(`${name}_sum`, names);
      out.set(`${name}_count`, names);
    } else out.set(name, names);
  }
  return out;
}

describe('the chart’s alerts under promtool test rules (real helm and promtool)', function () {
  this.timeout(60_000);
  let work = '';
  const rendered = new Map<string, RuleGroup[]>();

  before(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'mcm-promtool-'));
    removeOnExit(work);
    const helm = new Helm();
    for (const [name, values] of Object.entries(VARIANTS)) {
      const groups = await renderRuleGroups(helm, values);
      rendered.set(name, groups);
      writeRulesFile(path.join(work, 'rules', `${name}.yaml`), groups);
    }
    for (const f of testFiles) copyFileSync(path.join(TESTS_DIR, f), path.join(work, f));
  });

  it('the rendered rules pass promtool check rules', async () => {
    for (const name of Object.keys(VARIANTS)) {
      const r = await run(binaryPath('promtool'), ['check', 'rules', path.join('rules', `${name}.yaml`)], {
        cwd: work,
      });
      expect(r.code, `${name}: ${r.stdout}${r.stderr}`).to.equal(0);
    }
  });

  for (const file of testFiles) {
    it(`${file} passes promtool test rules`, async () => {
      const r = await run(binaryPath('promtool'), ['test', 'rules', file], { cwd: work });
      expect(r.code, `promtool test rules ${file}:\n${r.stdout}${r.stderr}`).to.equal(0);
    });
  }

  it('every alert of the chart has a case where it fires and one where it stays quiet', () => {
    const chartAlerts = new Set([...rendered.values()].flatMap(alertNames));
    expect(chartAlerts.size).to.be.greaterThan(10);
    const firing = new Set<string>();
    const quiet = new Set<string>();
    const unknown: string[] = [];
    for (const file of testFiles) {
      const t = parsed(file);
      for (const rf of t.rule_files) {
        const variant = /^rules\/(.+)\.yaml$/.exec(rf)?.[1];
        expect(variant !== undefined && variant in VARIANTS, `${file}: rule file ${rf}`).to.equal(true);
      }
      for (const c of t.tests.flatMap((x) => x.alert_rule_test ?? [])) {
        if (!chartAlerts.has(c.alertname)) unknown.push(`${file}: ${c.alertname}`);
        ((c.exp_alerts ?? []).length > 0 ? firing : quiet).add(c.alertname);
      }
    }
    expect(unknown, 'tests of alerts the chart does not have').to.deep.equal([]);
    const missing = [...chartAlerts].flatMap((a) => [
      ...(firing.has(a) ? [] : [`${a}: no case where it fires`]),
      ...(quiet.has(a) ? [] : [`${a}: no case where it stays quiet`]),
    ]);
    expect(missing).to.deep.equal([]);
  });

  it('the input series are metrics the manager serves, with its labels (docs/reference/metrics.md)', () => {
    const reference = referenceMetrics();
    expect(reference.size).to.be.greaterThan(30);
    // Prometheus's own `up`, and the labels a ServiceMonitor's target adds.
    reference.set('up', []);
    const targetLabels = ['job', 'instance', 'pod', 'namespace'];
    const wrong: string[] = [];
    for (const file of testFiles) {
      for (const s of parsed(file).tests.flatMap((t) => t.input_series ?? [])) {
        const m = /^(\w+)\{(.*)\}$/.exec(s.series);
        const name = m?.[1] ?? s.series;
        const labels = [...(m?.[2] ?? '').matchAll(/(\w+)=/g)].map((l) => l[1] ?? '');
        const known = reference.get(name);
        if (known === undefined) wrong.push(`${file}: ${name} is not a metric of the manager`);
        else {
          const extra = labels.filter((l) => !known.includes(l) && !targetLabels.includes(l));
          if (extra.length > 0) wrong.push(`${file}: ${name} has no label ${extra.join(', ')}`);
        }
        if (!labels.includes('job')) wrong.push(`${file}: ${s.series} has no job label`);
      }
    }
    expect(wrong).to.deep.equal([]);
  });
});
