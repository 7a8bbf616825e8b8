import { expect } from 'chai';

import type { Machine } from '../../../lib/api/types.js';
import { trimPod } from '../../../lib/drain/caches.js';
import { Drainer, describeBlockers } from '../../../lib/drain/drain.js';
import {
  forceDeadline,
  forceReason,
  isMisconfiguredPdb,
  matchingPdbs,
  podsToDrain,
} from '../../../lib/drain/pods.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { TooManyRequestsError } from '../../../lib/kube/errors.js';
import { Informer } from '../../../lib/kube/informer.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { Node, Pod, PodDisruptionBudget, VolumeAttachment } from '../../../lib/kube/types.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';
import { ATTACHMENT_NODE_INDEX, ATTACHMENT_PV_INDEX, POD_NODE_INDEX } from '../../../lib/drain/caches.js';
import { FakeKube } from '../../fakes/kube.js';
import { eventually } from '../helpers/eventually.js';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

function pod(
  name: string,
  extra: Partial<Pod['metadata']> = {},
  spec: Pod['spec'] = {},
  phase = 'Running',
): Pod {
  return {
    metadata: {
      name,
      namespace: 'ns',
      uid: `uid-${name}`,
      labels: { app: name.split('-')[0] ?? name },
      ...extra,
    },
    spec: { nodeName: 'n1', ...spec },
    status: { phase },
  };
}

