// Out-of-tree providers: a module named by --provider-module registers drivers by provider name
// through a small, versioned API, so a team with a cloud of its own writes a provider without
// forking the manager. The module gets everything it needs from the manager at registration (the
// error class included), so it needs no runtime import of this package and works from any path.

import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import type { Logger } from '../observability/logger.js';
import { MachineError } from './codes.js';
import type { ProviderFactory, ProviderRegistry } from './registry.js';

/**
 * The provider module API version this manager serves. It changes only when the contract changes
 * incompatibly (the six driver calls, their error codes, ProviderContext, this file); a module
 * declares the version it was written for and a manager refuses one it does not serve.
 */
export const PROVIDER_API_VERSION = 1;

/** What a provider module's registerProviders is called with. */
export interface ProviderApi {
  readonly apiVersion: typeof PROVIDER_API_VERSION;
  /**
   * Registers a provider for `MachineClass.provider: <name>`. providerIDPrefix (such as
   * "example://") lets the orphan collection delete a VM whose class is gone by its providerID.
   */
  register(name: string, factory: ProviderFactory, opts?: { providerIDPrefix?: string }): void;
  /** The error drivers throw: `new api.MachineError('NotFound', 'no VM for machine m1')`. */
  readonly MachineError: typeof MachineError;
}

/** The shape a provider module exports (as named exports, or as its default export). */
export interface ProviderModule {
  /** The provider API version the module was written for (PROVIDER_API_VERSION). */
  providerApiVersion: number;
  registerProviders(api: ProviderApi): void | Promise<void>;
}

/** Provider names: what `MachineClass.provider` holds (gardener's are like `AWS`, `Azure`, `gcp`). */
const PROVIDER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** A module that could not be loaded or registered nothing usable; the message names it. */
export class ProviderModuleError extends Error {
  override name = 'ProviderModuleError';
}

/**
 * The import specifier for a --provider-module value: a path (absolute, or starting with `.`)
 * becomes a file URL, a directory its package's entry point; anything else is a package name,
 * resolved from the manager's own node_modules as an import would be.
 */
export function moduleSpecifier(spec: string, cwd = process.cwd()): string {
  const isPath = path.isAbsolute(spec) || spec.startsWith('./') || spec.startsWith('../') || spec === '.';
  if (!isPath) return spec;
  const full = path.resolve(cwd, spec);
  if (!existsSync(full)) throw new ProviderModuleError(`provider module ${spec}: ${full} does not exist`);
  return pathToFileURL(statSync(full).isDirectory() ? packageEntry(spec, full) : full).href;
}

/** The entry point of a package directory: exports["."] (import or default), main, index.js. */
function packageEntry(spec: string, dir: string): string {
  const manifest = path.join(dir, 'package.json');
  let entry = 'index.js';
  if (existsSync(manifest)) {
    let pkg: { exports?: unknown; main?: unknown };
    try {
      pkg = JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: unknown; main?: unknown };
    } catch (err) {
      throw new ProviderModuleError(`provider module ${spec}: package.json is not valid JSON`, {
        cause: err,
      });
    }
    const fromExports = exportedEntry(pkg.exports);
    if (fromExports !== undefined) entry = fromExports;
    else if (typeof pkg.main === 'string') entry = pkg.main;
  }
  const full = path.resolve(dir, entry);
  if (!existsSync(full))
    throw new ProviderModuleError(`provider module ${spec}: entry point ${full} does not exist`);
  return full;
}

function exportedEntry(exports: unknown): string | undefined {
  if (typeof exports === 'string') return exports;
  if (exports === null || typeof exports !== 'object') return undefined;
  const root: unknown = (exports as Record<string, unknown>)['.'] ?? exports;
  if (typeof root === 'string') return root;
  if (root === null || typeof root !== 'object') return undefined;
  const conditions = root as Record<string, unknown>;
  for (const c of ['import', 'node', 'default']) {
    const v = conditions[c];
    if (typeof v === 'string') return v;
  }
  return undefined;
}

function asProviderModule(spec: string, loaded: Record<string, unknown>): ProviderModule {
  const candidates = [loaded, loaded.default].filter(
    (c): c is Record<string, unknown> => c !== null && typeof c === 'object',
  );
  const mod = candidates.find((c) => typeof c.registerProviders === 'function');
  if (mod === undefined) {
    throw new ProviderModuleError(
      `provider module ${spec} exports no registerProviders function (see docs/writing-a-provider.md)`,
    );
  }
  const version = mod.providerApiVersion;
  if (version !== PROVIDER_API_VERSION) {
    throw new ProviderModuleError(
      `provider module ${spec} was written for provider API version ${typeof version === 'number' ? version : 'unknown (no providerApiVersion export)'}; this manager serves version ${PROVIDER_API_VERSION}`,
    );
  }
  return mod as unknown as ProviderModule;
}

/**
 * Loads the --provider-module values in order and lets each register its providers. Fails (with
 * the module's name) when a module cannot be imported, has the wrong API version, registers a
 * name that is taken or invalid, or registers nothing; a failed module registers nothing.
 */
export async function loadProviderModules(
  specs: readonly string[],
  registry: ProviderRegistry,
  logger: Logger,
  importer: (specifier: string) => Promise<Record<string, unknown>> = (s) =>
    import(s) as Promise<Record<string, unknown>>,
): Promise<void> {
  for (const spec of specs) {
    let loaded: Record<string, unknown>;
    try {
      loaded = await importer(moduleSpecifier(spec));
    } catch (err) {
      if (err instanceof ProviderModuleError) throw err;
      throw new ProviderModuleError(
        `provider module ${spec} could not be loaded: ${err instanceof Error ? err.message : String(err)}`,
        { cause: err },
      );
    }
    const mod = asProviderModule(spec, loaded);
    const pending: { name: string; factory: ProviderFactory; opts: { providerIDPrefix?: string } }[] = [];
    let open = true;
    const api: ProviderApi = {
      apiVersion: PROVIDER_API_VERSION,
      MachineError,
      register: (name, factory, opts = {}) => {
        if (!open)
          throw new ProviderModuleError(
            `provider module ${spec}: register() called after registration ended`,
          );
        if (typeof name !== 'string' || !PROVIDER_NAME.test(name)) {
          throw new ProviderModuleError(
            `provider module ${spec}: provider name ${JSON.stringify(name)} is not a valid MachineClass.provider value`,
          );
        }
        if (typeof factory !== 'function') {
          throw new ProviderModuleError(`provider module ${spec}: provider ${name} has no factory function`);
        }
        if (registry.names().includes(name) || pending.some((p) => p.name === name)) {
          throw new ProviderModuleError(`provider module ${spec}: provider ${name} is already registered`);
        }
        pending.push({ name, factory, opts });
      },
    };
    try {
      await mod.registerProviders(api);
    } catch (err) {
      if (err instanceof ProviderModuleError) throw err;
      throw new ProviderModuleError(
        `provider module ${spec}: registerProviders failed: ${err instanceof Error ? err.message : String(err)}`,
        { cause: err },
      );
    } finally {
      open = false;
    }
    if (pending.length === 0) throw new ProviderModuleError(`provider module ${spec} registered no provider`);
    for (const p of pending) registry.register(p.name, p.factory, p.opts);
    logger.info('provider module loaded', { module: spec, providers: pending.map((p) => p.name) });
  }
}
