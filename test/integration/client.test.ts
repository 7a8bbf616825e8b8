import { expect } from 'chai';

import type { KubeObject } from '../../lib/kube/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import {
  AlreadyExistsError,
  ConflictError,
  GoneError,
  InvalidError,
  NotFoundError,
} from '../../lib/kube/errors.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { retryOnConflict } from '../../lib/kube/retry.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';

interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
}

const NS = 'default';

describe('KubeClient against a real kube-apiserver', function () {
  this.timeout(180_000);
  let cp: ControlPlane;
  let client: KubeClient;

  before(async function () {
    this.timeout(180_000);
    cp = await startControlPlane();
    client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 200, burst: 400 });
  });

  after(async () => {
    (client as KubeClient | undefined)?.close();
    await (cp as ControlPlane | undefined)?.stop();
  });

  const cm = (name: string, data: Record<string, string> = {}): ConfigMap => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: NS },
    data,
  });

  it('surfaces NotFound, AlreadyExists, Invalid and Conflict as typed errors', async () => {
    const missing = await client.get(CoreResources.configMaps, 'does-not-exist', NS).catch((e: unknown) => e);
    expect(missing).to.be.instanceOf(NotFoundError);

    await client.create(CoreResources.configMaps, cm('typed'));
    const dup = await client.create(CoreResources.configMaps, cm('typed')).catch((e: unknown) => e);
    expect(dup).to.be.instanceOf(AlreadyExistsError);

    const invalid = await client
      .create(CoreResources.configMaps, cm('Not_A_Valid_Name'))
      .catch((e: unknown) => e);
    expect(invalid).to.be.instanceOf(InvalidError);

    const a = await client.get<ConfigMap>(CoreResources.configMaps, 'typed', NS);
    const b = structuredClone(a);
    a.data = { who: 'a' };
    await client.update(CoreResources.configMaps, a);
    b.data = { who: 'b' };
    const stale = await client.update(CoreResources.configMaps, b).catch((e: unknown) => e);
    expect(stale).to.be.instanceOf(ConflictError);
    expect((stale as ConflictError).code).to.equal(409);

    const pre = await client
      .delete(CoreResources.configMaps, 'typed', {
        namespace: NS,
        preconditions: { resourceVersion: b.metadata.resourceVersion ?? '' },
      })
      .catch((e: unknown) => e);
    expect(pre).to.be.instanceOf(ConflictError);
    expect((await client.get<ConfigMap>(CoreResources.configMaps, 'typed', NS)).data).to.deep.equal({
      who: 'a',
    });
  });

  it('reports a read at a compacted resourceVersion as GoneError (HTTP 410) and a watch from it as a 410 ERROR event', async () => {
    const created = await client.create(CoreResources.configMaps, cm('gone-probe'));
    const oldRV = created.metadata.resourceVersion ?? '';
    for (let i = 0; i < 3; i++) await client.create(CoreResources.configMaps, cm(`gone-${i}`));
    await cp.compactEtcd();
    // A restart drops the apiserver's watch cache, so the old revision can only come from etcd.
    await cp.restartApiServer();
    const err = await client
      .list(CoreResources.configMaps, {
        namespace: NS,
        resourceVersion: oldRV,
        resourceVersionMatch: 'Exact',
      })
      .catch((e: unknown) => e);
    expect(err).to.be.instanceOf(GoneError);
    expect((err as GoneError).code).to.equal(410);
    const stream = await client.watch<{ kind?: string; code?: number }>(CoreResources.configMaps, {
      namespace: NS,
      resourceVersion: oldRV,
    });
    const first = await stream.next();
    await stream.return?.();
    expect(first.value).to.deep.include({ type: 'ERROR' });
    expect((first.value as { object: { code?: number } }).object.code).to.equal(410);
  });

  it('converges with retryOnConflict under 8 concurrent writers (no lost update)', async () => {
    await client.create(CoreResources.configMaps, cm('counter', { n: '0' }));
    const registry = newRegistry();
    const writers = Array.from(
      { length: 8 },
      () => new KubeClient({ kubeConfig: cp.kubeConfig, qps: 200, burst: 200, registry }),
    );
    let conflicts = 0;
    const perWriter = 25;
    await Promise.all(
      writers.map(async (w) => {
        for (let i = 0; i < perWriter; i++) {
          await retryOnConflict(
            async () => {
              const cur = await w.get<ConfigMap>(CoreResources.configMaps, 'counter', NS);
              cur.data = { n: String(Number(cur.data?.n ?? '0') + 1) };
              try {
                await w.update(CoreResources.configMaps, cur);
              } catch (err) {
                if (err instanceof ConflictError) conflicts++;
                throw err;
              }
            },
            { steps: 50, initialMs: 5, maxMs: 200 },
          );
        }
      }),
    );
    for (const w of writers) w.close();
    const final = await client.get<ConfigMap>(CoreResources.configMaps, 'counter', NS);
    expect(final.data?.n).to.equal(String(8 * perWriter));
    expect(conflicts, 'conflicts happened and were retried').to.be.greaterThan(0);
    const metrics = await registry.getSingleMetricAsString('rest_client_requests_total');
    expect(metrics).to.contain('code="409",method="PUT"');
  });

  it('applies with server-side apply and patches with a JSON patch', async () => {
    const applied = await client.patch<ConfigMap>(
      CoreResources.configMaps,
      'applied',
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'applied', namespace: NS }, data: { a: '1' } },
      { type: 'apply', namespace: NS, fieldManager: 'it', force: true },
    );
    expect(applied.data).to.deep.equal({ a: '1' });
    const json = await client.patch<ConfigMap>(
      CoreResources.configMaps,
      'applied',
      [{ op: 'add', path: '/data/b', value: '2' }],
      {
        type: 'json',
        namespace: NS,
      },
    );
    expect(json.data).to.deep.equal({ a: '1', b: '2' });
  });
});