describe('drain rules', () => {
  it('skips mirror pods, DaemonSet pods and finished pods', () => {
    const pods = [
      pod('web-1'),
      pod('mirror-1', { annotations: { 'kubernetes.io/config.mirror': 'x' } }),
      pod('ds-1', {
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'ds', uid: 'u', controller: true },
        ],
      }),
      pod('job-1', {}, {}, 'Succeeded'),
      pod('bare-1', {
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u', controller: true },
        ],
      }),
    ];
    expect(podsToDrain(pods).map((p) => p.metadata.name)).to.deep.equal(['web-1', 'bare-1']);
  });

  it('matches budgets by namespace and selector', () => {
    const b = (name: string, ns: string, app: string): PodDisruptionBudget => ({
      metadata: { name, namespace: ns },
      spec: { selector: { matchLabels: { app } } },
    });
    const found = matchingPdbs(pod('web-1'), [
      b('a', 'ns', 'web'),
      b('b', 'other', 'web'),
      b('c', 'ns', 'db'),
    ]);
    expect(found.map((x) => x.metadata.name)).to.deep.equal(['a']);
  });

  it('calls a budget misconfigured only when its status is current and all pods are healthy yet none may go', () => {
    const pdb = (
      status: NonNullable<PodDisruptionBudget['status']>,
      generation = 1,
    ): PodDisruptionBudget => ({
      metadata: { name: 'p', generation },
      status,
    });
    expect(
      isMisconfiguredPdb(
        pdb({ observedGeneration: 1, expectedPods: 2, currentHealthy: 2, disruptionsAllowed: 0 }),
      ),
    ).to.be.true;
    expect(
      isMisconfiguredPdb(
        pdb({ observedGeneration: 0, expectedPods: 2, currentHealthy: 2, disruptionsAllowed: 0 }),
      ),
    ).to.be.false;
    expect(
      isMisconfiguredPdb(
        pdb({ observedGeneration: 1, expectedPods: 2, currentHealthy: 1, disruptionsAllowed: 0 }),
      ),
    ).to.be.false;
    expect(
      isMisconfiguredPdb(
        pdb({ observedGeneration: 1, expectedPods: 2, currentHealthy: 2, disruptionsAllowed: 1 }),
      ),
    ).to.be.false;
    // gardener master #1127: right after an eviction the API server lowered disruptionsAllowed and
    // recorded the pod in disruptedPods while currentHealthy is not updated yet: not misconfigured.
    expect(
      isMisconfiguredPdb(
        pdb({
          observedGeneration: 1,
          expectedPods: 2,
          currentHealthy: 2,
          disruptionsAllowed: 0,
          disruptedPods: { 'web-1': '2026-11-28T01:00:00Z' },
        }),
      ),
    ).to.be.false;
  });

  it('forces for the force-deletion label, after the drain timeout, and for a node NotReady for 5 minutes', () => {
    const m = (
      labels: Record<string, string>,
      conditions: NonNullable<Machine['status']>['conditions'] = [],
    ): Machine => ({
      metadata: { name: 'm', labels, deletionTimestamp: iso(T0) },
      status: { conditions },
    });
    expect(forceReason(m({ 'force-deletion': 'true' }), T0, 3_600_000)).to.contain('force-deletion');
    expect(forceReason(m({ 'force-deletion': 'no' }), T0, 3_600_000)).to.equal(undefined);
    expect(forceReason(m({}), T0 + 3_600_000, 3_600_000)).to.equal('the drain timeout passed');
    const notReady = m({}, [{ type: 'Ready', status: 'False', lastTransitionTime: iso(T0 - 6 * 60_000) }]);
    expect(forceReason(notReady, T0, 3_600_000)).to.contain('not been Ready');
    const briefly = m({}, [{ type: 'Ready', status: 'False', lastTransitionTime: iso(T0 - 60_000) }]);
    expect(forceReason(briefly, T0, 3_600_000)).to.equal(undefined);
  });

  it('forces at the interruption deadline of the VM when it comes before the drain timeout, and says so', () => {
    const m = (deadline: string): Machine => ({
      metadata: {
        name: 'm',
        deletionTimestamp: iso(T0),
        annotations: { 'machine.mcm-ts.io/interruption-deadline': deadline },
      },
    });
    const interrupted = m(iso(T0 + 90_000));
    expect(forceReason(interrupted, T0 + 89_000, 3_600_000)).to.equal(undefined);
    expect(forceReason(interrupted, T0 + 90_000, 3_600_000)).to.contain('interruption deadline');
    expect(forceDeadline(interrupted, T0, 3_600_000)).to.equal(T0 + 90_000);
    // A deadline after the drain timeout changes nothing; an unreadable one is none.
    expect(forceDeadline(m(iso(T0 + 7_200_000)), T0, 3_600_000)).to.equal(T0 + 3_600_000);
    expect(forceDeadline(m('soon'), T0, 3_600_000)).to.equal(T0 + 3_600_000);
    expect(forceReason(m('soon'), T0 + 90_000, 3_600_000)).to.equal(undefined);
  });

  it('drains an impaired VM whose node is Ready with evictions (PDBs respected), forced only once its node is not Ready', () => {
    const impaired: Machine = {
      metadata: {
        name: 'm',
        deletionTimestamp: iso(T0),
        annotations: { 'machine.mcm-ts.io/vm-failure': 'InstanceImpaired' },
      },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    };
    const node = (status: 'True' | 'False' | 'Unknown'): Node => ({
      metadata: { name: 'n' },
      status: { conditions: [{ type: 'Ready', status, lastTransitionTime: iso(T0) }] },
    });
    expect(forceReason(impaired, T0 + 1_000, 3_600_000, node('True'))).to.equal(undefined);
    // The node's own condition now, not the machine's mirror (frozen at the deletion), decides.
    expect(forceReason(impaired, T0 + 1_000, 3_600_000, node('Unknown'))).to.contain('kubelet cannot act');
    expect(forceReason(impaired, T0 + 1_000, 3_600_000, node('False'))).to.contain('InstanceImpaired');
    // Without a node in the cache, the machine's mirror of its conditions.
    expect(forceReason(impaired, T0 + 1_000, 3_600_000)).to.equal(undefined);
  });

  it('keeps only what the drain reads of a pod in the cache', () => {
    const big: Pod = {
      metadata: {
        name: 'p',
        namespace: 'ns',
        labels: { a: 'b' },
        annotations: { 'kubectl.kubernetes.io/last-applied-configuration': 'x'.repeat(5000) },
      },
      spec: {
        nodeName: 'n1',
        containers: [{ name: 'c', image: 'i', env: [{ name: 'X', value: 'y'.repeat(5000) }] }],
        volumes: [
          { name: 'tmp', emptyDir: {} },
          { name: 'd', persistentVolumeClaim: { claimName: 'data' } },
        ],
      },
      status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
    };
    const t = trimPod(big);
    expect(JSON.stringify(t).length).to.be.lessThan(300);
    expect(t.spec?.volumes).to.deep.equal([{ name: 'd', persistentVolumeClaim: { claimName: 'data' } }]);
    expect(t.status).to.deep.equal({ phase: 'Running' });
  });
});

