// The API-server safety of the machine controller (MCM's "machine controller freeze"): the control
// and target API servers are probed; when either stays unreachable longer than
// --machine-safety-apiserver-statuscheck-timeout, the machine controller is frozen, so an outage
// (nodes that could not report, writes that failed) is never read as machine failure. On recovery
// every Unknown machine is set back to Running, so its health timeout starts again instead of
// counting the outage, and then the machine controller resumes.

import { Gauge } from 'prom-client';

import { EventSource, MachineOperationType, MachinePhase, MachineState } from '../../api/constants.js';
import { MachineResource, type Machine } from '../../api/types.js';
import type { KubeApi } from '../../kube/client.js';
import type { TimerHandle } from '../../kube/clock.js';
import { KubeApiError, isConflict, isNotFound, isTooManyRequests } from '../../kube/errors.js';
import type { EventRecorder } from '../../kube/events.js';
import { CoreResources } from '../../kube/resources.js';
import { linkSignals } from '../../kube/signals.js';
import type { Logger } from '../../observability/logger.js';
import type { ControllerContext } from '../context.js';
import { phaseOf } from '../machines.js';
import { lastOp } from '../machine/health.js';
import { patchMachineStatus } from '../machine/status.js';

/** MCM's description of a machine whose health timeout was restarted after an outage. */
export const HEALTH_TIMEOUT_RESET_DESCRIPTION =
  'Machine Health Timeout was reset due to APIServer being unreachable';

/** Event reason (Normal) on a machine set back to Running after an outage. */
export const HEALTH_TIMEOUT_RESET_REASON = 'HealthTimeoutReset';

/** The name probed: it never exists, so NotFound is the expected answer of a reachable server. */
const PROBE_NAME = 'mcm-safety-probe-does-not-exist';

export interface FreezeState {
  frozen: boolean;
  /** When the first failed probe of the current outage ran (undefined: last probe succeeded). */
  unreachableSince: number | undefined;
}

export const INITIAL_FREEZE_STATE: FreezeState = { frozen: false, unreachableSince: undefined };

export interface FreezeTiming {
  /** --machine-safety-apiserver-statuscheck-period */
  periodMs: number;
  /** --machine-safety-apiserver-statuscheck-timeout */
  timeoutMs: number;
}

export interface FreezeDecision {
  state: FreezeState;
  /** freeze: stop the machine controller; unfreeze: reset Unknown machines, then resume it. */
  action: 'none' | 'freeze' | 'unfreeze';
  /** When to probe next. */
  nextProbeMs: number;
}

/** How often to probe while a server is unreachable (MCM: timeout / 5). */
export function fastProbeMs(t: FreezeTiming): number {
  return Math.max(100, Math.floor(t.timeoutMs / 5));
}

/**
 * What one probe result means. Unreachable for longer than the timeout freezes; reachable again
 * unfreezes. While a server is unreachable, or the controller is frozen, probes run every
 * timeout/5 (MCM waits a whole period before noticing a recovery), otherwise every period.
 */
export function planFreeze(
  state: FreezeState,
  reachable: boolean,
  now: number,
  t: FreezeTiming,
): FreezeDecision {
  const fast = fastProbeMs(t);
  const slow = Math.max(fast, t.periodMs);
  if (reachable) {
    return {
      state: INITIAL_FREEZE_STATE,
      action: state.frozen ? 'unfreeze' : 'none',
      nextProbeMs: slow,
    };
  }
  const since = state.unreachableSince ?? now;
  if (state.frozen)
    return { state: { frozen: true, unreachableSince: since }, action: 'none', nextProbeMs: fast };
  const freeze = now - since >= t.timeoutMs;
  return {
    state: { frozen: freeze, unreachableSince: since },
    action: freeze ? 'freeze' : 'none',
    nextProbeMs: fast,
  };
}

/**
 * Whether a probe's outcome shows the server answering. Any answer about the request itself
 * (NotFound, and also Forbidden or TooManyRequests) means it is up; no answer, a timeout or a
 * 5xx (etcd down behind it) means it is not.
 */
