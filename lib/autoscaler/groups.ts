// Node groups: which MachineDeployments the cluster-autoscaler may scale, and within which limits.
// A group comes from the --nodes flag (gardener's autoscaler form MIN:MAX:NAMESPACE.NAME) or from
// min/max annotations on the MachineDeployment; the annotations win, so limits can change with
// `kubectl annotate` and no restart. Pure functions only.

import type { MachineDeployment } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';

/** MachineDeployment annotations that make it a node group (or override the flag's limits). */
export const GroupAnnotation = {
  MinSize: 'autoscaler.mcm-ts.io/min-size',
  MaxSize: 'autoscaler.mcm-ts.io/max-size',
} as const;

/** One --nodes entry. */
export interface NodeGroupFlag {
  min: number;
  max: number;
  namespace: string;
  name: string;
}

/** A served node group. */
export interface NodeGroup {
  /** `NAMESPACE/NAME` of the MachineDeployment. */
  id: string;
  namespace: string;
  name: string;
  min: number;
  max: number;
  /** Where the limits come from. */
  source: 'flag' | 'annotations';
}

/** Why a configured deployment is not served as a group (for logs and events). */
export interface GroupProblem {
  id: string;
  message: string;
}

type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

export function groupId(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** Splits a group id; undefined when it is not NAMESPACE/NAME. */
export function parseGroupId(id: string): { namespace: string; name: string } | undefined {
  const i = id.indexOf('/');
  if (i <= 0 || i === id.length - 1 || id.includes('/', i + 1)) return undefined;
  return { namespace: id.slice(0, i), name: id.slice(i + 1) };
}

const SIZE = /^(0|[1-9]\d{0,8})$/;

/** Parses one --nodes value, MIN:MAX:NAMESPACE.NAME; throws with a message naming the problem. */
export function parseNodeGroupFlag(value: string): NodeGroupFlag {
  const parts = value.split(':');
  const [min, max, target] = parts;
  if (parts.length !== 3 || min === undefined || max === undefined || target === undefined) {
    throw new Error(`expected MIN:MAX:NAMESPACE.NAME, got "${value}"`);
  }
  if (!SIZE.test(min) || !SIZE.test(max)) {
    throw new Error(`MIN and MAX must be non-negative integers, got "${value}"`);
  }
  const dot = target.indexOf('.');
  if (dot <= 0 || dot === target.length - 1) {
    throw new Error(
      `expected NAMESPACE.NAME after the sizes (the deployment name may contain dots), got "${target}"`,
    );
  }
  const g = {
    min: Number(min),
    max: Number(max),
    namespace: target.slice(0, dot),
    name: target.slice(dot + 1),
  };
  if (g.max < g.min) throw new Error(`MAX (${g.max}) is below MIN (${g.min}) in "${value}"`);
  return g;
}

function sizeAnnotation(
  annotations: Readonly<Record<string, string>>,
  key: string,
): { value: number } | { error: string } | undefined {
  const raw = annotations[key];
  if (raw === undefined) return undefined;
  const v = raw.trim();
  if (!SIZE.test(v)) return { error: `annotation ${key}="${raw}" is not a non-negative integer` };
  return { value: Number(v) };
}

/**
 * The groups served, from the deployments in the cache and the --nodes flag. A deployment is a
 * group when the flag names it or it carries both size annotations; annotations override the
 * flag's limits one by one. Groups with max 0 are not served (nothing to scale), nor deployments
 * being deleted. Deployments with invalid annotations are reported, not served.
 */
export function discoverGroups(
  deployments: readonly AnyDeployment[],
  flags: readonly NodeGroupFlag[],
): { groups: NodeGroup[]; problems: GroupProblem[] } {
  const byId = new Map<string, NodeGroupFlag>();
  for (const f of flags) byId.set(groupId(f.namespace, f.name), f);
  const groups: NodeGroup[] = [];
  const problems: GroupProblem[] = [];
  for (const mcd of deployments) {
    const namespace = mcd.metadata.namespace ?? '';
    const name = mcd.metadata.name ?? '';
    const id = groupId(namespace, name);
    if (mcd.metadata.deletionTimestamp !== undefined) continue;
    const flag = byId.get(id);
    const annotations = mcd.metadata.annotations ?? {};
    const min = sizeAnnotation(annotations, GroupAnnotation.MinSize);
    const max = sizeAnnotation(annotations, GroupAnnotation.MaxSize);
    if (flag === undefined && (min === undefined || max === undefined)) {
      if (min !== undefined || max !== undefined) {
        problems.push({
          id,
          message: `needs both ${GroupAnnotation.MinSize} and ${GroupAnnotation.MaxSize} (or a --nodes entry) to be a node group`,
        });
      }
      continue;
    }
    const bad = [min, max].find((s): s is { error: string } => s !== undefined && 'error' in s);
    if (bad !== undefined) {
      problems.push({ id, message: bad.error });
      continue;
    }
    const g: NodeGroup = {
      id,
      namespace,
      name,
      min: min !== undefined && 'value' in min ? min.value : (flag?.min ?? 0),
      max: max !== undefined && 'value' in max ? max.value : (flag?.max ?? 0),
      source: min !== undefined || max !== undefined ? 'annotations' : 'flag',
    };
    if (g.max < g.min) {
      problems.push({ id, message: `max size ${g.max} is below min size ${g.min}` });
      continue;
    }
    if (g.max === 0) continue;
    groups.push(g);
  }
  groups.sort((a, b) => a.id.localeCompare(b.id));
  return { groups, problems };
}