describe('Drainer rounds (in-memory API)', () => {
  let api: FakeKube;
  let informers: { stop(): Promise<void> }[];
  let drainer: Drainer;
  const clock = new FakeClock(T0);
  let pods: Informer<Pod>;
  let pdbs: Informer<PodDisruptionBudget>;
  let attachments: { size(): number };

  beforeEach(async () => {
    api = new FakeKube({ now: () => clock.now() });
    const logger = new CapturingLogger();
    const inf = <T extends object>(res: Parameters<typeof api.list>[0]): Informer<T & { metadata: object }> =>
      new Informer({ client: api, resource: res, logger }) as never;
    pods = new Informer<Pod>({ client: api, resource: CoreResources.pods, logger, transform: trimPod });
    pods.addIndexer(POD_NODE_INDEX, (p) => (p.spec?.nodeName === undefined ? [] : [p.spec.nodeName]));
    const vas = inf(CoreResources.volumeAttachments);
    vas.addIndexer(ATTACHMENT_NODE_INDEX, (v) => {
      const n = (v as VolumeAttachment).spec?.nodeName;
      return n === undefined ? [] : [n];
    });
    vas.addIndexer(ATTACHMENT_PV_INDEX, (v) => {
      const pv = (v as VolumeAttachment).spec?.source?.persistentVolumeName;
      return pv === undefined ? [] : [pv];
    });
    attachments = vas;
    pdbs = new Informer<PodDisruptionBudget>({
      client: api,
      resource: CoreResources.podDisruptionBudgets,
      logger,
    });
    const caches = {
      pods,
      podDisruptionBudgets: pdbs,
      persistentVolumeClaims: inf(CoreResources.persistentVolumeClaims),
      persistentVolumes: inf(CoreResources.persistentVolumes),
      volumeAttachments: vas,
    };
    const nodes = new Informer<Node>({ client: api, resource: CoreResources.nodes, logger });
    informers = [pods, nodes, ...Object.values(caches)];
    drainer = new Drainer(api, caches, nodes, {
      maxEvictRetries: 3,
      pvDetachTimeoutMs: 60_000,
      pvReattachTimeoutMs: 1000,
    });
    api.seed(CoreResources.nodes, { metadata: { name: 'n1' } });
    api.seed(CoreResources.pods, pod('web-1'), pod('web-2'));
    for (const i of new Set([pods, nodes, ...Object.values(caches)])) i.start();
    await Promise.all([pods, nodes, ...Object.values(caches)].map((i) => i.waitForSync()));
  });

  afterEach(async () => {
    await Promise.all(informers.map((i) => i.stop()));
  });

  const input = (now: number, force = false): Parameters<Drainer['round']>[0] => ({
    id: 'ns/m',
    nodeName: 'n1',
    startedAt: T0,
    now,
    force,
    driver: undefined,
  });

  it('evicts every pod without volumes at once, then is done once they are gone', async () => {
    const r1 = await drainer.round(input(T0));
    expect(r1.done).to.be.false;
    expect(
      api.actions
        .filter((a) => a.subresource === 'eviction')
        .map((a) => a.name)
        .sort(),
    ).to.deep.equal(['web-1', 'web-2']);
    await eventually(() => pods.size() === 0, 'pods gone from the cache');
    const r2 = await drainer.round(input(T0 + 1000));
    expect(r2).to.deep.equal({ done: true, blockers: [], requeueAfterMs: 0 });
  });

  it('waits 20 s between evictions a budget refuses, names the budget, and deletes the pod once the retries are used up', async () => {
    api.seed(CoreResources.podDisruptionBudgets, {
      metadata: { name: 'web', namespace: 'ns', generation: 1 },
      spec: { selector: { matchLabels: { app: 'web' } } },
      status: {
        observedGeneration: 1,
        expectedPods: 2,
        currentHealthy: 2,
        desiredHealthy: 2,
        disruptionsAllowed: 0,
      },
    } as never);
    api.react((a) =>
      a.subresource === 'eviction'
        ? new TooManyRequestsError('pdb', 429, 'TooManyRequests', undefined, undefined)
        : undefined,
    );
    await eventually(() => pdbs.size() === 1, 'the budget cached');
    const r1 = await drainer.round(input(T0));
    expect(r1.done).to.be.false;
    expect(r1.requeueAfterMs).to.equal(20_000);
    expect(r1.blockers.map((b) => b.reason)).to.deep.equal(['pdb', 'pdb']);
    expect(r1.blockers[0]?.pdbs).to.deep.equal(['ns/web']);
    expect(describeBlockers(r1.blockers)).to.contain('PodDisruptionBudget ns/web allows 0 disruptions now');
    expect(describeBlockers(r1.blockers)).to.contain('as configured it can never allow one');
    expect(api.actions.filter((a) => a.verb === 'delete')).to.have.length(0);
    const r2 = await drainer.round(input(T0 + 3 * 20_000));
    expect(r2.blockers.every((b) => b.reason === 'terminating')).to.be.true;
    const deletes = api.actions.filter((a) => a.verb === 'delete' && a.resource === 'pods');
    expect(deletes.map((a) => a.name).sort()).to.deep.equal(['web-1', 'web-2']);
    expect((deletes[0]?.body as { gracePeriodSeconds?: number }).gracePeriodSeconds).to.equal(0);
  });

  it('waits for a volume until its VolumeAttachment on the node is gone, though the node no longer reports it attached, then looks again when the reattach timeout ends', async () => {
    api.seed(CoreResources.persistentVolumes, {
      metadata: { name: 'pv-db' },
      spec: { csi: { driver: 'csi.example', volumeHandle: 'vol-db' } },
    } as never);
    api.seed(CoreResources.persistentVolumeClaims, {
      metadata: { name: 'data', namespace: 'ns' },
      spec: { volumeName: 'pv-db' },
    } as never);
    // The attach/detach controller drops a volume from the node's list when it starts detaching;
    // the CSI driver's VolumeAttachment stays until the volume has detached.
    api.seed(CoreResources.volumeAttachments, {
      metadata: { name: 'va-db' },
      spec: { attacher: 'csi.example', nodeName: 'n1', source: { persistentVolumeName: 'pv-db' } },
      status: { attached: true },
    } as never);
    api.seed(
      CoreResources.pods,
      pod('db-1', {}, { volumes: [{ name: 'd', persistentVolumeClaim: { claimName: 'data' } }] }),
    );
    await eventually(() => pods.size() === 3 && attachments.size() === 1, 'pods and attachment cached');
    await drainer.round(input(T0));
    await eventually(() => pods.size() === 0, 'pods gone from the cache');
    const waiting = await drainer.round(input(T0 + 1000));
    expect(waiting.done).to.be.false;
    expect(waiting.blockers.map((b) => b.reason)).to.deep.equal(['volume-detach']);
    expect(describeBlockers(waiting.blockers)).to.contain(
      'pv-db (VolumeAttachment on the node) are still attached',
    );
    expect(waiting.requeueAfterMs).to.equal(5000);
    await api.delete(CoreResources.volumeAttachments, 'va-db', {});
    await eventually(() => attachments.size() === 0, 'attachment gone from the cache');
    const reattach = await drainer.round(input(T0 + 2000));
    expect(reattach.blockers.map((b) => b.reason)).to.deep.equal(['volume-reattach']);
    expect(reattach.requeueAfterMs, 'the rest of the 1 s reattach timeout').to.equal(1000);
    const later = await drainer.round(input(T0 + 2600));
    expect(later.requeueAfterMs).to.equal(400);
    expect(await drainer.round(input(T0 + 3000))).to.deep.equal({
      done: true,
      blockers: [],
      requeueAfterMs: 0,
    });
  });

  it('deletes every pod without grace when forced, without evicting', async () => {
    const r = await drainer.round(input(T0, true));
    expect(r.done).to.be.true;
    expect(api.actions.some((a) => a.subresource === 'eviction')).to.be.false;
    expect(
      api.actions
        .filter((a) => a.verb === 'delete')
        .map((a) => a.name)
        .sort(),
    ).to.deep.equal(['web-1', 'web-2']);
  });
});
