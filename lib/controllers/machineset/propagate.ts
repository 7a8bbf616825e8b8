import { Annotation, PreserveValue } from '../../api/constants.js';
import { MACHINE_CONFIGURATION_FIELDS, type MachineSet } from '../../api/types.js';
import { jsonEqual, withoutGoZeroValues } from '../../kube/equal.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { isFailed, isTerminating, type AnyMachine } from '../machines.js';

const same = jsonEqual;

/**
 * Node templates compared as the Go structs behind them: gardener's provider-side machine
 * controller writes an unset template back as `{metadata: {creationTimestamp: null}, spec: {}}`,
 * which is the same template as none at all and must not be "corrected" on every write it makes.
 */
const sameNodeTemplate = (a: unknown, b: unknown): boolean =>
  jsonEqual(withoutGoZeroValues(a), withoutGoZeroValues(b));

/**
 * The merge patch bringing a machine's node template, machine configuration and class kind in
 * line with its MachineSet's template, or undefined when nothing differs. These fields change in
 * place (no new machine): node labels/taints and timeouts are not a reason to replace a VM.
 * Machines being deleted or Failed keep what they have, except the class kind.
 */
export function propagationPatch(
  ms: MachineSet | DeepReadonly<MachineSet>,
  m: AnyMachine,
): { spec: Record<string, unknown> } | undefined {
  const tmpl = ms.spec?.template?.spec ?? {};
  const spec: Record<string, unknown> = {};
  if (!isTerminating(m) && !isFailed(m)) {
    if (!sameNodeTemplate(tmpl.nodeTemplate, m.spec?.nodeTemplate))
      spec.nodeTemplate = tmpl.nodeTemplate ?? null;
    const effectiveTimeout = ms.metadata.annotations?.[Annotation.EffectiveCreationTimeout];
    for (const f of MACHINE_CONFIGURATION_FIELDS) {
      const want = f === 'creationTimeout' && effectiveTimeout !== undefined ? effectiveTimeout : tmpl[f];
      if (!same(want, m.spec?.[f])) spec[f] = want ?? null;
    }
  }
  const kind = tmpl.class?.kind;
  if (kind !== undefined && kind !== m.spec?.class?.kind) spec.class = { kind };
  return Object.keys(spec).length === 0 ? undefined : { spec };
}

const validPreserveValues = new Set<string>([
  PreserveValue.Now,
  PreserveValue.WhenFailed,
  PreserveValue.AutoPreserved,
  PreserveValue.False,
]);

export interface PreservationPlan<M extends AnyMachine> {
  /** Failed machines to annotate preserve=auto-preserved. */
  preserve: M[];
  /** Machines whose auto-preserved annotation is removed (the limit was lowered). */
  unpreserve: M[];
}

/**
 * Auto-preservation of failed machines for debugging, bounded by autoPreserveFailedMachineMax:
 * below the limit the newest Failed machines without a preserve request of their own are marked
 * auto-preserved; above it (the limit was lowered) the oldest auto-preserved ones are released.
 * While the set's deployment is rolling (another of its sets still has machines) no machine is
 * newly auto-preserved: a preserved Failed machine counts toward replicas, so in the new set it
 * would hold the rollout until its preservation expired (gardener MCM #1137). Machines preserved
 * already, and those a user asked to preserve, stay preserved.
 */
export function planAutoPreservation<M extends AnyMachine>(
  ms: MachineSet | DeepReadonly<MachineSet>,
  machines: readonly M[],
  opts: { rolling?: boolean } = {},
): PreservationPlan<M> {
  const max = ms.spec?.autoPreserveFailedMachineMax ?? 0;
  const created = (m: AnyMachine): number => Date.parse(m.metadata.creationTimestamp ?? '') || 0;
  const auto = machines.filter(
    (m) => m.metadata.annotations?.[Annotation.Preserve] === PreserveValue.AutoPreserved,
  );
  const plan: PreservationPlan<M> = { preserve: [], unpreserve: [] };
  if (auto.length > max) {
    plan.unpreserve = [...auto].sort((a, b) => created(a) - created(b)).slice(0, auto.length - max);
    return plan;
  }
  const room = opts.rolling === true ? 0 : max - auto.length;
  if (room <= 0) return plan;
  const candidates = machines
    .filter((m) => isFailed(m) && !isTerminating(m))
    .filter((m) => !validPreserveValues.has(m.metadata.annotations?.[Annotation.Preserve] ?? ''))
    .sort((a, b) => created(b) - created(a));
  plan.preserve = candidates.slice(0, room);
  return plan;
}
