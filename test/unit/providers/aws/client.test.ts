import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import { repoRoot } from '../../../harness/tools.js';

/**
 * Runs `body` (an ES module's text) in a fresh Node process whose module resolution refuses every
 * `@aws-sdk/` and `@smithy/` package ("AWS SDK loaded: <specifier>"), and any module outside the
 * SDK bundle and Node's built-ins that the bundle imports ("the SDK bundle imports <specifier>"):
 * the bundle must run without the SDK's packages, which the image does not install. With
 * `refuseBundle` the bundle itself is refused too ("SDK bundle loaded: <file>").
 */
function isolated(
  body: string,
  opts: { refuseBundle?: boolean; env?: Record<string, string> } = {},
): { status: number | null; out: string } {
  const hook = [
    `const refuseBundle = ${JSON.stringify(opts.refuseBundle ?? false)};`,
    'export async function resolve(specifier, context, next) {',
    "  if (/^@(aws-sdk|smithy)\\//.test(specifier)) throw new Error('AWS SDK loaded: ' + specifier);",
    '  const r = await next(specifier, context);',
    "  const inBundle = (url) => url.includes('/sdk-bundle/');",
    '  if (refuseBundle && inBundle(r.url))',
    "    throw new Error('SDK bundle loaded: ' + r.url.slice(r.url.indexOf('sdk-bundle/')));",
    "  if (inBundle(context.parentURL ?? '') && !inBundle(r.url) && !r.url.startsWith('node:'))",
    "    throw new Error('the SDK bundle imports ' + specifier);",
    '  return r;',
    '}',
  ].join('\n');
  const code = [
    "import { register } from 'node:module';",
    `register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));`,
    body,
  ].join('\n');
  // The endpoint and profile come from the test alone, not from the environment it runs in.
  const inherited = Object.entries(process.env).filter(
    ([name]) =>
      !['AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_EC2', 'AWS_ENDPOINT_URL_STS', 'AWS_PROFILE'].includes(name),
  );
  const env = { ...Object.fromEntries(inherited), NODE_NO_WARNINGS: '1', ...opts.env };
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], {
    encoding: 'utf8',
    timeout: 30_000,
    env,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const dist = (...p: string[]): string => pathToFileURL(path.join(repoRoot, 'dist', ...p)).href;
const clientModule = dist('lib', 'providers', 'aws', 'client.js');

/**
 * Module text: a loopback server that answers as EC2 (DescribeInstances) and STS
 * (AssumeRoleWithWebIdentity) do and prints a line per request (`<Action> <Host> <key id>`, the
 * access key id the request was signed with); its address is `endpoint`. Every variable named in
 * `endpointVars` points at it.
 */
function serverModule(endpointVars: string[]): string {
  return [
    "import http from 'node:http';",
    'const answers = {',
    '  DescribeInstances: \'<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">' +
      '<requestId>r1</requestId><reservationSet><item><reservationId>r-1</reservationId><instancesSet><item>' +
      '<instanceId>i-0abc</instanceId><instanceState><code>16</code><name>running</name></instanceState>' +
      "</item></instancesSet></item></reservationSet></DescribeInstancesResponse>',",
    '  AssumeRoleWithWebIdentity: \'<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">' +
      '<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIATEMPORARY</AccessKeyId>' +
      '<SecretAccessKey>temporary-secret</SecretAccessKey><SessionToken>session-token</SessionToken>' +
      '<Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>' +
      "<ResponseMetadata><RequestId>r2</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>',",
    '};',
    'const server = http.createServer((req, res) => {',
    "  let body = '';",
    "  req.on('data', (d) => (body += d));",
    "  req.on('end', () => {",
    '    const params = new URLSearchParams(body);',
    "    const action = params.get('Action');",
    "    const keyId = /Credential=([^/]+)\\//.exec(req.headers.authorization ?? '')?.[1] ?? 'unsigned';",
    "    const token = params.get('WebIdentityToken');",
    "    console.log(action + ' ' + req.headers.host.replace(/:\\d+$/, '') + ' ' + keyId + (token ? ' token=' + token : ''));",
    "    res.writeHead(answers[action] ? 200 : 400, { 'content-type': 'text/xml' });",
    "    res.end(answers[action] ?? '<Response><Errors><Error><Code>Unknown</Code></Error></Errors></Response>');",
    '  });',
    '});',
    "await new Promise((r) => server.listen(0, '127.0.0.1', r));",
    'const endpoint = `http://127.0.0.1:${server.address().port}`;',
    ...endpointVars.map((v) => `process.env.${v} = endpoint;`),
  ].join('\n');
}

/** Module text: one DescribeInstances through the manager's client, its answer printed. */
function describeThroughClient(credentials: string): string {
  return [
    `const { sdkEc2Api } = await import(${JSON.stringify(clientModule)});`,
    `const api = sdkEc2Api('eu-west-1', ${credentials});`,
    'try {',
    "  const out = await api.describeInstances({ InstanceIds: ['i-0abc'] });",
    "  console.log('answer ' + out.Reservations?.[0]?.Instances?.[0]?.InstanceId);",
    "} catch (err) { console.log('failed: ' + err.message); }",
    'api.destroy();',
    'server.close();',
  ].join('\n');
}

const staticCredentials = "{ kind: 'static', accessKeyId: 'AKIDSTATIC', secretAccessKey: 'b' }";

describe('aws client: the EC2 SDK bundle is loaded on the first EC2 call', () => {
  it('importing the manager (every provider registered) loads neither the SDK bundle nor the AWS SDK', () => {
    const r = isolated(
      `await import(${JSON.stringify(dist('lib', 'manager.js'))}); console.log('imported');`,
      {
        refuseBundle: true,
      },
    );
    expect(r.out).to.not.include('loaded');
    expect(r.out.trim()).to.equal('imported');
    expect(r.status).to.equal(0);
  });

  it('an EC2 call loads the bundle (and a failed load reaches the caller as the call error)', () => {
    const r = isolated(
      [
        `const { sdkEc2Api } = await import(${JSON.stringify(clientModule)});`,
        `const api = sdkEc2Api('eu-west-1', ${staticCredentials});`,
        "console.log('made');",
        'for (const attempt of [1, 2]) {',
        "  try { await api.describeInstances({}); console.log('answered'); }",
        "  catch (err) { console.log('attempt ' + attempt + ': ' + err.message); }",
        '}',
        'api.destroy();',
      ].join('\n'),
      { refuseBundle: true },
    );
    // A failed load is not kept: the second call tries again (and fails again here).
    expect(r.out.trim().split('\n')).to.deep.equal([
      'made',
      'attempt 1: SDK bundle loaded: sdk-bundle/sdk-entry.js',
      'attempt 2: SDK bundle loaded: sdk-bundle/sdk-entry.js',
    ]);
    expect(r.status).to.equal(0);
  });

  // The endpoint is the SDK's own configuration: it must survive the bundling.
  for (const variable of ['AWS_ENDPOINT_URL_EC2', 'AWS_ENDPOINT_URL']) {
    it(`without the SDK's packages, a call goes to the endpoint of ${variable} and its answer parses`, () => {
      const r = isolated([serverModule([variable]), describeThroughClient(staticCredentials)].join('\n'));
      expect(r.out.trim().split('\n')).to.deep.equal([
        'DescribeInstances 127.0.0.1 AKIDSTATIC',
        'answer i-0abc',
      ]);
      expect(r.status).to.equal(0);
    });
  }

  it("without the SDK's packages, a web identity is exchanged at STS (the bundle's lazy chunk) and signs the call", () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'aws-web-identity-'));
    const tokenFile = path.join(dir, 'token');
    writeFileSync(tokenFile, 'projected-token');
    let r: { status: number | null; out: string };
    try {
      r = isolated(
        [
          serverModule(['AWS_ENDPOINT_URL']),
          describeThroughClient(
            `{ kind: 'webIdentity', tokenFile: ${JSON.stringify(tokenFile)}, roleARN: 'arn:aws:iam::1:role/r' }`,
          ),
        ].join('\n'),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(r.out.trim().split('\n')).to.deep.equal([
      'AssumeRoleWithWebIdentity 127.0.0.1 unsigned token=projected-token',
      'DescribeInstances 127.0.0.1 ASIATEMPORARY',
      'answer i-0abc',
    ]);
    expect(r.status).to.equal(0);
  });
});
