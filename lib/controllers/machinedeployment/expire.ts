// Expiry, the writing side: runs the plan of expiry-plan.ts in a MachineDeployment pass. It marks
// the machines whose replacement starts (their MachineSet does the rest), reports what waits in
// the deployment's Expiry condition, events and metrics, and says when to look again.

import { Counter, Gauge, type Registry } from 'prom-client';

import {
  ExtensionAnnotation,
  Label,
  LabelValue,
  MachineDeploymentConditionType,
} from '../../api/constants.js';
import { MachineResource, type Machine } from '../../api/types.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey, type DeepReadonly } from '../../kube/informer.js';
import { findCondition, removeCondition } from '../conditions.js';
import { markedForDeletionTime } from '../machines.js';
import { findNewMachineSet } from './newset.js';
import { type DeploymentState, type PassContext, withCondition } from './pass.js';
import { rolloutBounds } from './sets.js';
import {
  ExpiryBlock,
  ExpiryReason,
  planExpiry,
  REBALANCE_RECOMMENDED,
  replacementReasonOf,
  type ExpiryInput,
} from './expiry-plan.js';
import { machineVeto, type Veto } from '../vetoes.js';
import { parseDisruptionBudget, parseDisruptionSchedule } from '../../api/disruption.js';
import { replicasOf } from '../../api/replicas.js';

type CachedMachine = DeepReadonly<Machine>;

/** How long a replacement this controller started waits for the cache to show its mark. */
const STARTED_MEMORY_MS = 60_000;

/** Expiry's metrics, per deployment. */
export class ExpiryMetrics {
  private readonly expired: Counter<'namespace' | 'machine_deployment'>;
  private readonly blocked: Gauge<'namespace' | 'machine_deployment' | 'reason'>;
  private readonly rebalance: Counter<'namespace' | 'machine_deployment'>;

  constructor(registry: Registry) {
    this.rebalance = new Counter({
      name: 'mcm_machine_rebalance_replacements_total',
      help: 'Machines whose replacement started after a rebalance recommendation (--aws-rebalance-as-interruption), within their deployment’s disruption budget, maxSurge and autoscaler maximum.',
      labelNames: ['namespace', 'machine_deployment'],
      registers: [registry],
    });
    this.expired = new Counter({
      name: 'mcm_machine_expired_total',
      help: 'Machines whose replacement expiry started (older than their deployment’s machine.mcm-ts.io/expire-after).',
      labelNames: ['namespace', 'machine_deployment'],
      registers: [registry],
    });
    this.blocked = new Gauge({
      name: 'mcm_machine_disruption_blocked',
      help: 'Machines due for voluntary replacement (expired, or with a rebalance recommendation) that wait, by why: budget, window, pod, surge, max (the autoscaler maximum), paused, frozen, rollout, invalid.',
      labelNames: ['namespace', 'machine_deployment', 'reason'],
      registers: [registry],
    });
  }

  started(namespace: string, name: string, n: number): void {
    if (n > 0) this.expired.inc({ namespace, machine_deployment: name }, n);
  }

  rebalanced(namespace: string, name: string, n: number): void {
    if (n > 0) this.rebalance.inc({ namespace, machine_deployment: name }, n);
  }

  setBlocked(namespace: string, name: string, counts: ReadonlyMap<string, number>): void {
    for (const reason of Object.values(ExpiryBlock)) {
      const n = counts.get(reason) ?? 0;
      if (n > 0) this.blocked.set({ namespace, machine_deployment: name, reason }, n);
      else this.blocked.remove({ namespace, machine_deployment: name, reason });
    }
  }

  forget(namespace: string, name: string): void {
    this.setBlocked(namespace, name, new Map());
    this.expired.remove({ namespace, machine_deployment: name });
    this.rebalance.remove({ namespace, machine_deployment: name });
  }
}

/** Replacements started per deployment that the machine cache may not show yet (name → when). */
export class StartedReplacements {
  private readonly byDeployment = new Map<string, Map<string, number>>();

  /** The names still expected for the deployment; forgets those the cache shows or that are old. */
  current(key: string, now: number, shows: (name: string) => boolean): Set<string> {
    const m = this.byDeployment.get(key);
    if (m === undefined) return new Set();
    for (const [name, at] of m) if (shows(name) || now - at > STARTED_MEMORY_MS) m.delete(name);
    if (m.size === 0) this.byDeployment.delete(key);
    return new Set(m.keys());
  }

