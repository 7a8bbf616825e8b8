// Coalesced instance lookups of one EC2 client. A burst of machines (a scale-up of hundreds) would
// otherwise make one DescribeInstances per machine, and EC2 throttles DescribeInstances per account
// long before it throttles RunInstances. Here lookups of one kind go out together, by the
// `instance-id` or `tag:Name` filter with up to MAX_FILTER_VALUES values, one call of a kind at a
// time. A lookup waits for company: its call goes out `gatherMs` after the first lookup of the
// batch arrived (at once when MAX_FILTER_VALUES are waiting), or after the call in flight when that
// ends later. Machines of a scale-up arrive spread over seconds (the MachineSet's slow start, the
// launches' own pace), so a call at once would mostly carry one machine; Karpenter's batcher of
// DescribeInstances waits the same way (up to 1 s). With gatherMs 0 a lookup goes out at once when
// none of its kind is in flight.
//
// Filters, not InstanceIds: EC2 fails a whole call with InvalidInstanceID.NotFound when one of the
// ids is unknown, while a filter just leaves it out.

import type { Filter, Instance } from '@aws-sdk/client-ec2';

import { RealClock, type Clock, type TimerHandle } from '../../kube/clock.js';

/** EC2 refuses a DescribeInstances with more filter values than this, all filters counted. */
export const MAX_FILTER_VALUES = 200;

/** Runs one DescribeInstances with these filters (every page) and returns its instances. */
export type DescribeFn = (filters: Filter[], signal: AbortSignal) => Promise<Instance[]>;

interface Waiter {
  value: string;
  /** When it arrived (the clock's monotonic time). */
  at: number;
  resolve: (found: Instance[]) => void;
  reject: (err: unknown) => void;
  signal: AbortSignal | undefined;
}

/** One kind of lookup: its filter, the values waiting for the next call, whether one is out. */
interface Queue {
  /** The filters of a call for these values. */
  filters: (values: string[]) => Filter[];
  /** Which of the requested values an instance answers. */
  keyOf: (i: Instance) => string | undefined;
  /** Values per call, within MAX_FILTER_VALUES with the fixed filters counted. */
  maxValues: number;
  waiting: Waiter[];
  busy: boolean;
  /** The pending start of the next call (only while none is in flight). */
  timer: TimerHandle | undefined;
}

export interface InstanceLookupOptions {
  /** How long a lookup waits for others to share its call (0: none). */
  gatherMs?: number;
  /** Time for the gathering (tests pass a fake). */
  clock?: Clock;
}

/** What a cancelled lookup rejects with: an AbortError, as the SDK's own cancelled calls. */
function aborted(): Error {
  const err = new Error('the lookup was cancelled');
  err.name = 'AbortError';
  return err;
}

export class InstanceLookup {
  private readonly queues = new Map<string, Queue>();
  /** Calls made (tests and metrics read it). */
  calls = 0;

  private readonly gatherMs: number;
  private readonly clock: Clock;

  constructor(
    private readonly describe: DescribeFn,
    opts: InstanceLookupOptions = {},
  ) {
    this.gatherMs = opts.gatherMs ?? 0;
    this.clock = opts.clock ?? new RealClock();
  }

  /** The instance of an id (in any state), or undefined when EC2 lists none. */
  async byId(instanceId: string, signal?: AbortSignal): Promise<Instance | undefined> {
    const found = await this.enqueue(
      'id',
      () => ({
        filters: (values) => [{ Name: 'instance-id', Values: values }],
        keyOf: (i) => i.InstanceId,
        maxValues: MAX_FILTER_VALUES,
      }),
      instanceId,
      signal,
    );
    return found[0];
  }

  /**
   * The instances whose `Name` tag is name, that carry every one of the tag keys (the class's
   * cluster and role tags) and are in one of the states; machines of one key set and state set
   * share calls.
   */
  byName(
    nameTag: string,
    name: string,
    tagKeys: readonly string[],
    states: readonly string[],
    signal?: AbortSignal,
  ): Promise<Instance[]> {
    return this.enqueue(
      `name\u0000${tagKeys.join('\u0000')}\u0000${states.join(',')}`,
      () => ({
        filters: (values) => [
          { Name: `tag:${nameTag}`, Values: values },
          ...tagKeys.map((k) => ({ Name: 'tag-key', Values: [k] })),
          { Name: 'instance-state-name', Values: [...states] },
        ],
        keyOf: (i) => i.Tags?.find((t) => t.Key === nameTag)?.Value,
        maxValues: MAX_FILTER_VALUES - tagKeys.length - states.length,
      }),
      name,
      signal,
    );
  }

