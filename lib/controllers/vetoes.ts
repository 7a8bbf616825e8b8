// Pods that veto voluntary disruption of their node (Karpenter's karpenter.sh/do-not-disrupt=true,
// cluster-autoscaler's safe-to-evict=false): expiry and rebalance replacements do not start on such
// a node, and a machine already being replaced is not deleted while one runs there. A real
// interruption ignores them: its VM goes whatever we do.

import { Label, PodVetoAnnotation } from '../api/constants.js';
import type { Machine } from '../api/types.js';
import { POD_NODE_INDEX, type DrainCaches } from '../drain/caches.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { Pod } from '../kube/types.js';

/** A pod that vetoes voluntary disruption of its node. */
export interface Veto {
  pod: string;
  /** The annotation that vetoes, as `key=value`. */
  by: string;
}

const DO_NOT_DISRUPT = PodVetoAnnotation.DoNotDisrupt;
const SAFE_TO_EVICT = PodVetoAnnotation.SafeToEvict;

/** The veto a pod carries, if any (a pod that is going or done vetoes nothing). */
export function podVeto(p: DeepReadonly<Pod> | Pod): Veto | undefined {
  if (p.metadata.deletionTimestamp !== undefined) return undefined;
  if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') return undefined;
  const a = p.metadata.annotations ?? {};
  const pod = `${p.metadata.namespace ?? ''}/${p.metadata.name ?? ''}`;
  if (a[DO_NOT_DISRUPT] === 'true') return { pod, by: `${DO_NOT_DISRUPT}=true` };
  if (a[SAFE_TO_EVICT] === 'false') return { pod, by: `${SAFE_TO_EVICT}=false` };
  return undefined;
}

/** The first pod vetoing disruption of the machine's node, from the pod cache (none without one). */
export function machineVeto(
  pods: DrainCaches['pods'] | undefined,
  m: Machine | DeepReadonly<Machine>,
): Veto | undefined {
  const node = m.metadata.labels?.[Label.Node];
  if (pods === undefined || node === undefined || node === '') return undefined;
  for (const p of pods.byIndex(POD_NODE_INDEX, node)) {
    const v = podVeto(p);
    if (v !== undefined) return v;
  }
  return undefined;
}
