// npm run image:check — builds the Dockerfile for real and runs the image (docs/operations.md, "Container
// image"). No registry of container images is reachable here, so buildah builds the unchanged
// Dockerfile with NODE_IMAGE set to a local Debian base (hack/image/base.ts), and podman runs it:
// its configuration, --help, what is left in it, and the manager with the chart's flags and
// security context against a real kube-apiserver (the test harness) until `caches synced` and
// /readyz, then SIGTERM and exit 0.
//
// Needs root (debootstrap, chroot, the image store), buildah, podman, runc and debootstrap (apt-get
// installs them when missing and running as root), and the test tools of hack/tools.sh test
// (etcd, kube-apiserver, helm). Everything is kept under ~/.cache/mcm-ts/image (MCM_IMAGE_CACHE).

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { startControlPlane } from '../test/harness/controlplane.js';
import { freePort } from '../test/harness/process.js';
import { repoRoot } from '../test/harness/tools.js';
import { Helm, findDoc, parseManifests } from '../test/integration/env/chart.js';
import { BASE_IMAGE, baseNodeVersion, ensureBaseImage } from './image/base.js';
import { PODMAN, STORE, ULIMITS, capture, ensureTools, progress, seconds, step } from './image/exec.js';

const IMAGE = 'localhost/machine-controller-manager-ts:image-check';
const PACKAGE_MANAGERS = ['npm', 'npx', 'corepack', 'yarn', 'yarnpkg'];