  private enqueue(
    key: string,
    make: () => Pick<Queue, 'filters' | 'keyOf' | 'maxValues'>,
    value: string,
    signal: AbortSignal | undefined,
  ): Promise<Instance[]> {
    if (signal?.aborted === true) return Promise.reject(aborted());
    let q = this.queues.get(key);
    if (q === undefined) {
      q = { ...make(), waiting: [], busy: false, timer: undefined };
      this.queues.set(key, q);
    }
    const queue = q;
    return new Promise<Instance[]>((resolve, reject) => {
      const waiter: Waiter = { value, at: this.clock.monotonic(), resolve, reject, signal };
      if (signal !== undefined) {
        const onAbort = (): void => {
          // Still waiting for a call: leave the queue. In a call: the call goes on for the others
          // (and is cancelled once every caller in it has gone).
          const at = queue.waiting.indexOf(waiter);
          if (at >= 0) queue.waiting.splice(at, 1);
          if (queue.waiting.length === 0 && queue.timer !== undefined) {
            queue.timer.cancel();
            queue.timer = undefined;
          }
          reject(aborted());
        };
        signal.addEventListener('abort', onAbort, { once: true });
        const settle =
          <T>(fn: (v: T) => void) =>
          (v: T) => {
            signal.removeEventListener('abort', onAbort);
            fn(v);
          };
        waiter.resolve = settle(resolve);
        waiter.reject = settle(reject);
      }
      queue.waiting.push(waiter);
      this.schedule(queue);
    });
  }

  /**
   * Starts the queue's next call when it is due: gatherMs after its oldest waiter arrived, at once
   * when a call's worth of values is waiting; never while one is in flight (its end comes back here).
   */
  private schedule(queue: Queue): void {
    // Waiters are kept in their order of arrival: the first is the oldest.
    const oldest = queue.waiting[0];
    if (queue.busy || oldest === undefined) return;
    const wait = oldest.at + this.gatherMs - this.clock.monotonic();
    if (wait <= 0 || queue.waiting.length >= queue.maxValues) {
      queue.timer?.cancel();
      queue.timer = undefined;
      this.flush(queue);
      return;
    }
    if (queue.timer !== undefined) return;
    queue.timer = this.clock.setTimeout(() => {
      queue.timer = undefined;
      this.schedule(queue);
    }, wait);
  }

  private flush(queue: Queue): void {
    // Callers in this call: the first maxValues distinct values waiting.
    const values: string[] = [];
    const batch: Waiter[] = [];
    const rest: Waiter[] = [];
    for (const w of queue.waiting) {
      if (values.includes(w.value)) batch.push(w);
      else if (values.length < queue.maxValues) {
        values.push(w.value);
        batch.push(w);
      } else rest.push(w);
    }
    queue.waiting = rest;
    if (batch.length === 0) return;
    queue.busy = true;
    this.calls++;
    // The call is cancelled once every caller in it has been cancelled, not before.
    const controller = new AbortController();
    const signals = batch.flatMap((w) => (w.signal === undefined ? [] : [w.signal]));
    const allGone = (): void => {
      if (signals.every((s) => s.aborted)) controller.abort();
    };
    const watching = signals.length === batch.length;
    if (watching) for (const s of signals) s.addEventListener('abort', allGone);
    void this.describe(queue.filters(values), controller.signal)
      .then(
        (instances) => {
          const byKey = new Map<string, Instance[]>();
          for (const i of instances) {
            const k = queue.keyOf(i);
            if (k === undefined) continue;
            const list = byKey.get(k);
            if (list === undefined) byKey.set(k, [i]);
            else list.push(i);
          }
          for (const w of batch) w.resolve(byKey.get(w.value) ?? []);
        },
        (err: unknown) => {
          for (const w of batch) w.reject(err);
        },
      )
      .finally(() => {
        if (watching) for (const s of signals) s.removeEventListener('abort', allGone);
        queue.busy = false;
        this.schedule(queue);
      });
  }
}
