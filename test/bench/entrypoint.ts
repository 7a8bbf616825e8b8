// The node flags a build's image starts the manager with, so that a benchmark runs each build
// (ours, or an earlier one as "before") exactly as its image would.

import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

const MANAGER = 'dist/cmd/manager.js';

/** The node flags of a Dockerfile's last ENTRYPOINT (`["node", …flags, "dist/cmd/manager.js"]`). */
export function entrypointNodeFlags(dockerfile: string): string[] {
  const lines = dockerfile.split('\n').filter((l) => /^\s*ENTRYPOINT\s/.test(l));
  const last = lines[lines.length - 1];
  if (last === undefined) throw new Error('the Dockerfile has no ENTRYPOINT');
  const argv: unknown = JSON.parse(last.replace(/^\s*ENTRYPOINT\s+/, ''));
  if (
    !Array.isArray(argv) ||
    argv.length < 2 ||
    !argv.every((a) => typeof a === 'string') ||
    argv[0] !== 'node' ||
    argv[argv.length - 1] !== MANAGER
  )
    throw new Error(`the ENTRYPOINT is not ["node", …, "${MANAGER}"]: ${last.trim()}`);
  return argv.slice(1, -1);
}

/** The node flags the checkout at `root` starts its manager with (none without a Dockerfile). */
export function managerNodeFlags(root: string): string[] {
  const file = path.join(root, 'Dockerfile');
  return existsSync(file) ? entrypointNodeFlags(readFileSync(file, 'utf8')) : [];
}