export function answered(err: unknown): boolean {
  if (err === undefined) return true;
  if (isTooManyRequests(err)) return true;
  return err instanceof KubeApiError && err.code >= 400 && err.code < 500;
}

export interface ProbeResult {
  control: boolean;
  /** True when there is no target cluster. */
  target: boolean;
  /** What failed, for the log. */
  errors: string[];
}

export type Prober = (signal: AbortSignal) => Promise<ProbeResult>;

/** Probes by GETting a machine and a node that do not exist (MCM's check). */
export function apiServerProber(client: KubeApi, target: KubeApi | undefined, namespace: string): Prober {
  type Outcome = { ok: true } | { ok: false; error: string };
  const probe = async (
    get: (signal: AbortSignal) => Promise<unknown>,
    signal: AbortSignal,
  ): Promise<Outcome> => {
    try {
      await get(signal);
      return { ok: true };
    } catch (err) {
      return answered(err)
        ? { ok: true }
        : { ok: false, error: err instanceof Error ? err.message : String(err) };
    }
  };
  return async (signal) => {
    const [c, t] = await Promise.all([
      probe((s) => client.get<Machine>(MachineResource, PROBE_NAME, namespace, s), signal),
      target === undefined
        ? Promise.resolve<Outcome>({ ok: true })
        : probe((s) => target.get(CoreResources.nodes, PROBE_NAME, undefined, s), signal),
    ]);
    const errors: string[] = [];
    if (!c.ok) errors.push(`control: ${c.error}`);
    if (!t.ok) errors.push(`target: ${t.error}`);
    return { control: c.ok, target: t.ok, errors };
  };
}

export interface ApiServerSafetyOptions extends FreezeTiming {
  /** Called after an unfreeze (the machine controller re-enqueues every machine). */
  onUnfreeze?: () => void;
  /** Overrides the probe (tests). */
  prober?: Prober;
}

/**
 * Probes the API servers on a timer and holds the freeze flag the machine controller reads.
 * Exposes mcm_machine_controller_frozen (1 while frozen).
 */
export class ApiServerSafety {
  private state: FreezeState = INITIAL_FREEZE_STATE;
  private timer: TimerHandle | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly abort = new AbortController();
  private readonly prober: Prober;
  private readonly recorder: EventRecorder;
  private readonly log: Logger;
  private readonly gauge: Gauge;

  constructor(
    private readonly ctx: ControllerContext,
    private readonly opts: ApiServerSafetyOptions,
  ) {
    this.prober = opts.prober ?? apiServerProber(ctx.client, ctx.target, ctx.namespace);
    this.recorder = ctx.recorderFor(EventSource.MachineController);
    this.log = ctx.logger.child({ controller: 'safety-apiserver' });
    this.gauge = new Gauge({
      name: 'mcm_machine_controller_frozen',
      help: 'Whether the machine controller is frozen because an API server was unreachable (1) or not (0).',
      registers: [ctx.registry],
    });
    this.gauge.set(0);
  }

