import { expect } from 'chai';

import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { KWOK_NODE_ANNOTATION } from '../harness/controlplane.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { LifecycleEnv, NS } from './env/lifecycle.js';
import { until } from './env/until.js';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** A readable line per pod and node, for a failure message. */
async function state(env: LifecycleEnv): Promise<string> {
  const pods = await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: 'app=web' });
  const lines = pods.items.map(
    (p) => `pod ${p.metadata.name ?? ''} node=${p.spec?.nodeName ?? ''} phase=${p.status?.phase ?? ''}`,
  );
  for (const n of await env.nodes()) {
    lines.push(
      `node ${n.metadata.name ?? ''} ready=${String(isReady(n))} taints=${JSON.stringify(n.spec?.taints ?? [])} kwok=${n.metadata.annotations?.[KWOK_NODE_ANNOTATION] ?? ''}`,
    );
  }
  return lines.join('\n');
}

describe('virtual provider: a node that boots with a bootDelay (real kube-apiserver, kube-controller-manager, kube-scheduler, kwok)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start({ controllerManager: true, scheduler: true, kwok: true });
    await env.startManager();
    await env.createClass('slow', { bootDelay: '3s' });
  });

  after(async () => {
    await env.stop();
  });

  it('registers NotReady and tainted, turns Ready, and runs the pods that waited for it', async () => {
    // The pods exist first, so they are bound the moment the booted nodes accept pods.
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: 'web', namespace: NS, pool: 'boot', replicas: 2 }),
    );
    await env.createDeployment(
      'boot',
      2,
      'slow',
      {},
      { nodeTemplate: { metadata: { labels: { pool: 'boot' } } } },
    );

    const booting = await until('two booting nodes', async () => {
      const ns = (await env.nodes()).filter((n) => n.metadata.labels?.pool === 'boot');
      return ns.length === 2 ? ns : undefined;
    });
    for (const n of booting) {
      expect(isReady(n), `${n.metadata.name ?? ''} Ready while booting`).to.equal(false);
      expect(n.spec?.taints?.map((t) => `${t.key}:${t.effect}`)).to.include(
        'node.kubernetes.io/not-ready:NoSchedule',
      );
    }
    const nodeNames = booting.map((n) => n.metadata.name ?? '').sort();

    try {
      await until(
        'both pods Running on the booted nodes',
        async () => {
          const pods = await env.client.list<Pod>(CoreResources.pods, {
            namespace: NS,
            labelSelector: 'app=web',
          });
          const running = pods.items.filter((p) => p.status?.phase === 'Running');
          return running.length === 2 &&
            running
              .map((p) => p.spec?.nodeName ?? '')
              .sort()
              .join() === nodeNames.join()
            ? running
            : undefined;
        },
        // 3 s boot plus kwok's "fast" pod stage; a pod that kwok never plays stays Pending forever.
        30_000,
      );
    } catch (err) {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await state(env)}`, {
        cause: err,
      });
    }
    for (const n of await env.nodes()) {
      if (!nodeNames.includes(n.metadata.name ?? '')) continue;
      expect(isReady(n)).to.equal(true);
      expect(n.spec?.taints?.filter((t) => t.effect === 'NoSchedule') ?? []).to.deep.equal([]);
    }
  });
});
