import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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

  it('succeeds when every suite ran and passed, summing repeated runs of a suite and naming skips', () => {
    const r = summarize(
      [
        { suite: 'unit', passed: 3, failed: 0, skipped: 1 },
        { suite: 'unit', passed: 2, failed: 0, skipped: 0 },
      ],
      ['unit'],
    );
    expect(r.out).to.deep.equal(['unit: 5 passed, 0 failed, 1 skipped', '5 passed, 0 failed, 1 skipped']);
    expect(r.status).to.equal(0);
  });
});
