// Launches that keep failing back off, per machine class. A launch fails when the VM a creation
// made stops, ends or fails before its node joins (its provider reported it, or the VM is found
// gone): a bad image, an unusable encryption key, a subnet without addresses, a cloud that takes
// the VM back at once. Replacing such a machine at once would launch again, and fail again,
// seconds apart. So after each failure in a row the next launch of that class waits longer
// (--launch-failure-backoff, doubling up to --launch-failure-max-backoff), and the machines that
// wait report it (CrashLoopBackOff, a Create operation failed with FailedPrecondition) so the
// autoscaler takes them for a failed scale-up of their group and tries another. A machine of the
// class that joins ends the back-off; so does a quiet spell as long as the longest wait.
//
// The class stands for the offering: a class fixes the machine type, image, zone (subnet) and
// market its launches ask for. The state lives in the leader's memory: a new leader launches once,
// and the first failure backs off again.

import { Counter, Gauge, type Registry } from 'prom-client';

import type { Clock } from '../../kube/clock.js';

/** Where a class's launches stand after failures. */
export interface LaunchHold {
  /** Failed launches in a row. */
  failures: number;
  /** No launch before this (ms since the epoch). */
  until: number;
  /** The last failure, for people (the provider's reason or what was found). */
  lastFailure: string;
}

interface ClassState extends LaunchHold {
  lastFailedAt: number;
  /** The machine whose failure was counted last (its failure is counted once, however often it is reported). */
  lastMachine: string | undefined;
}

export class LaunchBackoff {
  private readonly byClass = new Map<string, ClassState>();

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
  ) {}

  /** Whether failed launches back off at all (--launch-failure-backoff 0 turns it off). */
  get enabled(): boolean {
    return this.baseMs > 0;
  }

  /**
   * A launch of class `key` (by machine `machine`, its uid) failed at `now`; returns the hold that
   * follows. The same machine's failure again (a write retried after a conflict) counts once.
   */
  failed(key: string, now: number, why: string, machine?: string): LaunchHold | undefined {
    if (!this.enabled) return undefined;
    this.sweep(now);
    const prev = this.byClass.get(key);
    if (prev !== undefined && machine !== undefined && prev.lastMachine === machine)
      return { failures: prev.failures, until: prev.until, lastFailure: prev.lastFailure };
    // After a quiet spell as long as the longest wait, a failure starts the count again. The
    // spell runs from the end of the hold, not from the last failure: a launch held the longest
    // wait that fails again is a failure in a row, so the wait stays at the maximum.
    const failures = prev === undefined || now - prev.until > this.quietMs() ? 1 : prev.failures + 1;
    const wait = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(failures - 1, 30));
    const state: ClassState = {
      failures,
      until: now + wait,
      lastFailure: why,
      lastFailedAt: now,
      lastMachine: machine,
    };
    this.byClass.set(key, state);
    return { failures, until: state.until, lastFailure: why };
  }

  /** A machine of class `key` joined: its launches work. */
  succeeded(key: string): void {
    this.byClass.delete(key);
  }

  /** The hold on class `key` at `now`, or undefined when it may launch. */
  holdOf(key: string, now: number): LaunchHold | undefined {
    const s = this.byClass.get(key);
    if (s === undefined || now >= s.until) return undefined;
    return { failures: s.failures, until: s.until, lastFailure: s.lastFailure };
  }

  /** Classes whose launches are held now (for the metric). */
  held(now: number): number {
    let n = 0;
    for (const s of this.byClass.values()) if (now < s.until) n++;
    return n;
  }

  private quietMs(): number {
    return Math.max(this.maxMs, this.baseMs);
  }

  /** Forgets classes quiet for longer than the longest wait (deleted classes among them). */
  private sweep(now: number): void {
    for (const [k, s] of this.byClass) if (now - s.lastFailedAt > 2 * this.quietMs()) this.byClass.delete(k);
  }
}

/** The launch back-off key of a machine: its class, namespace-qualified. */
export function launchKeyOf(m: {
  metadata: { namespace?: string };
  spec?: { class?: { name?: string } };
}): string {
  return `${m.metadata.namespace ?? ''}/${m.spec?.class?.name ?? ''}`;
}

/** Metrics of failed launches: failures per class, and the classes held now. */
export class LaunchMetrics {
  private readonly failures: Counter<'namespace' | 'machine_class'>;

  constructor(registry: Registry, launches: LaunchBackoff, clock: Clock) {
    this.failures = new Counter({
      name: 'mcm_machine_launch_failures_total',
      help: 'Launches that failed: the VM stopped, ended, failed or vanished before its node joined (by machine class).',
      labelNames: ['namespace', 'machine_class'],
      registers: [registry],
    });
    new Gauge({
      name: 'mcm_machine_launches_held',
      help: 'Machine classes whose launches back off now after failed launches (--launch-failure-backoff).',
      registers: [registry],
      collect() {
        this.set(launches.held(clock.now()));
      },
    });
  }

  failed(m: { metadata: { namespace?: string }; spec?: { class?: { name?: string } } }): void {
    this.failures.inc({ namespace: m.metadata.namespace ?? '', machine_class: m.spec?.class?.name ?? '' });
  }
}
