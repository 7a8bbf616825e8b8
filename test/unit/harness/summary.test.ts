import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { repoRoot } from '../../harness/tools.js';

/** Runs test/summary.cjs (what npm test and .ci/run end with) on results lines. */
function summarize(lines: object[], suites: string[]): { out: string[]; status: number | null } {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcm-summary-'));
  try {
    const file = path.join(dir, 'results');
    writeFileSync(file, lines.map((l) => JSON.stringify(l) + '\n').join(''));
    const r = spawnSync(process.execPath, [path.join(repoRoot, 'test', 'summary.cjs'), file, ...suites], {
      encoding: 'utf8',
    });
    return { out: r.stdout.trim().split('\n'), status: r.status };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('test summary (npm test, .ci/run)', () => {
  it('prints a line per suite, "not run" for a suite without results, and the total last; fails for either', () => {
    const r = summarize(
      [
        { suite: 'unit', passed: 3, failed: 0, skipped: 0 },
        { suite: 'integration', passed: 5, failed: 1, skipped: 0 },
      ],
      ['unit', 'integration', 'e2e'],
    );
    expect(r.out).to.deep.equal([
      'unit: 3 passed, 0 failed, 0 skipped',
      'integration: 5 passed, 1 failed, 0 skipped',
      'e2e: not run',
      '8 passed, 1 failed',
    ]);
    expect(r.status).to.equal(1);
  });

  it('fails when a suite did not run even though nothing failed', () => {
    const r = summarize([{ suite: 'unit', passed: 3, failed: 0, skipped: 0 }], ['unit', 'chaos']);
    expect(r.out).to.deep.equal([
      'unit: 3 passed, 0 failed, 0 skipped',
      'chaos: not run',
      '3 passed, 0 failed',
    ]);
    expect(r.status).to.equal(1);
  });

  it('fails when a suite ran no test at all, and says so', () => {
    const r = summarize(
      [
        { suite: 'unit', passed: 3, failed: 0, skipped: 0 },
        { suite: 'chaos', passed: 0, failed: 0, skipped: 0 },
      ],
      ['unit', 'chaos'],
    );
    expect(r.out).to.deep.equal([
      'unit: 3 passed, 0 failed, 0 skipped',
      'chaos: 0 passed, 0 failed, 0 skipped (no test ran)',
      '3 passed, 0 failed',
    ]);
    expect(r.status).to.equal(1);
  });

  it('succeeds when every suite ran and passed, summing repeated runs of a suite and naming skips', () => {
    const r = summarize(
      [
        { suite: 'unit', passed: 3, failed: 0, skipped: 1, skippedTests: ['client retries a 429'] },
        { suite: 'unit', passed: 2, failed: 0, skipped: 0, skippedTests: [] },
      ],
      ['unit'],
    );
    expect(r.out).to.deep.equal([
      'unit: 5 passed, 0 failed, 1 skipped',
      '  skipped: client retries a 429',
      '5 passed, 0 failed, 1 skipped',
    ]);
    expect(r.status).to.equal(0);
  });
  it("names each failed test with its error's first line under its suite, so the end of a long log shows what failed", function () {
    this.timeout(30_000);
    const dir = mkdtempSync(path.join(tmpdir(), 'mcm-reporter-'));
    try {
      const spec = path.join(dir, 'spec.cjs');
      const results = path.join(dir, 'results');
      writeFileSync(
        spec,
        "describe('group', () => {\n" +
          "  it('passes', () => {});\n" +
          "  it('times out', () => { throw new Error('timed out waiting for x\\nsecond line'); });\n" +
          '});\n',
      );
      spawnSync(
        process.execPath,
        [
          path.join(repoRoot, 'node_modules', 'mocha', 'bin', 'mocha.js'),
          '--no-config',
          '--reporter',
          path.join(repoRoot, 'test', 'summary-reporter.cjs'),
          spec,
        ],
        { encoding: 'utf8', env: { ...process.env, MCM_TEST_RESULTS: results, MCM_TEST_SUITE: 'demo' } },
      );
      const lines = readFileSync(results, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as object);
      const r = summarize(lines, ['demo']);
      expect(r.out).to.deep.equal([
        `demo: 1 passed, 1 failed, 0 skipped [Node.js ${process.version}]`,
        '  failed: group times out: timed out waiting for x',
        '1 passed, 1 failed',
      ]);
      expect(r.status).to.equal(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('test summary: what each suite ran on', () => {
  it('names after each suite the Kubernetes and Node.js releases its processes reported', () => {
    const r = summarize(
      [
        { suite: 'integration', passed: 2, failed: 0, skipped: 0, node: 'v26.10.0', kubernetes: 'v1.37.2' },
        {
          suite: 'integration-k8s1.35.4',
          passed: 1,
          failed: 0,
          skipped: 0,
          node: 'v26.10.0',
          kubernetes: 'v1.35.4',
        },
        { suite: 'unit', passed: 3, failed: 0, skipped: 0, node: 'v26.10.0' },
      ],
      ['unit', 'integration', 'integration-k8s1.35.4'],
    );
    expect(r.out).to.deep.equal([
      'unit: 3 passed, 0 failed, 0 skipped [Node.js v26.10.0]',
      'integration: 2 passed, 0 failed, 0 skipped [Kubernetes v1.37.2, Node.js v26.10.0]',
      'integration-k8s1.35.4: 1 passed, 0 failed, 0 skipped [Kubernetes v1.35.4, Node.js v26.10.0]',
      '6 passed, 0 failed',
    ]);
    expect(r.status).to.equal(0);
  });
});

describe('mocha configuration of every suite', () => {
  const configs = readdirSync(repoRoot).filter((f) => /^\.mocharc\..+\.json$/.test(f));

  it('forbids .only and pending tests in every suite, so neither can leave CI green on a subset', () => {
    expect(configs.sort()).to.deep.equal([
      '.mocharc.chaos.json',
      '.mocharc.compat.json',
      '.mocharc.conformance.json',
      '.mocharc.e2e.json',
      '.mocharc.integration-long.json',
      '.mocharc.integration.json',
      '.mocharc.smoke.json',
      '.mocharc.unit.json',
    ]);
    for (const f of configs) {
      const c = JSON.parse(readFileSync(path.join(repoRoot, f), 'utf8')) as Record<string, unknown>;
      expect(c['forbid-only'], `${f}: forbid-only`).to.equal(true);
      expect(c['forbid-pending'], `${f}: forbid-pending`).to.equal(true);
    }
  });

  it("fails a run with a skipped test or a .only under the unit suite's settings", function () {
    this.timeout(30_000);
    const unit = JSON.parse(readFileSync(path.join(repoRoot, '.mocharc.unit.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const flags = [
      ...(unit['forbid-only'] === true ? ['--forbid-only'] : []),
      ...(unit['forbid-pending'] === true ? ['--forbid-pending'] : []),
    ];
    const dir = mkdtempSync(path.join(tmpdir(), 'mcm-mocharc-'));
    try {
      const run = (body: string): number | null => {
        const spec = path.join(dir, 'spec.cjs');
        writeFileSync(spec, body);
        return spawnSync(
          process.execPath,
          [path.join(repoRoot, 'node_modules', 'mocha', 'bin', 'mocha.js'), '--no-config', ...flags, spec],
          { encoding: 'utf8' },
        ).status;
      };
      expect(run("it('a', () => {});\nit('b', () => {});"), 'a plain run passes').to.equal(0);
      expect(run("it('a', () => {});\nit.skip('b', () => {});"), 'a skip').to.not.equal(0);
      expect(run("it('a', function () { this.skip(); });"), 'a skip at run time').to.not.equal(0);
      expect(run("it.only('a', () => {});\nit('b', () => {});"), 'an only').to.not.equal(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
