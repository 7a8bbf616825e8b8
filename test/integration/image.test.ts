import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { expect } from 'chai';

import { NODE_FLAGS } from '../../lib/runtime.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { run } from './env/chart.js';
import {
  dockerContextFiles,
  mapRunCommand,
  materializeContext,
  parseDockerfile,
  runDockerfileStages,
  type StageResult,
} from './env/dockerfile.js';
import { until } from './env/until.js';

const DOCKERFILE = path.join(repoRoot, 'Dockerfile');

/** What the official node images carry besides node: npm, npx, corepack and yarn (Node 22). */
const PACKAGE_MANAGERS = [
  '/usr/local/lib/node_modules/npm/package.json',
  '/usr/local/lib/node_modules/corepack/package.json',
  '/usr/local/bin/npm',
  '/usr/local/bin/npx',
  '/usr/local/bin/corepack',
  '/opt/yarn-v1.22.22/bin/yarn',
  '/usr/local/bin/yarn',
  '/usr/local/bin/yarnpkg',
];
/** The official base image's layout, as far as the runtime stage acts on it. */
const BASE_FILES = ['/usr/local/bin/node', ...PACKAGE_MANAGERS];

function filesUnder(dir: string, skip: (rel: string) => boolean, rel = ''): string[] {
  const out: string[] = [];
  for (const name of readdirSync(path.join(dir, rel))) {
    const child = rel === '' ? name : `${rel}/${name}`;
    if (skip(child)) continue;
    if (statSync(path.join(dir, child)).isDirectory()) out.push(...filesUnder(dir, skip, child));
    else out.push(child);
  }
  return out;
}

