// Expiry (pure planning): which machines of a MachineDeployment are older than its expire-after,
// which of them may start their replacement now, and what holds the others. A replacement starts
// by marking the machine replacing (machine.mcm-ts.io/replacing): its MachineSet then creates a
// machine in its place and deletes it once the machines that stay are available (replicas.ts), so
// the deployment surges by one machine per replacement and never loses availability.
//
// Expiry is voluntary disruption: it starts only when the deployment is settled (not paused, not
// frozen, not rolling out), inside the deployment's disruption windows, within its disruption
// budget and its maxSurge, oldest machine first, and never on a node that runs a pod vetoing
// disruption. Machines already going (deleted, replaced, marked by the autoscaler), preserved or
// not Running are not expired here: deletion, health checks and preservation own them.

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

type AnyDeployment = MachineDeployment | DeepReadonly<MachineDeployment>;

/** The reason a replacement is asked for (the replacing annotation's value). */
export const EXPIRED = 'expired';

/** Why expired machines wait; the values are the metric's `reason` label. */
export const ExpiryBlock = {
  Invalid: 'invalid',
  Paused: 'paused',
  Frozen: 'frozen',
  RollingOut: 'rollout',
  Window: 'window',
  Budget: 'budget',
  Surge: 'surge',
  Pod: 'pod',
} as const;
export type ExpiryBlock = (typeof ExpiryBlock)[keyof typeof ExpiryBlock];

/** Reasons of the deployment's Expiry condition. */
export const ExpiryReason = {
  Replacing: 'ReplacingExpiredMachines',
  Waiting: 'ExpiredMachinesWaiting',
  InvalidSettings: 'InvalidDisruptionSettings',
} as const;

/** A pod that vetoes voluntary disruption of its node, as the planner is told about it. */
export interface Veto {
  pod: string;
  /** The annotation that vetoes, as `key=value`. */
  by: string;
}

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
  /** Machines named by a standing autoscaler mark (they are going). */
  marked: ReadonlySet<string>;
  /** The pod vetoing voluntary disruption of the machine's node, if any (asked in age order). */
  vetoOf: (m: M) => Veto | undefined;
  /** Machines this controller marked replacing that the cache may not show yet (by name). */
  started: ReadonlySet<string>;
}

export interface ExpiryPlan<M extends AnyMachine> {
  /** Whether the deployment asks for expiry at all (an expire-after annotation, valid or not). */
  enabled: boolean;
  /** Expired machines, oldest first, not counting those already being replaced. */
  expired: M[];
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

/** Replaced for expiry: marked replacing with our reason, whether or not it is being deleted yet. */
function replacedForExpiry(m: AnyMachine): boolean {
  return m.metadata.annotations?.[ExtensionAnnotation.Replacing] === EXPIRED;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}

/** What expiry does for the deployment now (see the file comment). */
export function planExpiry<M extends AnyMachine>(input: ExpiryInput<M>): ExpiryPlan<M> {
  const { mcd, machines, now } = input;
  const annotations = mcd.metadata.annotations ?? {};
  const plan: ExpiryPlan<M> = {
    enabled: false,
    expired: [],
    start: [],
    blocked: [],
    inFlight: 0,
    problems: [],
  };
  const expireAfter = parseExpireAfter(annotations[ExtensionAnnotation.ExpireAfter]);
  if (expireAfter.ok && expireAfter.ms === undefined) return plan;
  plan.enabled = true;
  const replicas = replicasOf(mcd);
  const budget = parseDisruptionBudget(annotations[ExtensionAnnotation.DisruptionBudget], replicas);
  const schedule = parseDisruptionSchedule(annotations[ExtensionAnnotation.DisruptionSchedule]);
  if (!expireAfter.ok) plan.problems.push(expireAfter.problem);
  if (!budget.ok) plan.problems.push(budget.problem);
  if (!schedule.ok) plan.problems.push(schedule.problem);

  const inFlight = machines.filter((m) => replacedForExpiry(m) || input.started.has(m.metadata.name ?? ''));
  plan.inFlight = inFlight.length;
  if (!expireAfter.ok || expireAfter.ms === undefined) {
    plan.condition = {
      status: 'False',
      reason: ExpiryReason.InvalidSettings,
      message: `${plan.problems.join('; ')}; no machine expires and no voluntary disruption starts until it is fixed`,
    };
    return plan;
  }
  const ttl = expireAfter.ms;

  // Candidates: Running machines that stay, oldest first.
  const candidates = machines
    .filter(
      (m) =>
        !isTerminating(m) &&
        !isReplacing(m) &&
        !input.started.has(m.metadata.name ?? '') &&
        !input.marked.has(m.metadata.name ?? '') &&
        phaseOf(m) === MachinePhase.Running &&
        !isPreserved(m, now) &&
        m.metadata.annotations?.[Annotation.Preserve] !== PreserveValue.Now,
    )
    .sort((a, b) => created(a) - created(b) || (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  let nextExpiry: number | undefined;
  for (const m of candidates) {
    const at = created(m) + ttl;
    if (at <= now) plan.expired.push(m);
    else nextExpiry = earliest(nextExpiry, at);
  }
  plan.recheckAt = nextExpiry;

  const block = (reason: ExpiryBlock, detail: string, from = 0): void => {
    for (const m of plan.expired.slice(from)) plan.blocked.push({ machine: m, reason, detail });
  };
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
      block(settledBlock, detail);
    } else if (!window.open) {
      const opens =
        window.changesAt === undefined
          ? 'no window opens within a year'
          : `the next opens at ${new Date(window.changesAt).toISOString()}`;
      block(ExpiryBlock.Window, `outside the disruption windows (${opens})`);
      plan.recheckAt = earliest(plan.recheckAt, window.changesAt);
    } else {
      let budgetLeft = allowed - inFlight.length;
      let surgeLeft = surgeRoom;
      for (const m of plan.expired) {
        const veto = input.vetoOf(m);
        if (veto !== undefined) {
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
        }
      }
      if (schedule.ok && schedule.windows.length > 0)
        plan.recheckAt = earliest(plan.recheckAt, window.changesAt);
    }
  }
  plan.condition = expiryCondition(plan, ttl);
  return plan;
}

function expiryCondition<M extends AnyMachine>(plan: ExpiryPlan<M>, ttl: number): ExpiryPlan<M>['condition'] {
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
  const parts = [
    `${plural(plan.expired.length, 'machine')} older than ${formatGoDuration(ttl)}`,
    `${replacing} being replaced`,
  ];
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
