// Expiry (pure planning): which machines of a MachineDeployment are older than its expire-after,
// which of them may start their replacement now, and what holds the others. A replacement starts
// by marking the machine replacing (machine.mcm-ts.io/replacing): its MachineSet then creates a
// machine in its place and deletes it once the machines that stay are available (replicas.ts), so
// the deployment surges by one machine per replacement and never loses availability.
//
// Expiry is voluntary disruption: it starts only when the deployment is settled (not paused, not
// frozen, not rolling out), inside the deployment's disruption windows, within its disruption
// budget, its maxSurge and its autoscaler maximum, oldest machine first, and never on a node that
// runs a pod vetoing disruption. Machines already going (deleted, replaced, marked by the
// autoscaler), preserved or not Running are not expired here: deletion, health checks and
// preservation own them.
//
// The other voluntary replacement is a cloud's rebalance recommendation (opted in with
// --aws-rebalance-as-interruption: the machine carries machine.mcm-ts.io/rebalance-recommended):
// the same limits, the same budget shared with expiry, recommended machines first; only the
// disruption windows do not hold it back (the recommendation is a warning that an interruption
// may follow soon). So a recommendation sent to a whole spot pool at once surges by maxSurge at a
// time, never above the group's maximum, instead of by one machine per recommendation.

import { Annotation, ExtensionAnnotation, MachinePhase, PreserveValue } from '../../api/constants.js';
import {
  parseDisruptionBudget,
  parseDisruptionSchedule,
  parseExpireAfter,
  windowState,
} from '../../api/disruption.js';
import { formatGoDuration } from '../../api/duration.js';
import { replicasOf } from '../../api/replicas.js';
import type { MachineDeployment } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import { isPreserved, isReplacing, isTerminating, phaseOf, type AnyMachine } from '../machines.js';
import type { Veto } from '../vetoes.js';

type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

/** The reason a replacement is asked for (the replacing annotation's value). */
export const EXPIRED = 'expired';
/** The replacing annotation's value for a machine replaced after a rebalance recommendation. */
export const REBALANCE_RECOMMENDED = 'rebalance-recommended';

/** Why expired machines wait; the values are the metric's `reason` label. */
export const ExpiryBlock = {
  Invalid: 'invalid',
  Paused: 'paused',
  Frozen: 'frozen',
  RollingOut: 'rollout',
  Window: 'window',
  Budget: 'budget',
  Surge: 'surge',
  Max: 'max',
  Pod: 'pod',
} as const;
export type ExpiryBlock = (typeof ExpiryBlock)[keyof typeof ExpiryBlock];

/** Reasons of the deployment's Expiry condition. */
export const ExpiryReason = {
  Replacing: 'ReplacingExpiredMachines',
  Waiting: 'ExpiredMachinesWaiting',
  InvalidSettings: 'InvalidDisruptionSettings',
} as const;

export interface ExpiryInput<M extends AnyMachine> {
  mcd: AnyDeployment;
  /** Every machine of the deployment's sets, going ones included. */
  machines: readonly M[];
  now: number;
  /** Why the deployment is not settled (paused, frozen, rolling out); undefined when it is. */
  unsettled:
    typeof ExpiryBlock.Paused | typeof ExpiryBlock.Frozen | typeof ExpiryBlock.RollingOut | undefined;
  /** The deployment's maxSurge, resolved (expiry surges by at least 1). */
  maxSurge: number;
  /** The deployment's autoscaler maximum (it is a node group), if any: no surge goes above it. */
  groupMax?: number | undefined;
  /** Machines named by a standing autoscaler mark (they are going). */
  marked: ReadonlySet<string>;
  /** The pod vetoing voluntary disruption of the machine's node, if any (asked in age order). */
  vetoOf: (m: M) => Veto | undefined;
  /** Machines this controller marked replacing that the cache may not show yet (by name). */
  started: ReadonlySet<string>;
}

export interface ExpiryPlan<M extends AnyMachine> {
  /**
   * Whether there is voluntary replacement to plan: an expire-after annotation (valid or not), or
   * a machine with a rebalance recommendation.
   */
  enabled: boolean;
  /**
   * Machines due for replacement, not counting those already being replaced: the recommended ones
   * (rebalance) first, then the expired ones, oldest first.
   */
  expired: M[];
  /** Of those, how many have a rebalance recommendation. */
  recommended: number;
  /** Machines to mark replacing now. */
  start: M[];
  /** Expired machines that wait, with why. */
  blocked: { machine: M; reason: ExpiryBlock; detail: string }[];
  /** Machines being replaced for expiry (marked, or deleted after being marked). */
  inFlight: number;
  /** The settings that are invalid (reported; no voluntary disruption then). */
  problems: string[];
  /** When to look again without an event: the next machine's expiry or a window change. */
  recheckAt?: number | undefined;
  /** The deployment's Expiry condition; undefined: the deployment has none. */
  condition?: { status: 'True' | 'False'; reason: string; message: string } | undefined;
}

