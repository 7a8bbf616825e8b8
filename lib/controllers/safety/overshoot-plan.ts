// The overshoot rule of the safety controller (pure): how many machines a MachineSet may hold, which
// of its machines count, and what to do about it. A set overshoots when more of its machines are
// meant to stay than it may ever need, by a margin (--safety-up): that happens when machines are
// created beyond the replicas (a second writer, a lost cache), never through a scale-down. So the
// machines a scale-down is removing do not count: those being deleted, those the autoscaler marked
// (their deployment's standing trigger-deletion marks), and, until the set has had one overshooting
// period to delete them, those above a limit that was just lowered.

import { scaledValue } from '../../api/intstr.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineDeployment, MachineSet } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { selectorMatches } from '../../kube/labels.js';
import { isTerminating, type AnyMachine } from '../machines.js';

type AnySet = MachineSet | DeepReadonly<MachineSet>;
type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

export interface Thresholds {
  high: number;
  low: number;
}

/**
 * The machine counts at which a MachineSet is frozen (high) and unfrozen again (low). A set owned
 * by a MachineDeployment may legitimately hold up to the deployment's replicas plus its surge
 * during a rollout; a standalone set never needs more than twice its replicas.
 */
export function overshootThresholds(
  ms: AnySet,
  mcd: AnyDeployment | undefined,
  safetyUp: number,
  safetyDown: number,
): Thresholds {
  let high = 2 * replicasOf(ms) + safetyUp;
  if (mcd !== undefined) {
    const replicas = replicasOf(mcd);
    const strategy = mcd.spec?.strategy;
    const maxSurge = strategy?.rollingUpdate?.maxSurge ?? strategy?.inPlaceUpdate?.maxSurge;
    let surge: number;
    try {
      surge = maxSurge === undefined ? 0 : scaledValue(maxSurge, replicas, true);
    } catch {
      // A malformed surge is reported by the MachineDeployment controller; count it as none here.
      surge = 0;
    }
    high = replicas + surge + safetyUp;
  }
  return { high, low: high - safetyDown };
}

/**
 * The set's machines that count toward an overshoot: its own (`owned`), carrying the template
 * labels, and meant to stay: not being deleted and not named by a standing autoscaler mark.
 */
export function overshootCount(ms: AnySet, owned: readonly AnyMachine[], going: ReadonlySet<string>): number {
  const templateLabels = ms.spec?.template?.metadata?.labels ?? {};
  return owned.filter(
    (m) =>
      !isTerminating(m) &&
      !going.has(m.metadata.name ?? '') &&
      selectorMatches({ matchLabels: templateLabels }, m.metadata.labels),
  ).length;
}

/**
 * High thresholds that were just lowered, by set key. When a scale-down lowers a set's limit, its
 * machines above the new limit are about to be deleted; for one overshooting period (gardener MCM
 * looks at a set at most once a period) the set is judged by the limit it had, which still catches
 * machines appearing beyond even that. Kept in memory: after a (re)start the controller does not
 * know what was lowered, so each set then keeps the machines its status last reported for one
 * period (`heldAtStart`).
 */
export class LoweredLimits {
  private readonly held = new Map<string, { high: number; until: number }>();

  /** The high threshold of `key` fell from `before` to `after` at `now`: hold `before` until `now + holdMs`. */
  lowered(key: string, before: number, after: number, now: number, holdMs: number): void {
    if (after >= before) return;
    const current = this.held.get(key);
    const high = current !== undefined && current.until > now ? Math.max(current.high, before) : before;
    this.held.set(key, { high, until: now + holdMs });
  }

  /** A set seen at start with `reported` machines (its status.replicas) keeps them for `holdMs`. */
  heldAtStart(key: string, reported: number, now: number, holdMs: number): void {
    this.held.set(key, { high: reported + 1, until: now + holdMs });
  }

  /** The high threshold in force for `key`, and until when a held one applies. */
  effective(key: string, high: number, now: number): { high: number; heldUntil?: number } {
    const held = this.held.get(key);
    if (held === undefined) return { high };
    if (held.until <= now) {
      this.held.delete(key);
      return { high };
    }
    return held.high > high ? { high: held.high, heldUntil: held.until } : { high };
  }

  forget(key: string): void {
    this.held.delete(key);
  }
}

export type OvershootAction =
  /** Set the freeze label and the Frozen condition (whichever is missing). */
  | 'freeze'
  /** Remove both: the count is back at or below the low threshold. */
  | 'unfreeze'
  /** Frozen and staying so: make sure the deployment is frozen too. */
  | 'frozen'
  | 'none';

/**
 * What to do with a set, given the count of machines that stay and its thresholds (`high` being the
 * one in force): freeze at high, unfreeze at low, and complete a freeze that got its label but not
 * its condition while the count stays above low.
 */
export function decideOvershoot(args: {
  count: number;
  high: number;
  low: number;
  labelled: boolean;
  conditioned: boolean;
}): OvershootAction {
  const { count, high, low, labelled, conditioned } = args;
  if (count >= high && !(labelled && conditioned)) return 'freeze';
  if (labelled && !conditioned && count > low) return 'freeze';
  if (count <= low && (labelled || conditioned)) return 'unfreeze';
  return labelled ? 'frozen' : 'none';
}
