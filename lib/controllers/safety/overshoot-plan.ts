// The overshoot rule of the safety controller (pure): how many machines a MachineSet may hold, which
// of its machines count, and what to do about it. A set overshoots when more of its machines are
// meant to stay than it may ever need, by a margin (--safety-up): that happens when machines are
// created beyond the replicas (a second writer, a lost cache), never through a scale-down. So the
// machines a scale-down is removing do not count: those being deleted, those the autoscaler marked
// (their deployment's standing trigger-deletion marks), and, for as long as the scale-down keeps
// removing machines, those above a limit that was just lowered (LoweredLimits).

import { scaledValue } from '../../api/intstr.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineDeployment, MachineSet } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { selectorMatches } from '../../kube/labels.js';
import { isInterrupted, isTerminating, type AnyMachine } from '../machines.js';

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
 * labels, not being deleted, not named by a standing autoscaler mark, and not interrupted (their
 * VM goes whatever we do: their replacement counts in their place, one for one). A machine being
 * replaced for a voluntary reason (expiry, rebalance) counts beside its replacement: such surges
 * stay within the deployment's maxSurge, and a storm of them beyond it freezes the set.
 */
export function overshootCount(ms: AnySet, owned: readonly AnyMachine[], going: ReadonlySet<string>): number {
  const templateLabels = ms.spec?.template?.metadata?.labels ?? {};
  return owned.filter(
    (m) =>
      !isTerminating(m) &&
      !isInterrupted(m) &&
      !going.has(m.metadata.name ?? '') &&
      selectorMatches({ matchLabels: templateLabels }, m.metadata.labels),
  ).length;
}

/** The limit a set is held at while a scale-down that lowered its limit runs (see LoweredLimits). */
interface Hold {
  /**
   * The count that freezes the set: the former limit until the set is next checked, then the
   * fewest machines seen staying since the scale-down began, plus the margin.
   */
  high: number;
  /** When that count last fell (or the hold began). */
  since: number;
}

/**
 * Limits lowered by a scale-down, held while it runs, by set key. A scale-down takes as long as it
 * takes: a MachineSet deletes at most its burst of machines per pass, through a client whose budget
 * it shares, so hibernating hundreds of machines outlasts any fixed time. Until it is done the set
 * is not judged by its new limit but by what it held: the former limit at first, then, at each
 * check, the fewest machines seen staying plus the margin (--safety-up, at least one). So the held
 * limit follows the machines down, and machines appearing during the scale-down (the count rising
 * by the margin, the same margin the normal rule allows) still freeze the set at once. The hold
 * ends when the count is back under the new limit (caught up), or when it has not fallen for a
 * whole overshooting period (the scale-down is stuck, and machines it does not remove are judged
 * by the normal rule). Kept in memory: after a (re)start the controller does not know what was
 * lowered, so each set starts held at the machines its status last reported (`heldAtStart`).
 */
export class LoweredLimits {
  private readonly held = new Map<string, Hold>();
  private readonly margin: number;
  private readonly periodMs: number;

  constructor(opts: { safetyUp: number; periodMs: number }) {
    // With a margin of 0 a count that merely stayed would count as a rise.
    this.margin = Math.max(opts.safetyUp, 1);
    this.periodMs = opts.periodMs;
  }

  /** The limit of `key` fell from `before` to `after` at `now`: hold `before` (or more, if held). */
  lowered(key: string, before: number, after: number, now: number): void {
    if (after >= before) return;
    const current = this.held.get(key);
    this.held.set(key, { high: Math.max(current?.high ?? 0, before), since: now });
  }

  /** A set seen at start with `reported` machines (its status.replicas) is held at them plus the margin. */
  heldAtStart(key: string, reported: number, now: number): void {
    this.held.set(key, { high: reported + this.margin, since: now });
  }

  /**
   * Checks `key`, whose `count` machines stay and whose limit is `limit`, at `now`: the high
   * threshold in force for this check, and when the hold could end without a machine event (the
   * set must be looked at again then). Each check moves the hold on.
   */
  check(key: string, count: number, limit: number, now: number): { high: number; recheckAt?: number } {
    const hold = this.held.get(key);
    if (hold === undefined) return { high: limit };
    if (count < limit) {
      // Caught up: the new limit holds the set again.
      this.held.delete(key);
      return { high: limit };
    }
    const high = Math.max(hold.high, limit);
    const next = Math.max(limit, count + this.margin);
    if (next < hold.high) {
      // Fewer machines stay than ever since the scale-down began: it is under way.
      this.held.set(key, { high: next, since: now });
      return { high, recheckAt: now + this.periodMs };
    }
    if (now - hold.since >= this.periodMs) {
      // Not one machine went for a whole period: the normal rule applies.
      this.held.delete(key);
      return { high: limit };
    }
    return { high, recheckAt: hold.since + this.periodMs };
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
