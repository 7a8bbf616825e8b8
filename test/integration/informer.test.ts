import { expect } from 'chai';
import { KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';

import type { KubeObject } from '../../lib/kube/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { isConflict, isNotFound } from '../../lib/kube/errors.js';
import { Informer, objectKey } from '../../lib/kube/informer.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { FaultProxy, HttpFaultProxy } from '../harness/proxy.js';
import { until } from './env/until.js';

interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
}

const NS = 'informer-test';
const TOTAL = 5000;

async function metricValue(
  registry: Registry,
  name: string,
  labels: Record<string, string>,
): Promise<number> {
  const metrics = await registry.getMetricsAsJSON();
  const m = metrics.find((x) => x.name === name);
  if (m === undefined) return 0;
  let sum = 0;
  for (const v of m.values as {
    value: number;
    labels: Record<string, string | number>;
    metricName?: string;
  }[]) {
    if (v.metricName !== undefined && v.metricName !== name && !v.metricName.endsWith('_count')) continue;
    if (Object.entries(labels).every(([k, val]) => String(v.labels[k]) === val)) sum += v.value;
  }
  return sum;
}

/** Runs fn over items with at most `limit` in flight. */
async function pool<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: limit }, async () => {
    while (next < items.length) {
      const item = items[next++];
      if (item !== undefined) await fn(item);
    }
  });
  await Promise.all(workers);
}

function kubeConfigFor(cp: ControlPlane, server: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfigPath);
  const cluster = kc.getCurrentCluster();
  if (cluster === null) throw new Error('no cluster');
  kc.clusters = [{ ...cluster, server }];
  return kc;
}

