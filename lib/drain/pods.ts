// Which pods a drain acts on, which PodDisruptionBudgets protect them, and when a drain is forced
// (pure; MCM's drain options: DaemonSet and mirror pods are skipped, pods without a controller and
// pods with emptyDir are drained too).

import { ExtensionAnnotation, Label } from '../api/constants.js';
import type { Machine } from '../api/types.js';
import type { DeepReadonly } from '../kube/informer.js';
import { selectorMatches } from '../kube/labels.js';
import type { Node, Pod, PodDisruptionBudget } from '../kube/types.js';

type AnyPod = Pod | DeepReadonly<Pod>;
type AnyPdb = PodDisruptionBudget | DeepReadonly<PodDisruptionBudget>;

const MIRROR = 'kubernetes.io/config.mirror';

export function podKey(p: AnyPod): string {
  return `${p.metadata.namespace ?? ''}/${p.metadata.name ?? ''}`;
}

export function isMirrorPod(p: AnyPod): boolean {
  return p.metadata.annotations?.[MIRROR] !== undefined;
}

export function isDaemonSetPod(p: AnyPod): boolean {
  return p.metadata.ownerReferences?.some((r) => r.controller === true && r.kind === 'DaemonSet') ?? false;
}

export function isFinished(p: AnyPod): boolean {
  const phase = p.status?.phase;
  return phase === 'Succeeded' || phase === 'Failed';
}

/** Names of the PersistentVolumeClaims a pod mounts. */
export function claimNames(p: AnyPod): string[] {
  return (p.spec?.volumes ?? []).flatMap((v) =>
    v.persistentVolumeClaim === undefined ? [] : [v.persistentVolumeClaim.claimName],
  );
}

/** Pods a drain must remove: not mirror pods, not DaemonSet pods, not already finished. */
export function podsToDrain<P extends AnyPod>(pods: readonly P[]): P[] {
  return pods.filter((p) => !isMirrorPod(p) && !isDaemonSetPod(p) && !isFinished(p));
}

/** Pods with volumes go one at a time, highest priority first (then by name, for stability). */
export function volumePodOrder(a: AnyPod, b: AnyPod): number {
  return (b.spec?.priority ?? 0) - (a.spec?.priority ?? 0) || podKey(a).localeCompare(podKey(b));
}

/** Budgets of the pod's namespace whose selector matches it (policy/v1: an empty selector matches all). */
export function matchingPdbs<B extends AnyPdb>(pod: AnyPod, pdbs: readonly B[]): B[] {
  return pdbs.filter(
    (b) =>
      b.metadata.namespace === pod.metadata.namespace &&
      b.spec?.selector !== undefined &&
      selectorMatches(b.spec.selector, pod.metadata.labels),
  );
}

/**
 * A budget that can never allow a disruption as configured (MCM's rule): its status is current,
 * it expects pods, all of them are healthy, none is being disrupted, and still it allows none —
 * e.g. maxUnavailable 0, or minAvailable equal to the number of pods. Waiting will not help.
 */
export function isMisconfiguredPdb(b: AnyPdb): boolean {
  const s = b.status;
  if (s === undefined) return false;
  return (
    (s.observedGeneration ?? -1) >= (b.metadata.generation ?? 0) &&
    (s.expectedPods ?? 0) > 0 &&
    (s.currentHealthy ?? 0) >= (s.expectedPods ?? 0) &&
    Object.keys(s.disruptedPods ?? {}).length === 0 &&
    (s.disruptionsAllowed ?? 0) === 0
  );
}

const UNHEALTHY_FORCE_AFTER_MS = 5 * 60_000;

function parseBool(v: string | undefined): boolean {
  return v !== undefined && ['1', 't', 'T', 'true', 'TRUE', 'True'].includes(v);
}

/** The interruption deadline of the machine's VM (its annotation), if any. */
export function interruptionDeadline(m: Machine | DeepReadonly<Machine>): number | undefined {
  const raw = m.metadata.annotations?.[ExtensionAnnotation.InterruptionDeadline];
  if (raw === undefined || raw === '') return undefined;
  const t = Date.parse(raw);
  return Number.isNaN(t) ? undefined : t;
}

/**
 * When a drain started at `startedAt` is forced at the latest: at the end of the drain timeout, or
 * at the machine's interruption deadline when that comes first.
 */
export function forceDeadline(
  m: Machine | DeepReadonly<Machine>,
  startedAt: number,
  drainTimeoutMs: number,
): number {
  const deadline = interruptionDeadline(m);
  return Math.min(startedAt + drainTimeoutMs, deadline ?? Number.POSITIVE_INFINITY);
}

/**
 * Why a machine's drain is forced (pods deleted without eviction), or undefined: the
 * `force-deletion` label; the drain timeout counted from the deletion request; the interruption
 * deadline of its VM (the cloud takes the VM then, with whatever still runs there: pods deleted
 * before are recreated elsewhere at once, instead of once the node is found gone); a VM its
 * provider reported failed (vm-failure) whose node is not Ready now (`node`: its kubelet cannot
 * act on evictions; while it is Ready the drain evicts, PodDisruptionBudgets respected); or a node
 * that has not been Ready (or had a read-only filesystem) for five minutes, whose pods cannot
 * leave anyway.
 */
export function forceReason(
  m: Machine | DeepReadonly<Machine>,
  now: number,
  drainTimeoutMs: number,
  node?: Node | DeepReadonly<Node>,
): string | undefined {
  if (parseBool(m.metadata.labels?.[Label.ForceDeletion]))
    return `the machine has the ${Label.ForceDeletion} label`;
  const requested = Date.parse(m.metadata.deletionTimestamp ?? '');
  if (!Number.isNaN(requested) && now - requested >= drainTimeoutMs) return 'the drain timeout passed';
  const deadline = interruptionDeadline(m);
  if (deadline !== undefined && now >= deadline)
    return `the interruption deadline of its VM (${new Date(deadline).toISOString()}) passed`;
  const failure = m.metadata.annotations?.[ExtensionAnnotation.VmFailure];
  if (failure !== undefined && failure !== '') {
    const ready = (node?.status?.conditions ?? m.status?.conditions ?? []).find((c) => c.type === 'Ready');
    if (ready?.status !== 'True')
      return `its provider reported the VM failed (${failure}) and its node is not Ready: its kubelet cannot act on evictions`;
  }
  for (const c of m.status?.conditions ?? []) {
    const since = Date.parse(c.lastTransitionTime ?? '');
    if (Number.isNaN(since) || now - since < UNHEALTHY_FORCE_AFTER_MS) continue;
    if (c.type === 'Ready' && c.status !== 'True') return 'the node has not been Ready for 5 minutes';
    if (c.type === 'ReadonlyFilesystem' && c.status !== 'False')
      return 'the node has had a read-only filesystem for 5 minutes';
  }
  return undefined;
}