function created(m: AnyMachine): number {
  const t = Date.parse(m.metadata.creationTimestamp ?? '');
  return Number.isNaN(t) ? 0 : t;
}

/** Replaced voluntarily (expiry, rebalance): marked replacing so, whether or not it is being deleted yet. */
function replacedVoluntarily(m: AnyMachine): boolean {
  const v = m.metadata.annotations?.[ExtensionAnnotation.Replacing];
  return v === EXPIRED || v === REBALANCE_RECOMMENDED;
}

/** Whether the cloud recommended moving off the machine's VM (recorded by a notice, opted in). */
export function rebalanceRecommended(m: AnyMachine): boolean {
  return (m.metadata.annotations?.[ExtensionAnnotation.RebalanceRecommended] ?? '') !== '';
}

/** The replacing annotation's value when the replacement of `m` starts. */
export function replacementReasonOf(m: AnyMachine): string {
  return rebalanceRecommended(m) ? REBALANCE_RECOMMENDED : EXPIRED;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}

/** What voluntary replacement (expiry, rebalance) does for the deployment now (see the file comment). */
export function planExpiry<M extends AnyMachine>(input: ExpiryInput<M>): ExpiryPlan<M> {
  const { mcd, machines, now } = input;
  const annotations = mcd.metadata.annotations ?? {};
  const plan: ExpiryPlan<M> = {
    enabled: false,
    expired: [],
    recommended: 0,
    start: [],
    blocked: [],
    inFlight: 0,
    problems: [],
  };
  const expireAfter = parseExpireAfter(annotations[ExtensionAnnotation.ExpireAfter]);
  const noExpiry = expireAfter.ok && expireAfter.ms === undefined;
  // Candidates: Running machines that stay.
  const candidates = machines.filter(
    (m) =>
      !isTerminating(m) &&
      !isReplacing(m) &&
      !input.started.has(m.metadata.name ?? '') &&
      !input.marked.has(m.metadata.name ?? '') &&
      phaseOf(m) === MachinePhase.Running &&
      !isPreserved(m, now) &&
      m.metadata.annotations?.[Annotation.Preserve] !== PreserveValue.Now,
  );
  const recommended = candidates.filter(rebalanceRecommended);
  const inFlight = machines.filter((m) => replacedVoluntarily(m) || input.started.has(m.metadata.name ?? ''));
  if (noExpiry && recommended.length === 0 && inFlight.length === 0) return plan;
  plan.enabled = true;
  const replicas = replicasOf(mcd);
  const budget = parseDisruptionBudget(annotations[ExtensionAnnotation.DisruptionBudget], replicas);
  const schedule = parseDisruptionSchedule(annotations[ExtensionAnnotation.DisruptionSchedule]);
  if (!expireAfter.ok) plan.problems.push(expireAfter.problem);
  if (!budget.ok) plan.problems.push(budget.problem);
  if (!schedule.ok) plan.problems.push(schedule.problem);
  plan.inFlight = inFlight.length;
  if (!expireAfter.ok) {
    plan.condition = {
      status: 'False',
      reason: ExpiryReason.InvalidSettings,
      message: `${plan.problems.join('; ')}; no machine expires and no voluntary disruption starts until it is fixed`,
    };
    return plan;
  }
  const ttl = expireAfter.ms;

  const byAge = (a: M, b: M): number =>
    created(a) - created(b) || (a.metadata.name ?? '').localeCompare(b.metadata.name ?? '');
  plan.expired.push(...[...recommended].sort(byAge));
  plan.recommended = recommended.length;
  let nextExpiry: number | undefined;
  if (ttl !== undefined) {
    for (const m of candidates.filter((x) => !rebalanceRecommended(x)).sort(byAge)) {
      const at = created(m) + ttl;
      if (at <= now) plan.expired.push(m);
      else nextExpiry = earliest(nextExpiry, at);
    }
  }
  plan.recheckAt = nextExpiry;

  const settledBlock = plan.problems.length > 0 ? ExpiryBlock.Invalid : input.unsettled;
  const window = schedule.ok ? windowState(schedule.windows, now) : { open: false, changesAt: undefined };
  const allowed = budget.ok ? budget.allowed : 0;
  // Surge room: machines that stay count toward the replicas; each replacement adds one beside.
  const staying = machines.filter(
    (m) => !isTerminating(m) && !isReplacing(m) && !input.started.has(m.metadata.name ?? ''),
  ).length;
  const replacingNow = machines.filter(
    (m) => !isTerminating(m) && (isReplacing(m) || input.started.has(m.metadata.name ?? '')),
  ).length;
  const surgeRoom = Math.max(1, input.maxSurge) - replacingNow - Math.max(0, staying - replicas);
  // The group's maximum: every replacement adds a machine until its old one goes, and a machine
  // marked now has its replacement counted before its MachineSet has created it (staying falls
  // short of the replicas until then).
  const maxRoom =
    input.groupMax === undefined ? Infinity : input.groupMax - replacingNow - Math.max(staying, replicas);

  if (plan.expired.length > 0) {
    if (settledBlock !== undefined) {
      const detail =
        settledBlock === ExpiryBlock.Invalid
          ? `the disruption settings are invalid (${plan.problems.join('; ')}), so no voluntary disruption starts`
          : settledBlock === ExpiryBlock.Paused
            ? 'the deployment is paused'
            : settledBlock === ExpiryBlock.Frozen
              ? 'the deployment is frozen by the safety controller'
              : 'a rollout is in progress (it replaces machines itself)';
      for (const m of plan.expired) plan.blocked.push({ machine: m, reason: settledBlock, detail });
    } else {
      let budgetLeft = allowed - inFlight.length;
      let surgeLeft = surgeRoom;
      let maxLeft = maxRoom;
      const opens =
        window.changesAt === undefined
          ? 'no window opens within a year'
          : `the next opens at ${new Date(window.changesAt).toISOString()}`;
      for (const m of plan.expired) {
        const veto = input.vetoOf(m);
        if (!window.open && !rebalanceRecommended(m)) {
          plan.blocked.push({
            machine: m,
            reason: ExpiryBlock.Window,
            detail: `outside the disruption windows (${opens})`,
          });
        } else if (veto !== undefined) {
          plan.blocked.push({
            machine: m,
            reason: ExpiryBlock.Pod,
            detail: `pod ${veto.pod} (${veto.by}) runs on its node`,
          });
        } else if (budgetLeft <= 0) {
          plan.blocked.push({
            machine: m,
            reason: ExpiryBlock.Budget,
            detail: `the disruption budget of ${plural(allowed, 'machine')} is in use`,
          });
        } else if (maxLeft <= 0) {
          plan.blocked.push({
            machine: m,
            reason: ExpiryBlock.Max,
            detail: `the deployment is at its autoscaler maximum of ${plural(input.groupMax ?? 0, 'machine')}`,
          });
        } else if (surgeLeft <= 0) {
          plan.blocked.push({
            machine: m,
            reason: ExpiryBlock.Surge,
            detail: 'waiting for the replacements under way (maxSurge)',
          });
        } else {
          plan.start.push(m);
          budgetLeft--;
          surgeLeft--;
          maxLeft--;
        }
      }
      if (!window.open || (schedule.ok && schedule.windows.length > 0))
        plan.recheckAt = earliest(plan.recheckAt, window.changesAt);
    }
  }
  plan.condition = expiryCondition(plan, ttl);
  return plan;
}

