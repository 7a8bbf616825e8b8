// The local stand-in for node:26-trixie-slim: no registry of container images is reachable
// here, so the base is built from Debian's packages: a Debian 13 (trixie, the official image's
// release too) minbase with Debian's nodejs 20.19.x (no longer a supported release: the official
// 26 build would be the faithful base, still to do), laid out like the official image where the Dockerfile acts on it:
// npm, corepack and yarn from the npm registry under /usr/local and /opt (the official image's
// paths, which the runtime stage removes), and the node user as uid/gid 1000.

import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { CACHE, PODMAN, ULIMITS, capture, progress, step, succeeds } from './exec.js';

export const BASE_IMAGE = 'localhost/mcm-ts-base/node:20-trixie';
const SUITE = 'trixie';
const MIRROR = process.env.MCM_DEBIAN_MIRROR ?? 'http://deb.debian.org/debian';
/** npm as Node 20.19 bundles it; corepack and yarn as the official Node 22 images carry them. */
const NPM_PACKAGES = { npm: '10.8.2', corepack: '0.34.6', yarn: '1.22.22' };
const MIN_NODE = [20, 19];

/** The Node.js version the base image runs (`v20.19.2`). */
export function baseNodeVersion(): string {
  return capture('podman', [
    ...PODMAN,
    'run',
    '--rm',
    '--net',
    'host',
    ...ULIMITS,
    BASE_IMAGE,
    'node',
    '--version',
  ]).trim();
}

/** Builds the base image unless the store has it; returns whether it was built. */
export async function ensureBaseImage(): Promise<boolean> {
  if (succeeds('podman', [...PODMAN, 'image', 'exists', BASE_IMAGE])) {
    progress(`base image ${BASE_IMAGE}: cached`);
    return false;
  }
  progress(`base image ${BASE_IMAGE}: building (once; Debian ${SUITE} from ${MIRROR})`);
  const rootfs = path.join(CACHE, 'rootfs');
  rmSync(rootfs, { recursive: true, force: true });
  await step(
    `debootstrap ${SUITE} (minbase, nodejs)`,
    'debootstrap',
    ['--variant=minbase', '--include=nodejs,ca-certificates', SUITE, rootfs, MIRROR],
    { log: 'debootstrap', show: /^I: (Retrieving InRelease|Installing core packages|Base system installed)/ },
  );
  const node = capture('chroot', [rootfs, 'node', '--version']).trim();
  const [major = 0, minor = 0] = node.replace(/^v/, '').split('.').map(Number);
  if (major < (MIN_NODE[0] ?? 0) || (major === MIN_NODE[0] && minor < (MIN_NODE[1] ?? 0)))
    throw new Error(`Debian ${SUITE}'s nodejs is ${node}; the project needs >= ${MIN_NODE.join('.')}`);
  progress(`Debian ${SUITE}'s nodejs: ${node}`);

  const downloads = path.join(CACHE, 'downloads');
  mkdirSync(downloads, { recursive: true });
  const tarball = (name: string, version: string): string => path.join(downloads, `${name}-${version}.tgz`);
  const wanted = Object.entries(NPM_PACKAGES).filter(([n, v]) => !existsSync(tarball(n, v)));
  if (wanted.length > 0)
    await step(
      'npm pack npm, corepack, yarn',
      'npm',
      ['pack', ...wanted.map(([n, v]) => `${n}@${v}`), '--pack-destination', downloads, '--silent'],
      { log: 'npm-pack' },
    );
  const unpack = async (name: string, version: string, dir: string): Promise<void> => {
    mkdirSync(path.join(rootfs, dir), { recursive: true });
    await step(
      `unpack ${name} ${version}`,
      'tar',
      [
        '-xzf',
        tarball(name, version),
        '-C',
        path.join(rootfs, dir),
        '--strip-components=1',
        '--no-same-owner',
      ],
      { log: `unpack-${name}` },
    );
  };
  const modules = '/usr/local/lib/node_modules';
  await unpack('npm', NPM_PACKAGES.npm, `${modules}/npm`);
  await unpack('corepack', NPM_PACKAGES.corepack, `${modules}/corepack`);
  const yarnDir = `/opt/yarn-v${NPM_PACKAGES.yarn}`;
  await unpack('yarn', NPM_PACKAGES.yarn, yarnDir);
  const link = (target: string, at: string): void => {
    rmSync(path.join(rootfs, at), { force: true });
    symlinkSync(target, path.join(rootfs, at));
  };
  link('../lib/node_modules/npm/bin/npm-cli.js', '/usr/local/bin/npm');
  link('../lib/node_modules/npm/bin/npx-cli.js', '/usr/local/bin/npx');
  link('../lib/node_modules/corepack/dist/corepack.js', '/usr/local/bin/corepack');
  link(`${yarnDir}/bin/yarn`, '/usr/local/bin/yarn');
  link(`${yarnDir}/bin/yarnpkg`, '/usr/local/bin/yarnpkg');
  // npm's own config (removed with npm): trust the system CA bundle, so that a build can mount
  // the host's bundle over it (a TLS-inspecting proxy in front of the npm registry).
  writeFileSync(path.join(rootfs, modules, 'npm', 'npmrc'), 'cafile=/etc/ssl/certs/ca-certificates.crt\n');

  // Debian's nodejs depends on node-corepack (/usr/share/nodejs/corepack, /usr/bin/corepack);
  // the official image has corepack only under /usr/local, so Debian's copy goes.
  await step(
    'node user (1000:1000), no Debian corepack, no apt lists or docs',
    'chroot',
    [
      rootfs,
      'sh',
      '-ec',
      [
        'dpkg --purge --force-depends node-corepack',
        'groupadd --gid 1000 node',
        'useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
        'apt-get clean',
        'rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*',
      ].join('\n'),
    ],
    { log: 'base-setup' },
  );
  for (const d of readdirSync(path.join(rootfs, 'tmp')))
    rmSync(path.join(rootfs, 'tmp', d), { recursive: true });
  const tar = path.join(CACHE, 'rootfs.tar');
  await step('pack the root filesystem', 'tar', ['--numeric-owner', '-C', rootfs, '-cf', tar, '.'], {
    log: 'rootfs-tar',
  });
  await step(
    `podman import ${BASE_IMAGE}`,
    'podman',
    [
      ...PODMAN,
      'import',
      '--change',
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      '--change',
      'CMD ["node"]',
      tar,
      BASE_IMAGE,
    ],
    { log: 'podman-import' },
  );
  rmSync(tar, { force: true });
  rmSync(rootfs, { recursive: true, force: true });
  return true;
}
