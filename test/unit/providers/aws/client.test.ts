import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import { repoRoot } from '../../../harness/tools.js';

/**
 * Runs `body` (an ES module's text) in a fresh Node process whose module resolution refuses any
 * `@aws-sdk/` package: a load of the SDK fails with "AWS SDK loaded: <specifier>".
 */
function withoutSdk(body: string): { status: number | null; out: string } {
  const hook = [
    'export async function resolve(specifier, context, next) {',
    "  if (specifier.startsWith('@aws-sdk/')) throw new Error('AWS SDK loaded: ' + specifier);",
    '  return next(specifier, context);',
    '}',
  ].join('\n');
  const code = [
    "import { register } from 'node:module';",
    `register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));`,
    body,
  ].join('\n');
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const dist = (...p: string[]): string => pathToFileURL(path.join(repoRoot, 'dist', ...p)).href;

describe('aws client: the EC2 SDK is loaded on the first EC2 call', () => {
  it('importing the manager (every provider registered) does not load the AWS SDK', () => {
    const r = withoutSdk(
      `await import(${JSON.stringify(dist('lib', 'manager.js'))}); console.log('imported');`,
    );
    expect(r.out).to.not.include('AWS SDK loaded');
    expect(r.out.trim()).to.equal('imported');
    expect(r.status).to.equal(0);
  });

  it('an EC2 call loads it (and a failed load reaches the caller as the call error)', () => {
    const r = withoutSdk(
      [
        `const { sdkEc2Api } = await import(${JSON.stringify(dist('lib', 'providers', 'aws', 'client.js'))});`,
        "const api = sdkEc2Api('eu-west-1', { kind: 'static', accessKeyId: 'a', secretAccessKey: 'b' });",
        "console.log('made');",
        'for (const attempt of [1, 2]) {',
        "  try { await api.describeInstances({}); console.log('answered'); }",
        "  catch (err) { console.log('attempt ' + attempt + ': ' + err.message); }",
        '}',
        'api.destroy();',
      ].join('\n'),
    );
    // A failed load is not kept: the second call tries again (and fails again here).
    expect(r.out.trim().split('\n')).to.deep.equal([
      'made',
      'attempt 1: AWS SDK loaded: @aws-sdk/client-ec2',
      'attempt 2: AWS SDK loaded: @aws-sdk/client-ec2',
    ]);
    expect(r.status).to.equal(0);
  });
});
