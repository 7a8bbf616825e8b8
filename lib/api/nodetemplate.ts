// The resources of a node built from a MachineClass's nodeTemplate, shared by the autoscaler's
// template node and the virtual provider's Nodes so the two agree.

import { QUANTITY_MESSAGE, QUANTITY_PATTERN, quantityNanos } from './quantity.js';
import type { NodeTemplate, Quantity } from './types.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { FieldError } from './validation.js';

/** Pods a node admits when the class does not say (the kubelet's default --max-pods). */
export const DEFAULT_MAX_PODS = '110';

const quantityRegExp = new RegExp(QUANTITY_PATTERN);

export interface NodeResources {
  capacity: Record<string, string>;
  allocatable: Record<string, string>;
  /** Invalid quantities, and allocatable entries that are not a resource of the node or exceed it. */
  problems: FieldError[];
}

/**
 * Capacity and allocatable of a node of this template: capacity (plus virtualCapacity, when
 * asked for) with `pods` defaulting to 110, and allocatable taken from `nodeTemplate.allocatable`
 * (our addition) where it names a resource, else equal to the capacity (what gardener's autoscaler
 * provider assumes for every resource). An allocatable entry found invalid is replaced by the
 * capacity and reported in problems.
 */
export function nodeTemplateResources(
  t: NodeTemplate | DeepReadonly<NodeTemplate>,
  opts: { virtualCapacity: boolean },
): NodeResources {
  const problems: FieldError[] = [];
  const read = (
    list: Readonly<Record<string, Quantity>> | undefined,
    field: string,
  ): Record<string, string> => {
    const out: Record<string, string> = {};
    for (const [name, q] of Object.entries(list ?? {})) {
      out[name] = String(q);
      if (!quantityRegExp.test(out[name]))
        problems.push({ field: `${field}.${name}`, message: QUANTITY_MESSAGE });
    }
    return out;
  };
  // The type says capacity is there; an object that skipped admission may still lack it.
  const real = read(t.capacity, 'nodeTemplate.capacity');
  const virtual = read(t.virtualCapacity, 'nodeTemplate.virtualCapacity');
  if (!('pods' in real)) real.pods = DEFAULT_MAX_PODS;
  const every: Record<string, string> = { ...real, ...virtual };
  const accepted = new Map<string, string>();
  for (const [name, q] of Object.entries(read(t.allocatable, 'nodeTemplate.allocatable'))) {
    const of = every[name];
    const field = `nodeTemplate.allocatable.${name}`;
    if (!quantityRegExp.test(q)) continue;
    if (of === undefined) {
      problems.push({ field, message: 'must name a resource of nodeTemplate.capacity or virtualCapacity' });
      continue;
    }
    const have = quantityNanos(of);
    const want = quantityNanos(q);
    if (have !== undefined && want !== undefined && want > have) {
      problems.push({ field, message: `must not exceed the capacity (${of})` });
      continue;
    }
    accepted.set(name, q);
  }
  const capacity = opts.virtualCapacity ? every : real;
  const allocatable: Record<string, string> = {};
  for (const [name, q] of Object.entries(capacity)) allocatable[name] = accepted.get(name) ?? q;
  return { capacity, allocatable, problems };
}
