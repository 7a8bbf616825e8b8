import { readFileSync } from 'node:fs';
import path from 'node:path';

import { expect } from 'chai';

import { repoRoot } from '../../harness/tools.js';

/** NODE_IMAGE_VERSION and NODE_OTHER_VERSIONS of hack/versions.env. */
function pinnedNodeVersions(): { image: string; others: string[] } {
  const env = readFileSync(path.join(repoRoot, 'hack', 'versions.env'), 'utf8');
  const get = (k: string): string => new RegExp(`^${k}=(\\S+)$`, 'm').exec(env)?.[1] ?? '';
  return { image: get('NODE_IMAGE_VERSION'), others: get('NODE_OTHER_VERSIONS').split(',') };
}

const triple = (v: string): number[] => v.split('.').map(Number);
const cmp = (a: number[], b: number[]): number => {
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
  return 0;
};

/** Whether a version meets an engines range made of `^x.y.z` and `>=x.y.z` parts joined by `||`. */
function satisfies(version: string, range: string): boolean {
  const v = triple(version);
  return range.split('||').some((part) => {
    const m = /^\s*(\^|>=)(\d+\.\d+\.\d+)\s*$/.exec(part);
    if (m === null) throw new Error(`engines part not understood: ${part}`);
    const base = triple(m[2] ?? '');
    return m[1] === '>=' ? cmp(v, base) >= 0 : v[0] === base[0] && cmp(v, base) >= 0;
  });
}

describe('supported Node.js releases', () => {
  const pinned = pinnedNodeVersions();
  const engines = (
    JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { engines: { node: string } }
  ).engines.node;

  it('pins the Node.js release of the Dockerfile’s base image as the image’s version', () => {
    const dockerfile = readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8');
    expect(dockerfile).to.match(/^ARG NODE_IMAGE=node:(\d+)-(bookworm|trixie)-slim@sha256:[0-9a-f]{64}$/m);
    const major = /^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile)?.[1];
    expect(pinned.image.split('.')[0]).to.equal(major);
    expect(dockerfile).to.contain(`Node ${pinned.image},`);
  });

  it('declares in engines every pinned release CI runs, one per major line, and not Node 20 (end of life)', () => {
    const all = [pinned.image, ...pinned.others];
    for (const v of all) expect(satisfies(v, engines), `${v} in ${engines}`).to.equal(true);
    expect(new Set(all.map((v) => v.split('.')[0])).size).to.equal(all.length);
    expect(satisfies('20.19.2', engines)).to.equal(false);
    expect(satisfies('25.0.0', engines), 'an odd line past its end of life').to.equal(false);
  });
});
