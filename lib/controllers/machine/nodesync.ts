// What a machine's Node should carry (pure): the machine-name label, the finalizer that keeps the
// Node until its machine is gone, the labels/annotations/taints of the machine's node template,
// the class's virtual capacity, and while the machine is being replaced (expiry, rebalance,
// interruption) the NoSchedule taint machine.mcm-ts.io/disrupted, so no new pod lands there. What was applied last time is recorded on the Node, so keys
// that leave the template are removed while keys users put on the Node stay untouched.

import {
  Annotation,
  ExtensionAnnotation,
  Finalizer,
  Label,
  TaintEffect,
  TaintKey,
} from '../../api/constants.js';
import type { Machine, MachineClass } from '../../api/types.js';
import { jsonEqual } from '../../kube/equal.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Node, Taint } from '../../kube/types.js';
import { isReplacing } from '../machines.js';

type AnyNode = Node | DeepReadonly<Node>;

interface AppliedTemplate {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: Taint[];
}

function parseApplied(raw: string | undefined): AppliedTemplate {
  const empty: AppliedTemplate = { labels: {}, annotations: {}, taints: [] };
  if (raw === undefined || raw === '') return empty;
  try {
    const v = JSON.parse(raw) as {
      metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
      spec?: { taints?: Taint[] };
    };
    return {
      labels: v.metadata?.labels ?? {},
      annotations: v.metadata?.annotations ?? {},
      taints: v.spec?.taints ?? [],
    };
  } catch {
    return empty;
  }
}

function appliedJSON(t: AppliedTemplate): string {
  const out: { metadata?: Record<string, unknown>; spec?: Record<string, unknown> } = {};
  const metadata: Record<string, unknown> = {};
  if (Object.keys(t.labels).length > 0) metadata.labels = t.labels;
  if (Object.keys(t.annotations).length > 0) metadata.annotations = t.annotations;
  if (Object.keys(metadata).length > 0) out.metadata = metadata;
  if (t.taints.length > 0) out.spec = { taints: t.taints };
  return JSON.stringify(out);
}

const taintKey = (t: Pick<Taint, 'key' | 'effect'>): string => `${t.key}:${t.effect}`;

export interface NodeSyncPlan {
  /** Merge patch of metadata/spec, undefined when nothing differs. */
  patch?: Record<string, unknown> | undefined;
  /** Merge patch of the node's status (virtual capacity), undefined when nothing differs. */
  statusPatch?: Record<string, unknown> | undefined;
}

