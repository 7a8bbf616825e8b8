// The CloudFormation templates operators deploy on AWS (deploy/aws): each passes cfn-lint (the
// linter in the emulator's venv, from PyPI), and the linter does fail a broken copy, so a clean
// result means something. The interruption queue's template is also deployed to the emulator by
// the AWS interruption queue's tests (aws-interruption.test.ts), which run on the queue it creates.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { cfnLintCommand, repoRoot } from '../harness/tools.js';

const DIR = path.join(repoRoot, 'deploy', 'aws');

function cfnLint(files: string[]): { code: number | null; out: string } {
  const { command, args } = cfnLintCommand(files);
  const r = spawnSync(command, args, { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('CloudFormation templates for AWS (deploy/aws), checked with cfn-lint', function () {
  this.timeout(180_000);
  const templates = readdirSync(DIR)
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => path.join(DIR, f));

  it('ships the interruption queue and the MachineClass policy', () => {
    expect(templates.map((t) => path.basename(t)).sort()).to.deep.equal([
      'interruption-queue.yaml',
      'machineclass-policy.yaml',
    ]);
  });

  it('every template passes cfn-lint without a finding', () => {
    const r = cfnLint(templates);
    expect(r.out.trim(), 'findings').to.equal('');
    expect(r.code).to.equal(0);
  });

  it('cfn-lint fails a copy with a property CloudFormation does not know', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcm-cfn-'));
    try {
      const broken = path.join(dir, 'broken.yaml');
      const text = readFileSync(path.join(DIR, 'interruption-queue.yaml'), 'utf8');
      writeFileSync(
        broken,
        text.replace('SqsManagedSseEnabled: true', 'SqsManagedSseEnabled: true\n      Bogus: 1'),
      );
      const r = cfnLint([broken]);
      expect(r.code).to.not.equal(0);
      expect(r.out).to.contain('E3002');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