  /** True while the machine controller must leave machines that are not being deleted alone. */
  isFrozen(): boolean {
    return this.state.frozen;
  }

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    this.abort.abort();
    await this.running;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.ctx.clock.setTimeout(() => {
      this.running = this.tick().catch((err: unknown) => {
        // tick() handles its own errors; this is a last resort so the probing never stops.
        this.log.error('API server safety check failed', { err });
        this.schedule(fastProbeMs(this.opts));
      });
    }, ms);
  }

  /** One probe and what follows from it; schedules the next. */
  async tick(): Promise<void> {
    const timeoutMs = Math.min(10_000, Math.max(1000, this.opts.timeoutMs));
    const linked = linkSignals(this.abort.signal, AbortSignal.timeout(timeoutMs));
    const result = await this.prober(linked.signal).finally(linked.dispose);
    if (this.stopped) return;
    const reachable = result.control && result.target;
    const now = this.ctx.clock.now();
    const decision = planFreeze(this.state, reachable, now, this.opts);
    if (!reachable && !this.state.frozen) {
      this.log.warn('API server unreachable', {
        errors: result.errors,
        unreachableForMs: now - (decision.state.unreachableSince ?? now),
        freezeAfterMs: this.opts.timeoutMs,
      });
    }
    switch (decision.action) {
      case 'freeze':
        this.state = decision.state;
        this.gauge.set(1);
        this.log.error(
          'freezing the machine controller: an API server has been unreachable longer than --machine-safety-apiserver-statuscheck-timeout; machines are not reconciled (deletions go on) until it is back',
          { errors: result.errors, timeoutMs: this.opts.timeoutMs },
        );
        break;
      case 'unfreeze': {
        // The caches went stale during the outage and their list/watch loops may be deep in a
        // backoff: have them catch up now rather than resume on stale state for up to a minute.
        this.ctx.informers.retryNow();
        const reset = await this.resetUnknownMachines();
        if (!reset) {
          // Still frozen: the reset is retried at the next probe.
          this.schedule(fastProbeMs(this.opts));
          return;
        }
        this.state = decision.state;
        this.gauge.set(0);
        this.log.info('API servers reachable again; unfreezing the machine controller');
        this.opts.onUnfreeze?.();
        break;
      }
      case 'none':
        this.state = decision.state;
    }
    this.schedule(decision.nextProbeMs);
  }

  /**
   * Sets every Unknown machine back to Running (read live: the cache may still be catching up
   * after the outage), so that its health timeout starts again from now. False when that could
   * not be done for every machine.
   */
  private async resetUnknownMachines(): Promise<boolean> {
    let machines: Machine[];
    try {
      machines = (
        await this.ctx.client.list<Machine>(MachineResource, {
          namespace: this.ctx.namespace,
          signal: this.abort.signal,
        })
      ).items;
    } catch (err) {
      this.log.warn('cannot list machines to reset their health timeouts; staying frozen', { err });
      return false;
    }
    let ok = true;
    for (const listed of machines) {
      let m: Machine | undefined = listed;
      for (let attempt = 0; m !== undefined && attempt < 3; attempt++) {
        if (phaseOf(m) !== MachinePhase.Unknown || m.metadata.deletionTimestamp !== undefined) break;
        try {
          await this.resetMachine(m);
          break;
        } catch (err) {
          if (isNotFound(err)) break;
          if (!isConflict(err) || attempt === 2) {
            this.log.warn('cannot reset the health timeout of a machine; staying frozen', {
              machine: m.metadata.name,
              err,
            });
            ok = false;
            break;
          }
          m = await this.ctx.client
            .get<Machine>(MachineResource, m.metadata.name ?? '', this.ctx.namespace)
            .catch((e: unknown) => {
              if (isNotFound(e)) return undefined;
              throw e;
            });
        }
      }
    }
    return ok;
  }

  private async resetMachine(m: Machine): Promise<void> {
    const now = this.ctx.clock.now();
    const updated = await patchMachineStatus(
      this.ctx.client,
      m,
      {
        phase: MachinePhase.Running,
        timeoutActive: false,
        lastOperation: lastOp(
          MachineOperationType.HealthCheck,
          MachineState.Successful,
          HEALTH_TIMEOUT_RESET_DESCRIPTION,
          now,
        ),
      },
      now,
    );
    this.log.info('reset the health timeout of a machine after the API server outage', {
      machine: m.metadata.name,
      node: m.metadata.labels?.node,
      providerID: m.spec?.providerID,
    });
    this.recorder.event(
      updated,
      'Normal',
      HEALTH_TIMEOUT_RESET_REASON,
      `${HEALTH_TIMEOUT_RESET_DESCRIPTION}: the machine was Unknown when the outage ended; its health is checked again from now`,
    );
  }
}
