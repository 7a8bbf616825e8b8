import { Registry, collectDefaultMetrics } from 'prom-client';

/**
 * One registry per process, created by the composition root and passed down. Components never
 * register on prom-client's global registry, so tests can build as many instances as they like.
 */
export function newRegistry(withProcessMetrics = false): Registry {
  const registry = new Registry();
  if (withProcessMetrics) collectDefaultMetrics({ register: registry });
  return registry;
}

export type { Registry } from 'prom-client';