  add(key: string, name: string, now: number): void {
    let m = this.byDeployment.get(key);
    if (m === undefined) {
      m = new Map();
      this.byDeployment.set(key, m);
    }
    m.set(name, now);
  }

  forget(key: string): void {
    this.byDeployment.delete(key);
  }

  has(key: string): boolean {
    return this.byDeployment.has(key);
  }
}

export interface ExpiryDeps {
  metrics: ExpiryMetrics;
  started: StartedReplacements;
}

/** What is wrong with the deployment's disruption budget and schedule (cheap when unset). */
function settingsProblems(mcd: DeploymentState['mcd']): string[] {
  const a = mcd.metadata.annotations ?? {};
  const budget = a[ExtensionAnnotation.DisruptionBudget];
  const schedule = a[ExtensionAnnotation.DisruptionSchedule];
  if (budget === undefined && schedule === undefined) return [];
  const problems: string[] = [];
  const b = parseDisruptionBudget(budget, replicasOf(mcd));
  if (!b.ok) problems.push(b.problem);
  const s = parseDisruptionSchedule(schedule);
  if (!s.ok) problems.push(s.problem);
  return problems;
}

/** Why the deployment is not settled for expiry, from the pass's state. */
function unsettledOf(ctx: PassContext, state: DeploymentState): ExpiryInput<CachedMachine>['unsettled'] {
  const mcd = state.mcd;
  if (mcd.spec?.paused === true) return ExpiryBlock.Paused;
  if (
    mcd.metadata.labels?.[Label.Freeze] === LabelValue.True ||
    state.sets.some((s) => s.metadata.labels?.[Label.Freeze] === LabelValue.True)
  )
    return ExpiryBlock.Frozen;
  const newSet = findNewMachineSet(mcd, state.sets);
  if (newSet === undefined || mcd.spec?.rollbackTo !== undefined) return ExpiryBlock.RollingOut;
  const busy = state.sets.filter(
    (s) => s.metadata.uid !== newSet.metadata.uid && ((s.spec?.replicas ?? 0) > 0 || ctx.countsOf(s).all > 0),
  );
  return busy.length > 0 ? ExpiryBlock.RollingOut : undefined;
}

/**
 * One expiry step of a pass: plans, marks the machines whose replacement starts, and puts the
 * Expiry condition on the state (written with the pass's status). Returns when to look again.
 */