describe('container image (Dockerfile)', function () {
  this.timeout(240_000);

  it('is multi-stage: tsc in a build stage, npm ci --omit=dev, a slim Node LTS base pinned by digest, non-root, node dist/cmd/manager.js', () => {
    const { args, stages } = parseDockerfile(readFileSync(DOCKERFILE, 'utf8'));
    expect(stages.length).to.be.greaterThanOrEqual(2);
    const base = (from: string): string => from.replace(/\$\{(\w+)\}/g, (_m, k: string) => args[k] ?? '');
    for (const s of stages)
      expect(base(s.from), 'the base image is a slim Node LTS image by the digest of its index').to.match(
        /^node:(22|24|26)-[a-z]+-slim@sha256:[0-9a-f]{64}$/,
      );
    const runs = stages.flatMap((s) => s.instructions.filter((i) => i.op === 'RUN').map((i) => i.args));
    expect(runs.some((r) => /\btsc\b/.test(r))).to.equal(true);
    expect(runs.some((r) => /npm ci\b.*--omit=dev/.test(r))).to.equal(true);
    const final = stages[stages.length - 1];
    if (final === undefined) throw new Error('no stage');
    const last = (op: string): string | undefined =>
      final.instructions.filter((i) => i.op === op).pop()?.args;
    expect(JSON.parse(last('ENTRYPOINT') ?? 'null')).to.deep.equal([
      'node',
      ...NODE_FLAGS,
      'dist/cmd/manager.js',
    ]);
    const user = last('USER') ?? '';
    expect(user, 'the runtime user must be numeric so runAsNonRoot can verify it').to.match(
      /^[1-9]\d*(:\d+)?$/,
    );
    // The runtime stage compiles nothing and installs nothing: it copies from earlier stages, and
    // its only commands remove files, as root, before the USER switch.
    const ops = final.instructions.map((i) => i.op);
    for (const run of final.instructions.filter((i) => i.op === 'RUN')) {
      expect(run.args, 'a RUN of the runtime stage').to.match(/^rm -rf( +\/[^\s;&|]+)+$/);
      expect(ops.indexOf('USER'), 'the removal runs before USER').to.be.greaterThan(ops.indexOf('RUN'));
    }
    for (const copy of final.instructions.filter((i) => i.op === 'COPY'))
      expect(copy.args).to.match(/--from=/);
    const names = stages.map((s) => s.name);
    for (const s of stages)
      for (const c of s.instructions.filter((i) => i.op === 'COPY')) {
        const from = /--from=(\S+)/.exec(c.args)?.[1];
        if (from !== undefined) expect(names, `COPY --from=${from}`).to.include(from);
      }
  });

  it("the stage runner maps a RUN command's image paths into the stage and refuses any other absolute path", () => {
    expect(mapRunCommand('rm -rf /usr/local/bin/npm /opt/yarn-v* && cp -r dist /out/', '/s')).to.equal(
      'rm -rf /s/usr/local/bin/npm /s/opt/yarn-v* && cp -r dist /s/out/',
    );
    expect(() => mapRunCommand('rm -rf /usr/lib/node_modules/npm', '/s')).to.throw(/maps only/);
    expect(() => mapRunCommand('cp x /etc/passwd', '/s')).to.throw(/maps only/);
  });

  it('.dockerignore keeps the build context to what the build reads', () => {
    const files = dockerContextFiles(repoRoot);
    expect(files).to.include.members([
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
    ]);
    expect(files).to.include('cmd/manager.ts');
    expect(files).to.not.include('cmd/dev.ts');
    expect(files.some((f) => f.startsWith('lib/'))).to.equal(true);
    // Of hack/, the build stage runs the AWS SDK's bundling step alone.
    expect(
      files.filter((f) => /^(test|charts|hack|\.ci|\.git)\//.test(f) || f.endsWith('.md')),
    ).to.deep.equal(['hack/bundle-aws-sdk.mjs']);
    // Every COPY source of the build context exists in it.
    const { stages } = parseDockerfile(readFileSync(DOCKERFILE, 'utf8'));
    for (const s of stages)
      for (const c of s.instructions.filter((i) => i.op === 'COPY' && !i.args.includes('--from='))) {
        const srcs = c.args.split(/\s+/).filter((w) => !w.startsWith('--'));
        srcs.pop();
        for (const src of srcs)
          if (src !== '.')
            expect(
              files.some((f) => f === src || f.startsWith(`${src}/`)),
              src,
            ).to.equal(true);
      }
  });

  describe('its stages, run on this machine without a container runtime', () => {
    let scratch: string;
    let runtime: StageResult;

    before(async function () {
      this.timeout(900_000);
      scratch = mkdtempSync(path.join(tmpdir(), 'mcm-image-'));
      const context = path.join(scratch, 'context');
      materializeContext(repoRoot, context);
      const stages = await runDockerfileStages(DOCKERFILE, context, path.join(scratch, 'stages'), BASE_FILES);
      const last = [...stages.values()].pop();
      if (last === undefined) throw new Error('no stage ran');
      runtime = last;
    });

    after(() => {
      if ((scratch as string | undefined) !== undefined) rmSync(scratch, { recursive: true, force: true });
    });

    const app = (): string => path.join(runtime.root, runtime.workdir);

    it('leaves production dependencies only and no TypeScript sources or tests in the runtime stage', () => {
      const modules = readdirSync(path.join(app(), 'node_modules'));
      for (const dep of ['@grpc', '@kubernetes', 'prom-client', 'winston']) expect(modules).to.include(dep);
      for (const dev of ['typescript', 'mocha', 'chai', 'eslint', 'prettier', 'c8', 'fast-check'])
        expect(modules, `dev dependency ${dev} in the image`).to.not.include(dev);
      const own = filesUnder(app(), (rel) => rel === 'node_modules');
      expect(own).to.include('dist/cmd/manager.js');
      expect(
        own.filter((f) => f.endsWith('.ts') || f.startsWith('dist/test/') || f.startsWith('dist/hack/')),
      ).to.deep.equal([]);
      expect(existsSync(path.join(app(), 'dist', 'cmd', 'dev.js'))).to.equal(false);
      expect(runtime.env.NODE_ENV).to.equal('production');
    });

    it('runs the EC2 client from the SDK bundle, with no SDK package installed, at the endpoint of AWS_ENDPOINT_URL_EC2', async () => {
      const modules = readdirSync(path.join(app(), 'node_modules'));
      expect(modules, 'the AWS SDK is in the bundle, not installed').to.not.include.members([
        '@aws-sdk',
        '@smithy',
      ]);
      const client = path.join(app(), 'dist', 'lib', 'providers', 'aws', 'client.js');
      expect(
        existsSync(path.join(app(), 'dist', 'lib', 'providers', 'aws', 'sdk-bundle', 'sdk-entry.js')),
      ).to.equal(true);
      // A loopback server that answers DescribeInstances as EC2 does, and the call through our client.
      const script = [
        "import http from 'node:http';",
        'const server = http.createServer((req, res) => {',
        "  req.resume().on('end', () => {",
        "    res.writeHead(200, { 'content-type': 'text/xml' });",
        '    res.end(\'<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>\' +',
        "      '<reservationSet><item><instancesSet><item><instanceId>i-0abc</instanceId></item></instancesSet></item>' +",
        "      '</reservationSet></DescribeInstancesResponse>');",
        '  });',
        '});',
        "await new Promise((r) => server.listen(0, '127.0.0.1', r));",
        'process.env.AWS_ENDPOINT_URL_EC2 = `http://127.0.0.1:${server.address().port}`;',
        `const { sdkEc2Api } = await import(${JSON.stringify(pathToFileURL(client).href)});`,
        "const api = sdkEc2Api('eu-west-1', { kind: 'static', accessKeyId: 'a', secretAccessKey: 'b' });",
        'const out = await api.describeInstances({});',
        'console.log(out.Reservations[0].Instances[0].InstanceId);',
        'api.destroy();',
        'server.close();',
      ].join('\n');
      const r = await run(process.execPath, ['--input-type=module', '-e', script], {
        cwd: app(),
        env: { ...process.env, ...runtime.env, NODE_NO_WARNINGS: '1' },
      });
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout.trim()).to.equal('i-0abc');
    });

    it('runs the interruption queue’s SQS client from the SDK bundle, at the endpoint of AWS_ENDPOINT_URL_SQS', async () => {
      expect(
        existsSync(path.join(app(), 'dist', 'lib', 'providers', 'aws', 'sdk-bundle', 'sqs-entry.js')),
      ).to.equal(true);
      const queue = path.join(app(), 'dist', 'lib', 'providers', 'aws', 'interruption', 'queue.js');
      // A loopback server that answers ReceiveMessage as SQS does (JSON protocol), and one receive.
      const script = [
        "import { createHash } from 'node:crypto';",
        "import http from 'node:http';",
        'const body = \'{"detail-type":"EC2 Spot Instance Interruption Warning"}\';',
        'const server = http.createServer((req, res) => {',
        "  req.resume().on('end', () => {",
        "    res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' });",
        "    res.end(JSON.stringify({ Messages: [{ MessageId: 'm-1', ReceiptHandle: 'rh-1', Body: body,",
        "      MD5OfBody: createHash('md5').update(body).digest('hex') }] }));",
        '  });',
        '});',
        "await new Promise((r) => server.listen(0, '127.0.0.1', r));",
        'process.env.AWS_ENDPOINT_URL_SQS = `http://127.0.0.1:${server.address().port}`;',
        "process.env.AWS_ACCESS_KEY_ID = 'a';",
        "process.env.AWS_SECRET_ACCESS_KEY = 'b';",
        `const { sqsInterruptionQueue } = await import(${JSON.stringify(pathToFileURL(queue).href)});`,
        "const q = sqsInterruptionQueue('https://sqs.eu-west-1.amazonaws.com/123456789012/q');",
        'const got = await q.receive(new AbortController().signal);',
        'console.log(got[0].receiptHandle);',
        'q.close();',
        'server.close();',
      ].join('\n');
      const r = await run(process.execPath, ['--input-type=module', '-e', script], {
        cwd: app(),
        env: { ...process.env, ...runtime.env, NODE_NO_WARNINGS: '1' },
      });
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout.trim()).to.equal('rh-1');
    });

    it('leaves no npm, npx, corepack or yarn of the base image in the runtime stage, and node', () => {
      const left = PACKAGE_MANAGERS.filter((f) => existsSync(path.join(runtime.root, f)));
      expect(left, 'package managers left in the runtime stage').to.deep.equal([]);
      expect(existsSync(path.join(runtime.root, 'usr/local/bin/node'))).to.equal(true);
    });

    it('runs the entrypoint with --help', async () => {
      const [cmd, ...entry] = runtime.entrypoint ?? [];
      expect(cmd).to.equal('node');
      const r = await run(process.execPath, [...entry, '--help'], { cwd: app() });
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout).to.contain('Usage: machine-controller-manager');
      expect(r.stdout).to.contain('--control-kubeconfig');
    });

    it('serves a real control plane from the runtime stage alone: ready, then exit 0 on SIGTERM', async () => {
      let cp: ControlPlane | undefined;
      try {
        cp = await startControlPlane({ installCRDs: true });
        const port = await freePort();
        const [, ...entry] = runtime.entrypoint ?? [];
        // The gRPC server starts too, so its .proto files must be in the image.
        const help = await run(process.execPath, [...entry, '--help'], { cwd: app() });
        expect(help.stdout, 'the manager lists --grpc-address').to.include('--grpc-address');
        const grpc = [`--grpc-address=127.0.0.1:${await freePort()}`, '--grpc-insecure'];
        const child = spawn(
          process.execPath,
          [
            ...entry,
            `--control-kubeconfig=${cp.kubeconfigPath}`,
            '--namespace=default',
            '--leader-elect=false',
            '--address=127.0.0.1',
            `--port=${port}`,
            ...grpc,
          ],
          { cwd: app(), stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...runtime.env } },
        );
        let err = '';
        child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
        const exited = new Promise<number>((resolve) =>
          child.on('exit', (code) => {
            resolve(code ?? -1);
          }),
        );
        await until(
          'ready',
          () =>
            new Promise<boolean>((resolve) => {
              http
                .get(`http://127.0.0.1:${port}/readyz`, (res) => {
                  res.resume();
                  resolve(res.statusCode === 200);
                })
                .on('error', () => {
                  resolve(false);
                });
            }),
          60_000,
        );
        child.kill('SIGTERM');
        expect(await exited, err).to.equal(0);
        expect(err).to.contain('controllers started');
      } finally {
        await cp?.stop();
      }
    });
  });
});