function expiryCondition<M extends AnyMachine>(
  plan: ExpiryPlan<M>,
  ttl: number | undefined,
): ExpiryPlan<M>['condition'] {
  const waiting = plan.blocked.filter((b) => b.reason !== ExpiryBlock.Surge);
  const replacing = plan.inFlight + plan.start.length;
  if (plan.expired.length === 0 && replacing === 0) {
    if (plan.problems.length > 0)
      return {
        status: 'False',
        reason: ExpiryReason.InvalidSettings,
        message: `${plan.problems.join('; ')}; no voluntary disruption starts until it is fixed`,
      };
    return undefined;
  }
  const parts: string[] = [];
  const aged = plan.expired.length - plan.recommended;
  if (ttl !== undefined) parts.push(`${plural(aged, 'machine')} older than ${formatGoDuration(ttl)}`);
  if (plan.recommended > 0) parts.push(`${plan.recommended} with a rebalance recommendation`);
  parts.push(`${replacing} being replaced`);
  const byReason = new Map<ExpiryBlock, { count: number; detail: string; names: string[] }>();
  for (const b of plan.blocked) {
    const e = byReason.get(b.reason) ?? { count: 0, detail: b.detail, names: [] };
    e.count++;
    if (e.names.length < 3)
      e.names.push(
        b.reason === ExpiryBlock.Pod
          ? `${b.machine.metadata.name ?? ''}: ${b.detail}`
          : (b.machine.metadata.name ?? ''),
      );
    byReason.set(b.reason, e);
  }
  for (const [reason, e] of byReason) {
    const more = e.count > e.names.length ? `, +${e.count - e.names.length} more` : '';
    parts.push(
      reason === ExpiryBlock.Pod
        ? `${e.count} held by a pod (${e.names.join('; ')}${more})`
        : `${e.count} waiting: ${e.detail} (${e.names.join(', ')}${more})`,
    );
  }
  if (plan.problems.length > 0 && !byReason.has(ExpiryBlock.Invalid)) parts.push(plan.problems.join('; '));
  return {
    status: 'True',
    reason: waiting.length > 0 && replacing === 0 ? ExpiryReason.Waiting : ExpiryReason.Replacing,
    message: parts.join('; '),
  };
}
