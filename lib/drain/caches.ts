// The target-cluster caches a drain reads, and how they are indexed and trimmed.

import { PodVetoAnnotation } from '../api/constants.js';
import type { Informer } from '../kube/informer.js';
import type {
  PersistentVolume,
  PersistentVolumeClaim,
  Pod,
  PodDisruptionBudget,
  VolumeAttachment,
} from '../kube/types.js';

export interface DrainCaches {
  pods: Informer<Pod>;
  podDisruptionBudgets: Informer<PodDisruptionBudget>;
  persistentVolumeClaims: Informer<PersistentVolumeClaim>;
  persistentVolumes: Informer<PersistentVolume>;
  volumeAttachments: Informer<VolumeAttachment>;
}

/** Pods by spec.nodeName. */
export const POD_NODE_INDEX = 'podNode';
/** VolumeAttachments by spec.nodeName. */
export const ATTACHMENT_NODE_INDEX = 'attachmentNode';
/** VolumeAttachments by the PersistentVolume they attach. */
export const ATTACHMENT_PV_INDEX = 'attachmentPV';

/** Annotation of mirror pods (static pods the kubelet runs). */
export const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';

/**
 * The pod annotations the caches keep: the mirror annotation (the drain skips mirror pods) and the
 * two that veto voluntary disruption of a pod's node (expiry waits for them).
 */
const KEPT_POD_ANNOTATIONS: readonly string[] = [
  MIRROR_POD_ANNOTATION,
  PodVetoAnnotation.DoNotDisrupt,
  PodVetoAnnotation.SafeToEvict,
];

/**
 * What the pod cache keeps of a pod: identity, creation time (displaced.ts), labels (PodDisruptionBudget selectors), owner kinds
 * (DaemonSet pods are skipped), the mirror and disruption-veto annotations, node, priority, grace period, claims and
 * phase. Everything else is dropped, so a cache of every pod in a large cluster stays small.
 */
export function trimPod(p: Pod): Pod {
  const m = p.metadata;
  const kept: Record<string, string> = {};
  for (const k of KEPT_POD_ANNOTATIONS) {
    const v = m.annotations?.[k];
    if (v !== undefined) kept[k] = v;
  }
  const trimmed: Pod = {
    metadata: {
      ...(m.name === undefined ? {} : { name: m.name }),
      ...(m.namespace === undefined ? {} : { namespace: m.namespace }),
      ...(m.uid === undefined ? {} : { uid: m.uid }),
      ...(m.resourceVersion === undefined ? {} : { resourceVersion: m.resourceVersion }),
      ...(m.creationTimestamp === undefined ? {} : { creationTimestamp: m.creationTimestamp }),
      ...(m.labels === undefined ? {} : { labels: m.labels }),
      ...(Object.keys(kept).length === 0 ? {} : { annotations: kept }),
      ...(m.ownerReferences === undefined
        ? {}
        : {
            ownerReferences: m.ownerReferences.map((r) => ({
              apiVersion: r.apiVersion,
              kind: r.kind,
              name: r.name,
              uid: r.uid,
              ...(r.controller === undefined ? {} : { controller: r.controller }),
            })),
          }),
      ...(m.deletionTimestamp === undefined ? {} : { deletionTimestamp: m.deletionTimestamp }),
      ...(m.deletionGracePeriodSeconds === undefined
        ? {}
        : { deletionGracePeriodSeconds: m.deletionGracePeriodSeconds }),
    },
  };
  const spec = p.spec ?? {};
  const claims = (spec.volumes ?? []).flatMap((v) =>
    v.persistentVolumeClaim === undefined
      ? []
      : [{ name: v.name, persistentVolumeClaim: v.persistentVolumeClaim }],
  );
  trimmed.spec = {
    ...(spec.nodeName === undefined ? {} : { nodeName: spec.nodeName }),
    ...(spec.priority === undefined ? {} : { priority: spec.priority }),
    ...(spec.terminationGracePeriodSeconds === undefined
      ? {}
      : { terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds }),
    ...(claims.length === 0 ? {} : { volumes: claims }),
  };
  if (p.status?.phase !== undefined) trimmed.status = { phase: p.status.phase };
  return trimmed;
}
