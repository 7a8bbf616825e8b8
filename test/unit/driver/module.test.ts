import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { loadProviderModules, ProviderModuleError } from '../../../lib/driver/module.js';
import { ProviderRegistry } from '../../../lib/driver/registry.js';
import { nullLogger } from '../../../lib/observability/logger.js';

/** A module registering the given provider names; `extra` is appended to its source. */
const moduleSource = (names: string[], version = 1, extra = ''): string =>
  `export const providerApiVersion = ${version};
export function registerProviders(api) {
  for (const n of ${JSON.stringify(names)}) api.register(n, () => ({ driver: {} }), { providerIDPrefix: n + '://' });
}
${extra}`;

describe('provider modules (--provider-module)', () => {
  let dir: string;
  let registry: ProviderRegistry;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'provider-module-'));
    registry = new ProviderRegistry().register('virtual', () => ({ driver: {} as never }));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function file(name: string, source: string): Promise<string> {
    const p = path.join(dir, name);
    await mkdir(path.dirname(p), { recursive: true });
    await writeFile(p, source);
    return p;
  }

  async function loadError(specs: string[]): Promise<ProviderModuleError> {
    try {
      await loadProviderModules(specs, registry, nullLogger);
    } catch (err) {
      expect(err).to.be.instanceOf(ProviderModuleError);
      return err as ProviderModuleError;
    }
    throw new Error('expected the load to fail');
  }

  it('registers the providers of a module given by path, with their providerID prefixes', async () => {
    const p = await file('a.mjs', moduleSource(['cloud-a', 'cloud-b']));
    await loadProviderModules([p], registry, nullLogger);
    expect(registry.names()).to.deep.equal(['cloud-a', 'cloud-b', 'virtual']);
    expect(registry.providerOfID('cloud-b://zone/vm-1')).to.equal('cloud-b');
  });

  it('accepts the contract as a default export, and a package directory by its exports entry', async () => {
    await file(
      'pkg/package.json',
      JSON.stringify({ name: 'p', type: 'module', exports: { '.': { import: './lib/entry.js' } } }),
    );
    await file(
      'pkg/lib/entry.js',
      `export default { providerApiVersion: 1, registerProviders(api) { api.register('pkgcloud', () => ({ driver: {} })); } };`,
    );
    await loadProviderModules([path.join(dir, 'pkg')], registry, nullLogger);
    expect(registry.names()).to.include('pkgcloud');
  });

  it('refuses a module written for another provider API version, saying which', async () => {
    const p = await file('v2.mjs', moduleSource(['later'], 2));
    const err = await loadError([p]);
    expect(err.message).to.contain('written for provider API version 2').and.contain('serves version 1');
    expect(registry.names()).to.deep.equal(['virtual']);
  });

  it('refuses a module without registerProviders', async () => {
    const p = await file('empty.mjs', 'export const providerApiVersion = 1;');
    expect((await loadError([p])).message).to.contain('exports no registerProviders function');
  });

  it('refuses a name that is taken and registers nothing of that module', async () => {
    const p = await file('clash.mjs', moduleSource(['mine', 'virtual']));
    expect((await loadError([p])).message).to.contain('provider virtual is already registered');
    expect(registry.names()).to.deep.equal(['virtual']);
  });

  it('refuses an invalid provider name, a module that registers nothing, and one whose registration throws', async () => {
    expect((await loadError([await file('bad.mjs', moduleSource(['has space']))])).message).to.contain(
      'is not a valid MachineClass.provider value',
    );
    expect((await loadError([await file('none.mjs', moduleSource([]))])).message).to.contain(
      'registered no provider',
    );
    const throwing = await file(
      'throws.mjs',
      `export const providerApiVersion = 1; export function registerProviders() { throw new Error('no cloud account'); }`,
    );
    expect((await loadError([throwing])).message).to.contain('registerProviders failed: no cloud account');
  });

  it('says which module is missing or cannot be imported', async () => {
    expect((await loadError([path.join(dir, 'nope.mjs')])).message).to.contain('does not exist');
    const broken = await file('broken.mjs', 'export const = ;');
    expect((await loadError([broken])).message).to.contain(`provider module ${broken} could not be loaded`);
    expect((await loadError(['mcm-no-such-provider-package'])).message).to.contain(
      'provider module mcm-no-such-provider-package could not be loaded',
    );
  });
});
