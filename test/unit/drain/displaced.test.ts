import { expect } from 'chai';
import { Registry } from 'prom-client';

import { DisplacedPods, PATIENCE_MS, type DisplacedReport } from '../../../lib/drain/displaced.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import type { Informer, InformerHandlers } from '../../../lib/kube/informer.js';
import type { Pod } from '../../../lib/kube/types.js';

const T0 = Date.UTC(2026, 10, 29, 10, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** A pod of ReplicaSet `rs`, created at `created`, bound to `node` (or not yet). */
function pod(name: string, rs: string, created: number, node?: string): Pod {
  return {
    metadata: {
      name,
      namespace: 'apps',
      uid: `uid-${name}`,
      creationTimestamp: iso(created),
      ownerReferences: [
        { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: rs, uid: `uid-${rs}`, controller: true },
      ],
    },
    spec: node === undefined ? { containers: [] } : { nodeName: node, containers: [] },
  };
}

function setup(): {
  clock: FakeClock;
  tracker: DisplacedPods;
  registry: Registry;
  seen: (p: Pod) => void;
} {
  const clock = new FakeClock(T0);
  const registry = new Registry();
  let handlers: InformerHandlers<Pod> | undefined;
  const informer = {
    addHandler: (h: InformerHandlers<Pod>) => {
      handlers = h;
    },
  } as unknown as Informer<Pod>;
  const tracker = new DisplacedPods(informer, clock, registry);
  return { clock, tracker, registry, seen: (p) => handlers?.onUpdate?.(p, p) };
}

describe('displaced pods of an interrupted node: how long their successors were Pending', () => {
  it('times each successor from its creation to its binding and reports once all are bound', async () => {
    const { clock, tracker, registry, seen } = setup();
    const reports: DisplacedReport[] = [];
    tracker.start(
      'default/m1',
      [pod('web-a', 'web', T0 - 3_600_000, 'n1'), pod('web-b', 'web', T0 - 3_600_000, 'n1')],
      (r) => reports.push(r),
    );
    // A successor of another controller, and a pod of web created before the drain: not counted.
    await clock.advance(1_000);
    seen(pod('db-x', 'db', T0 + 1_000, 'n2'));
    seen(pod('web-old', 'web', T0 - 60_000, 'n2'));
    // The two successors: created at once, bound 2 s and 4 s later; an unbound one is not timed.
    seen(pod('web-c', 'web', T0 + 1_000));
    await clock.advance(2_000);
    seen(pod('web-c', 'web', T0 + 1_000, 'n3'));
    seen(pod('web-c', 'web', T0 + 1_000, 'n3'));
    expect(reports, 'not before both are bound').to.deep.equal([]);
    await clock.advance(2_000);
    seen(pod('web-d', 'web', T0 + 1_000, 'n3'));
    expect(reports).to.deep.equal([{ displaced: 2, pendingMs: [2_000, 4_000] }]);
    expect(clock.pendingTimers(), 'no timer left behind (a process could not exit)').to.equal(0);
    // The next drain round of the same machine (its evicted pods still terminating) starts no
    // second report, which no successor would ever complete.
    expect(tracker.tracking('default/m1'), 'reported').to.equal(true);
    tracker.start('default/m1', [pod('web-a', 'web', T0 - 3_600_000, 'n1')], (r) => reports.push(r));
    await clock.advance(PATIENCE_MS);
    expect(reports, 'one report per interruption').to.have.length(1);
    const text = await registry.getSingleMetricAsString('mcm_interruption_pod_pending_seconds');
    expect(text).to.contain('mcm_interruption_pod_pending_seconds_count 2');
  });

  it('reports what it saw when not every successor is bound within its patience, and ignores pods without a controller', async () => {
    const { clock, tracker, seen } = setup();
    const reports: DisplacedReport[] = [];
    const lone: Pod = {
      metadata: { name: 'lone', namespace: 'apps', uid: 'uid-lone' },
      spec: { containers: [] },
    };
    tracker.start(
      'default/m1',
      [pod('web-a', 'web', T0 - 1, 'n1'), pod('web-b', 'web', T0 - 1, 'n1'), lone],
      (r) => reports.push(r),
    );
    seen(pod('web-c', 'web', T0, 'n3'));
    await clock.advance(PATIENCE_MS);
    expect(reports).to.deep.equal([{ displaced: 2, pendingMs: [0] }]);
  });
});