export async function expireMachines(
  ctx: PassContext,
  initial: DeploymentState,
  deps: ExpiryDeps,
): Promise<{ state: DeploymentState; recheckAfter?: number }> {
  let state = initial;
  const mcd = state.mcd;
  const key = objectKey(mcd);
  const namespace = mcd.metadata.namespace ?? '';
  const name = mcd.metadata.name ?? '';
  const now = ctx.now;
  // Most deployments have no expiry and no rebalance recommendation: they cost no look at their
  // machines (the accounting counts recommended and voluntarily replaced machines).
  const expireAfter = mcd.metadata.annotations?.[ExtensionAnnotation.ExpireAfter];
  const voluntary = state.sets.some((s) => ctx.countsOf(s).voluntary > 0);
  if (expireAfter === undefined && !voluntary) {
    const before = findCondition(state.status.conditions, MachineDeploymentConditionType.Expiry);
    if (before !== undefined || deps.started.has(key)) {
      deps.metrics.forget(namespace, name);
      deps.started.forget(key);
    }
    // Budget and windows bound in-place update drains too: invalid ones are reported here.
    const problems = settingsProblems(mcd);
    if (problems.length > 0) {
      const message = `${problems.join('; ')}; no voluntary disruption (expiry, drains of automatic in-place updates) starts until it is fixed`;
      if (before?.message !== message)
        ctx.event(mcd, 'Warning', 'InvalidDisruptionSettings', problems.join('; '));
      return {
        state: withCondition(
          state,
          now,
          MachineDeploymentConditionType.Expiry,
          'False',
          ExpiryReason.InvalidSettings,
          message,
        ),
      };
    }
    if (before === undefined) return { state };
    return {
      state: {
        ...state,
        status: {
          ...state.status,
          conditions: removeCondition(state.status.conditions, MachineDeploymentConditionType.Expiry),
        },
      },
    };
  }
  const machines = state.sets.flatMap((s) => ctx.machinesOf(s));
  const byName = new Map(machines.map((m) => [m.metadata.name ?? '', m]));
  const started = deps.started.current(key, now, (n) => {
    const m = byName.get(n);
    return m === undefined || (m.metadata.annotations?.[ExtensionAnnotation.Replacing] ?? '') !== '';
  });
  const pods = ctx.deps.informers.drain?.pods;
  const vetoOf = (m: CachedMachine): Veto | undefined => machineVeto(pods, m);
  let maxSurge = 1;
  try {
    maxSurge = rolloutBounds(mcd).maxSurge;
  } catch {
    // A malformed surge is reported by the rollout; expiry surges by one.
  }
  const plan = planExpiry({
    mcd,
    machines,
    now,
    unsettled: unsettledOf(ctx, state),
    maxSurge,
    groupMax: ctx.deps.groupMaxOf?.(mcd),
    marked: new Set(
      machines.filter((m) => markedForDeletionTime(m) !== undefined).map((m) => m.metadata.name ?? ''),
    ),
    vetoOf,
    started,
  });

  if (!plan.enabled) {
    deps.metrics.forget(namespace, name);
    if (findCondition(state.status.conditions, MachineDeploymentConditionType.Expiry) !== undefined) {
      state = {
        ...state,
        status: {
          ...state.status,
          conditions: removeCondition(state.status.conditions, MachineDeploymentConditionType.Expiry),
        },
      };
    }
    return { state };
  }

  let startedNow = 0;
  let rebalancedNow = 0;
  for (const m of plan.start) {
    const reason = replacementReasonOf(m);
    try {
      await ctx.deps.client.patch(
        MachineResource,
        m.metadata.name ?? '',
        {
          metadata: {
            resourceVersion: m.metadata.resourceVersion,
            annotations: { [ExtensionAnnotation.Replacing]: reason },
          },
        },
        { type: 'merge', namespace },
      );
    } catch (err) {
      // Changed or gone since the cache showed it: the next pass looks again.
      if (isConflict(err) || isNotFound(err)) continue;
      throw err;
    }
    deps.started.add(key, m.metadata.name ?? '', now);
    if (reason === REBALANCE_RECOMMENDED) {
      rebalancedNow++;
      ctx.log.info('rebalance recommended; replacing the machine', { machine: m.metadata.name });
      ctx.deps.recorder.event(
        m,
        'Normal',
        'RebalanceReplacing',
        'The cloud recommended moving off this machine’s VM: a replacement is created first, then it is drained and deleted (within the deployment’s disruption budget and maxSurge)',
      );
      continue;
    }
    startedNow++;
    const age = now - Date.parse(m.metadata.creationTimestamp ?? '');
    ctx.log.info('machine expired; replacing it', { machine: m.metadata.name, ageMs: age });
    ctx.deps.recorder.event(
      m,
      'Normal',
      'Expired',
      `Machine is older than the deployment's ${ExtensionAnnotation.ExpireAfter} (${expireAfter ?? ''}); a replacement is created first, then it is drained and deleted`,
    );
  }
  deps.metrics.rebalanced(namespace, name, rebalancedNow);
  deps.metrics.started(namespace, name, startedNow);

  const counts = new Map<string, number>();
  for (const b of plan.blocked) counts.set(b.reason, (counts.get(b.reason) ?? 0) + 1);
  deps.metrics.setBlocked(namespace, name, counts);

  const before = findCondition(state.status.conditions, MachineDeploymentConditionType.Expiry);
  if (plan.condition === undefined) {
    if (before !== undefined) {
      state = {
        ...state,
        status: {
          ...state.status,
          conditions: removeCondition(state.status.conditions, MachineDeploymentConditionType.Expiry),
        },
      };
    }
  } else {
    const c = plan.condition;
    if (plan.problems.length > 0 && before?.message !== c.message) {
      ctx.event(mcd, 'Warning', 'InvalidDisruptionSettings', plan.problems.join('; '));
    }
    state = withCondition(state, now, MachineDeploymentConditionType.Expiry, c.status, c.reason, c.message);
  }

  let recheckAfter: number | undefined;
  if (plan.recheckAt !== undefined) recheckAfter = Math.max(1000, plan.recheckAt - now);
  // The cache shows the marks soon; the pass after that counts them from it.
  if (startedNow > 0) recheckAfter = Math.min(recheckAfter ?? Infinity, 1000);
  return { state, ...(recheckAfter === undefined ? {} : { recheckAfter }) };
}