describe('informer against a real kube-apiserver', function () {
  this.timeout(600_000);
  let cp: ControlPlane;
  let writer: KubeClient;

  before(async function () {
    this.timeout(300_000);
    cp = await startControlPlane();
    writer = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 1000, burst: 1000 });
    await cp.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: NS },
    });
    const names = Array.from({ length: TOTAL }, (_, i) => `cm-${String(i).padStart(5, '0')}`);
    await pool(names, 32, async (name) => {
      await writer.create<ConfigMap>(CoreResources.configMaps, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name, namespace: NS, labels: { group: String(Number(name.slice(3)) % 10) } },
        data: { v: '0' },
      });
    });
  });

  after(async () => {
    (writer as KubeClient | undefined)?.close();
    await (cp as ControlPlane | undefined)?.stop();
  });

  it(`lists ${TOTAL} objects with pagination, then stays exactly in sync through churn, an apiserver restart, a stalled connection and a forced 410 Gone`, async () => {
    const proxy = new FaultProxy('127.0.0.1', Number(new URL(cp.server).port));
    const proxyPort = await proxy.start();
    const registry = newRegistry();
    const client = new KubeClient({
      kubeConfig: kubeConfigFor(cp, `https://127.0.0.1:${proxyPort}`),
      qps: 100,
      burst: 200,
      registry,
      requestTimeoutMs: 10_000,
    });
    const informer = new Informer<ConfigMap>({
      client,
      resource: CoreResources.configMaps,
      namespace: NS,
      logger: nullLogger,
      registry,
      pageSize: 500,
      idleTimeoutMs: 4000,
      backoff: { initialMs: 200, maxMs: 2000 },
    });
    let adds = 0;
    let deletes = 0;
    let finalStateUnknownDeletes = 0;
    informer.addHandler({
      onAdd: () => adds++,
      onDelete: (_obj, unknown) => {
        deletes++;
        if (unknown) finalStateUnknownDeletes++;
      },
    });
    informer.start();
    try {
      await informer.waitForSync();
      expect(informer.size()).to.equal(TOTAL);
      expect(adds).to.equal(TOTAL);
      const listRequests = await metricValue(registry, 'rest_client_request_duration_seconds', {
        verb: 'list',
      });
      expect(listRequests, 'paginated list requests').to.be.at.least(TOTAL / 500);

      let counter = 0;
      let writes = 0;
      const state = { churning: true };
      /** Creates, updates and deletes at random, retrying through outages, until stopped. */
      const churn = (async () => {
        while (state.churning) {
          const i = Math.floor(Math.random() * TOTAL * 1.2);
          const name = `cm-${String(i).padStart(5, '0')}`;
          const op = Math.random();
          try {
            if (op < 0.5) {
              const cur = await writer.get<ConfigMap>(CoreResources.configMaps, name, NS);
              cur.data = { v: String(++counter) };
              await writer.update(CoreResources.configMaps, cur);
            } else if (op < 0.75) {
              await writer.delete(CoreResources.configMaps, name, { namespace: NS });
            } else {
              await writer.create<ConfigMap>(CoreResources.configMaps, {
                apiVersion: 'v1',
                kind: 'ConfigMap',
                metadata: { name, namespace: NS },
                data: { v: String(++counter) },
              });
            }
            writes++;
          } catch (err) {
            if (
              !isNotFound(err) &&
              !isConflict(err) &&
              !(err instanceof Error && err.name === 'AlreadyExistsError')
            ) {
              // apiserver down: wait a little and go on
              await new Promise((r) => setTimeout(r, 100));
            }
          }
        }
      })();

      const events = (): Promise<number> => metricValue(registry, 'informer_events_total', {});
      /** Waits until the informer has received `n` more watch events than it has now. */
      const moreEvents = async (what: string, n: number): Promise<void> => {
        const from = await events();
        await until(what, async () => (await events()) >= from + n, 60_000);
      };
      /** Waits until the churn has written `n` more times. */
      const moreWrites = async (what: string, n: number): Promise<void> => {
        const from = writes;
        await until(what, () => writes >= from + n, 60_000);
      };

      // 1. churn while connected
      await moreEvents('watch events during the churn', 200);

      // 2. apiserver restart in the middle of the churn
      await cp.restartApiServer();
      await moreEvents('watch events after the apiserver restart', 100);

      // 3. the connection stalls silently (no reset): the watchdog must notice
      const stalledBefore = await metricValue(registry, 'informer_watch_errors_total', { reason: 'Stalled' });
      proxy.pause();
      await until(
        'the watchdog reporting the stalled watch',
        async () =>
          (await metricValue(registry, 'informer_watch_errors_total', { reason: 'Stalled' })) > stalledBefore,
        60_000,
      );
      // 4. while the informer is cut off: more churn, etcd compaction and a restart that drops the
      //    apiserver's watch cache, so the informer's resourceVersion is gone when it comes back
      await cp.compactEtcd();
      await cp.restartApiServer();
      await moreWrites('churn while the informer is cut off', 200);
      await cp.compactEtcd();
      const listsBefore = await metricValue(registry, 'informer_lists_total', {});
      proxy.cut();
      proxy.resume();
      await until(
        'a re-list after the 410',
        async () => (await metricValue(registry, 'informer_lists_total', {})) > listsBefore,
        60_000,
      );
      await moreEvents('watch events after reconnecting', 100);

      state.churning = false;
      await churn;

      // The cache must converge to exactly what a fresh list returns.
      const deadline = Date.now() + 60_000;
      let diff: string[] = [];
      for (;;) {
        const fresh = await writer.listAll<ConfigMap>(CoreResources.configMaps, { namespace: NS });
        const want = new Map(fresh.items.map((o) => [objectKey(o), o.metadata.resourceVersion]));
        const have = new Map(informer.list().map((o) => [objectKey(o), o.metadata.resourceVersion]));
        diff = [];
        for (const [k, rv] of want)
          if (have.get(k) !== rv) diff.push(`${k}: want ${rv}, have ${have.get(k) ?? 'none'}`);
        for (const k of have.keys()) if (!want.has(k)) diff.push(`${k}: deleted but still cached`);
        if (diff.length === 0 || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      expect(diff.slice(0, 20), `${diff.length} differences`).to.deep.equal([]);

      const stalled = await metricValue(registry, 'informer_watch_errors_total', { reason: 'Stalled' });
      const gone = await metricValue(registry, 'informer_watch_errors_total', { reason: 'Expired' });
      const goneHttp = await metricValue(registry, 'informer_watch_errors_total', { reason: 'Gone' });
      const lists = await metricValue(registry, 'informer_lists_total', {});
      expect(stalled - stalledBefore, 'stalled watches detected').to.be.at.least(1);
      expect(gone + goneHttp, '410 Gone seen').to.be.at.least(1);
      expect(lists, 're-listed after 410').to.be.at.least(2);
      expect(deletes).to.be.greaterThan(0);
      expect(
        finalStateUnknownDeletes,
        'deletes missed while disconnected are delivered as final-state deletes',
      ).to.be.greaterThan(0);
    } finally {
      await informer.stop();
      client.close();
      await proxy.stop();
    }
  });

  it('backs off instead of re-listing or re-watching back to back when every watch gets 410 Gone or ends at once, and catches up when watches work again', async () => {
    const ns = 'informer-pacing';
    await cp.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: ns },
    });
    const caData = cp.kubeConfig.getCurrentCluster()?.caData;
    if (caData === undefined) throw new Error('the harness kubeconfig has no CA data');
    const proxy = new HttpFaultProxy(new URL(cp.server), Buffer.from(caData, 'base64'));
    const proxyPort = await proxy.start();
    const client = new KubeClient({
      kubeConfig: kubeConfigFor(cp, `http://127.0.0.1:${proxyPort}`),
      qps: 1000,
      burst: 1000,
    });
    // The default backoff: 800 ms doubling to 30 s, plus up to 100 %.
    const informer = new Informer<ConfigMap>({
      client,
      resource: CoreResources.configMaps,
      namespace: ns,
      logger: nullLogger,
    });
    /** The requests the informer sends through the proxy in 6 s. */
    const requestsIn6s = async (): Promise<{ lists: number; watches: number }> => {
      const from = proxy.requests.length;
      await new Promise((r) => setTimeout(r, 6000));
      return proxy.countSince(from);
    };
    /**
     * Waits for the informer's watch to be open, creates a ConfigMap and waits until the informer
     * has it: the watch delivers an event, so it counts as healthy (the backoff starts over).
     */
    const seesNew = async (name: string): Promise<void> => {
      await until('a watch forwarded by the proxy', () => proxy.watchesOpen() > 0, 60_000);
      await writer.create<ConfigMap>(CoreResources.configMaps, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name, namespace: ns },
      });
      await until(
        `the informer seeing ConfigMap ${name}`,
        () => informer.get(ns, name) !== undefined,
        60_000,
      );
    };
    try {
      // 1. Every watch gets 410 Gone. Back to back, list and watch would come by the thousand in
      //    6 s; with the backoff: one re-list at once, then after 0.8–1.6 s, 1.6–3.2 s, 3.2–6.4 s.
      proxy.setWatchFault('gone');
      informer.start();
      await informer.waitForSync();
      const gone = await requestsIn6s();
      expect(gone.lists, `lists in 6 s of 410s (${gone.watches} watches)`).to.be.within(1, 10);
      expect(gone.watches, 'watches in 6 s of 410s').to.be.at.most(10);

      // 2. Watches work again; retryNow ends the backoff wait, as after an API-server outage.
      proxy.setWatchFault('none');
      informer.retryNow();
      await seesNew('after-gone');

      // 3. The open watch ends (it delivered an event: the next one is opened at once) and every
      //    watch after it ends at once without an event: re-watches from the same resourceVersion
      //    after 0.8–1.6 s, 1.6–3.2 s, 3.2–6.4 s, and no re-list.
      proxy.setWatchFault('close');
      const closed = await requestsIn6s();
      expect(closed.watches, 'watches in 6 s of watches ended at once').to.be.within(1, 10);
      expect(closed.lists, 're-lists while watches end at once').to.equal(0);

      proxy.setWatchFault('none');
      informer.retryNow();
      await seesNew('after-close');
    } finally {
      await informer.stop();
      client.close();
      await proxy.stop();
    }
  });
});