interface Check {
  name: string;
  ok: boolean;
  detail: string;
}
const checks: Check[] = [];
function check(name: string, ok: boolean, detail = ''): void {
  checks.push({ name, ok, detail });
  progress(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail === '' ? '' : `: ${detail}`}`);
}

interface ImageInfo {
  Size: number;
  Config: { User?: string; Entrypoint?: string[]; Env?: string[] };
}
function inspect(image: string): ImageInfo {
  const list = JSON.parse(capture('podman', [...PODMAN, 'image', 'inspect', image])) as ImageInfo[];
  const info = list[0];
  if (info === undefined) throw new Error(`podman image inspect ${image}: nothing`);
  return info;
}

const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(0)} MB`;

function podmanRun(args: readonly string[]): string {
  return capture('podman', [...PODMAN, 'run', '--rm', '--network', 'host', ...ULIMITS, ...args]);
}

async function build(): Promise<number> {
  // A TLS-inspecting proxy in front of the npm registry: the build's RUN steps see the host's CA
  // bundle (mounted, never part of a layer).
  const ca = [process.env.NODE_EXTRA_CA_CERTS, '/etc/ssl/certs/ca-certificates.crt'].find(
    (f): f is string => f !== undefined && f !== '' && existsSync(f),
  );
  return step(
    `buildah bud --build-arg NODE_IMAGE=${BASE_IMAGE} (the Dockerfile as it is)`,
    'buildah',
    [
      ...STORE,
      'bud',
      '--layers',
      // A failed step's working container is removed too (it would stay mounted).
      '--force-rm',
      '--isolation',
      'chroot',
      '--network',
      'host',
      '--pull=never',
      ...(ca === undefined ? [] : ['--volume', `${ca}:/etc/ssl/certs/ca-certificates.crt:ro`]),
      '--build-arg',
      `NODE_IMAGE=${BASE_IMAGE}`,
      '--file',
      path.join(repoRoot, 'Dockerfile'),
      '--tag',
      IMAGE,
      repoRoot,
    ],
    { log: 'build', show: /^\[\d+\/\d+\] STEP \d+\/\d+: (FROM|RUN)/ },
  );
}

function checkImage(): void {
  const info = inspect(IMAGE);
  check('runs as uid/gid 1000', info.Config.User === '1000:1000', `USER ${info.Config.User ?? ''}`);
  check(
    'entrypoint node dist/cmd/manager.js, NODE_ENV=production',
    JSON.stringify(info.Config.Entrypoint) === JSON.stringify(['node', 'dist/cmd/manager.js']) &&
      (info.Config.Env ?? []).includes('NODE_ENV=production'),
    JSON.stringify(info.Config.Entrypoint),
  );
  const help = podmanRun([IMAGE, '--help']);
  check('--help', help.includes('Usage: machine-controller-manager'), help.split('\n')[0] ?? '');
  const managers = (image: string): string[] =>
    podmanRun([
      '--entrypoint',
      'sh',
      image,
      '-c',
      `for p in ${PACKAGE_MANAGERS.join(' ')}; do command -v $p || true; done`,
    ])
      .trim()
      .split('\n')
      .filter((l) => l !== '');
  const inBase = managers(BASE_IMAGE);
  check(
    'the base image has npm, npx, corepack and yarn where the official image has them',
    inBase.length === PACKAGE_MANAGERS.length && inBase.every((p) => p.startsWith('/usr/local/bin/')),
    inBase.join(' '),
  );
  const inside = podmanRun([
    '--entrypoint',
    'sh',
    IMAGE,
    '-c',
    `echo "user $(id -u):$(id -g)"; echo "node $(node --version)"; ` +
      `for p in ${PACKAGE_MANAGERS.join(' ')}; do command -v $p || true; done; ` +
      'ls -d /usr/local/lib/node_modules/* /opt/yarn-* 2>/dev/null || true',
  ]);
  const lines = inside.trim().split('\n');
  check('a shell in the image runs as 1000:1000', lines.includes('user 1000:1000'), lines[0] ?? '');
  const left = lines.filter((l) => l.startsWith('/'));
  check(
    'no npm, npx, corepack or yarn in the image',
    left.length === 0,
    left.length === 0 ? `${lines[1] ?? ''} only` : `left: ${left.join(' ')}`,
  );
}

function get(url: string): Promise<number> {
  return new Promise((resolve) => {
    http
      .get(url, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .on('error', () => {
        resolve(0);
      });
  });
}

/** The manager in the image, with the chart's flags, mounts and security context. */
async function runAgainstControlPlane(): Promise<void> {
  progress('control plane (etcd, kube-apiserver) …');
  const cp = await startControlPlane({ installCRDs: true });
  const work = mkdtempSync(path.join(tmpdir(), 'mcm-image-check-'));
  const name = `mcm-image-check-${process.pid}`;
  try {
    const docs = parseManifests(await new Helm().template('mcm', 'default'));
    const deployment = findDoc(docs, 'Deployment');
    const container = (deployment.spec as { template: { spec: { containers: { args: string[] }[] } } })
      .template.spec.containers[0];
    const tls = (findDoc(docs, 'Secret', '-grpc-server-tls').data ?? {}) as Record<string, string>;
    // Mounted files are read by uid 1000 (in the pod: fsGroup); a throwaway control plane's.
    writeFileSync(path.join(work, 'kubeconfig'), readFileSync(cp.kubeconfigPath), { mode: 0o644 });
    for (const k of ['tls.crt', 'tls.key', 'ca.crt'])
      writeFileSync(path.join(work, k), Buffer.from(tls[k] ?? '', 'base64'), { mode: 0o644 });
    const metricsPort = await freePort();
    const grpcPort = await freePort();
    const args = (container?.args ?? []).map((a) => {
      if (a.startsWith('--control-kubeconfig=')) return '--control-kubeconfig=/etc/mcm/kubeconfig';
      if (a.startsWith('--address=')) return '--address=127.0.0.1';
      if (a.startsWith('--port=')) return `--port=${metricsPort}`;
      if (a.startsWith('--grpc-address=')) return `--grpc-address=127.0.0.1:${grpcPort}`;
      return a;
    });
    progress(`manager: ${args.join(' ')}`);
    let log = '';
    const child = spawn(
      'podman',
      [
        ...PODMAN,
        'run',
        '--rm',
        '--name',
        name,
        '--network',
        'host',
        ...ULIMITS,
        // The chart's securityContext: uid/gid 1000, read-only root, /tmp an emptyDir, no
        // capabilities, no privilege escalation.
        '--user',
        '1000:1000',
        '--read-only',
        '--tmpfs',
        '/tmp',
        '--cap-drop',
        'ALL',
        '--security-opt',
        'no-new-privileges',
        '--volume',
        `${path.join(work, 'kubeconfig')}:/etc/mcm/kubeconfig:ro`,
        ...['tls.crt', 'tls.key', 'ca.crt'].flatMap((k) => [
          '--volume',
          `${path.join(work, k)}:/etc/mcm/grpc-tls/${k}:ro`,
        ]),
        IMAGE,
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout.setEncoding('utf8').on('data', (d: string) => (log += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (log += d));
    const exited = new Promise<number>((resolve) =>
      child.on('close', (code) => {
        resolve(code ?? -1);
      }),
    );
    const t0 = Date.now();
    let synced = false;
    let ready = false;
    while (Date.now() - t0 < 90_000 && !(synced && ready) && child.exitCode === null) {
      synced ||= log.includes('caches synced');
      ready ||= (await get(`http://127.0.0.1:${metricsPort}/readyz`)) === 200;
      await new Promise((r) => setTimeout(r, 500));
    }
    const tail = (): string => log.trimEnd().split('\n').slice(-15).join('\n');
    check(
      'the manager in the image logs `caches synced`',
      synced,
      synced ? seconds(Date.now() - t0) : tail(),
    );
    check('/readyz answers 200', ready);
    capture('podman', [...PODMAN, 'stop', '--time', '30', name]);
    const code = await exited;
    check('SIGTERM: exit 0', code === 0, code === 0 ? '' : `exit ${code}\n${tail()}`);
    check('no request forbidden', !/forbidden|\b403\b/i.test(log));
  } finally {
    await cp.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0)
    throw new Error('image:check needs root (debootstrap, chroot, the image store)');
  await ensureTools();
  const built = await ensureBaseImage();
  const buildMs = await build();
  checkImage();
  await runAgainstControlPlane();

  const image = inspect(IMAGE);
  const base = inspect(BASE_IMAGE);
  console.log('');
  console.log(`image        ${IMAGE}, ${mb(image.Size)} (base ${mb(base.Size)})`);
  console.log(
    `base         ${BASE_IMAGE} (${built ? 'built now' : 'cached'}): Debian trixie, nodejs ${baseNodeVersion()}`,
  );
  console.log(`build        ${seconds(buildMs)} (buildah --layers: unchanged steps come from the cache)`);
  const failed = checks.filter((c) => !c.ok);
  console.log(`image-check: ${checks.length - failed.length} passed, ${failed.length} failed`);
  if (failed.length > 0) process.exitCode = 1;
}

main().catch((err: unknown) => {
  console.error(`image-check: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
