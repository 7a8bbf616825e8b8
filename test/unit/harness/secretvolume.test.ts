import { lstatSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { SecretVolume } from '../../harness/secretvolume.js';

describe('harness: SecretVolume (the kubelet’s atomic Secret volume layout)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'mcm-secretvolume-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('publishes every key through the ..data symlink and swaps all of them at once, removing the old version', () => {
    const vol = new SecretVolume(dir);
    vol.write({ 'tls.crt': 'cert 1', 'tls.key': 'key 1' });
    expect(lstatSync(vol.path('tls.crt')).isSymbolicLink()).to.equal(true);
    expect(readlinkSync(vol.path('tls.crt'))).to.equal(path.join('..data', 'tls.crt'));
    const first = readlinkSync(path.join(dir, '..data'));
    expect(readFileSync(vol.path('tls.key'), 'utf8')).to.equal('key 1');

    vol.write({ 'tls.crt': 'cert 2', 'tls.key': 'key 2' });
    expect(readFileSync(vol.path('tls.crt'), 'utf8')).to.equal('cert 2');
    expect(readFileSync(vol.path('tls.key'), 'utf8')).to.equal('key 2');
    expect(readlinkSync(path.join(dir, '..data'))).to.not.equal(first);
    expect(readdirSync(dir).sort()).to.deep.equal(
      ['..data', readlinkSync(path.join(dir, '..data')), 'tls.crt', 'tls.key'].sort(),
    );
  });
});