/** Brings a Node in line with its machine. `withFinalizer` is false while the machine is being deleted. */
export function planNodeSync(
  node: AnyNode,
  machine: Machine | DeepReadonly<Machine>,
  cls: MachineClass | DeepReadonly<MachineClass> | undefined,
  withFinalizer: boolean,
): NodeSyncPlan {
  const tmpl = machine.spec?.nodeTemplate;
  const want: AppliedTemplate = {
    labels: { ...(tmpl?.metadata?.labels ?? {}) },
    annotations: { ...(tmpl?.metadata?.annotations ?? {}) },
    taints: (tmpl?.spec?.taints ?? []).map((t) => ({ ...t })),
  };
  const prevRaw = node.metadata.annotations?.[Annotation.LastAppliedAnnotationsLabelsTaints];
  const prev = parseApplied(prevRaw);
  const labels: Record<string, string | null> = {};
  const annotations: Record<string, string | null> = {};
  const haveLabels = node.metadata.labels ?? {};
  const haveAnnotations = node.metadata.annotations ?? {};

  for (const k of Object.keys(prev.labels)) if (!(k in want.labels) && k in haveLabels) labels[k] = null;
  for (const [k, v] of Object.entries(want.labels)) if (haveLabels[k] !== v) labels[k] = v;
  const machineName = machine.metadata.name ?? '';
  if (haveLabels[Label.NodeMachineName] !== machineName) labels[Label.NodeMachineName] = machineName;

  for (const k of Object.keys(prev.annotations))
    if (!(k in want.annotations) && k in haveAnnotations) annotations[k] = null;
  for (const [k, v] of Object.entries(want.annotations)) if (haveAnnotations[k] !== v) annotations[k] = v;
  const applied = appliedJSON(want);
  const anyTemplate =
    Object.keys(want.labels).length + Object.keys(want.annotations).length + want.taints.length > 0;
  if (anyTemplate && prevRaw !== applied)
    annotations[Annotation.LastAppliedAnnotationsLabelsTaints] = applied;
  if (!anyTemplate && prevRaw !== undefined)
    annotations[Annotation.LastAppliedAnnotationsLabelsTaints] = null;

  // Taints: drop what the template had and no longer has, add or update what it has now.
  const haveTaints: Taint[] = (node.spec?.taints ?? []).map((t) => ({ ...t }));
  const wantKeys = new Set(want.taints.map(taintKey));
  const dropped = new Set(prev.taints.map(taintKey).filter((k) => !wantKeys.has(k)));
  let taints = haveTaints.filter((t) => !dropped.has(taintKey(t)));
  for (const t of want.taints) {
    const i = taints.findIndex((x) => taintKey(x) === taintKey(t));
    if (i < 0) taints.push(t);
    else if ((taints[i]?.value ?? '') !== (t.value ?? '')) taints[i] = { ...t };
  }
  // The disrupted taint: on while the machine is being replaced (none of the template's business).
  const replacing = isReplacing(machine)
    ? (machine.metadata.annotations?.[ExtensionAnnotation.Replacing] ?? '')
    : undefined;
  const at = taints.findIndex((t) => t.key === TaintKey.Disrupted && t.effect === TaintEffect.NoSchedule);
  if (replacing !== undefined) {
    const disrupted: Taint = { key: TaintKey.Disrupted, value: replacing, effect: TaintEffect.NoSchedule };
    if (at < 0) taints.push(disrupted);
    else if (taints[at]?.value !== replacing) taints[at] = disrupted;
  } else if (at >= 0) {
    taints = taints.filter((_, i) => i !== at);
  }
  const taintsChanged = !jsonEqual(taints, haveTaints);
  if (!taintsChanged) taints = haveTaints;

  // Virtual capacity of the class, merged into status.capacity and remembered on the node.
  const virtual: Record<string, string> = {};
  for (const [k, v] of Object.entries(cls?.nodeTemplate?.virtualCapacity ?? {})) virtual[k] = String(v);
  const prevVirtual = parseVirtual(haveAnnotations[Annotation.LastAppliedVirtualCapacity]);
  const capacity: Record<string, string | null> = {};
  const haveCapacity = node.status?.capacity ?? {};
  for (const k of Object.keys(prevVirtual)) if (!(k in virtual) && k in haveCapacity) capacity[k] = null;
  for (const [k, v] of Object.entries(virtual)) if (haveCapacity[k] !== v) capacity[k] = v;
  const virtualJSON = Object.keys(virtual).length === 0 ? undefined : JSON.stringify(virtual);
  if (haveAnnotations[Annotation.LastAppliedVirtualCapacity] !== virtualJSON) {
    annotations[Annotation.LastAppliedVirtualCapacity] = virtualJSON ?? null;
  }

  const finalizers = [...(node.metadata.finalizers ?? [])];
  const hasFinalizer = finalizers.includes(Finalizer.MachineControllerNode);
  let finalizersChanged = false;
  if (withFinalizer && !hasFinalizer) {
    finalizers.push(Finalizer.MachineControllerNode);
    finalizersChanged = true;
  }

  const plan: NodeSyncPlan = {};
  const metadata: Record<string, unknown> = {};
  if (Object.keys(labels).length > 0) metadata.labels = labels;
  if (Object.keys(annotations).length > 0) metadata.annotations = annotations;
  if (finalizersChanged) metadata.finalizers = finalizers;
  const spec = taintsChanged ? { taints: taints.length === 0 ? null : taints } : undefined;
  if (Object.keys(metadata).length > 0 || spec !== undefined) {
    // Lists (finalizers, taints) are replaced whole: conditional on what they were computed from.
    if (finalizersChanged || spec !== undefined) metadata.resourceVersion = node.metadata.resourceVersion;
    plan.patch = { metadata, ...(spec === undefined ? {} : { spec }) };
  }
  if (Object.keys(capacity).length > 0) plan.statusPatch = { status: { capacity } };
  return plan;
}

function parseVirtual(raw: string | undefined): Record<string, string> {
  if (raw === undefined || raw === '') return {};
  try {
    return JSON.parse(raw) as Record<string, string>;
  } catch {
    return {};
  }
}
