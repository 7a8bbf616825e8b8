import { expect } from 'chai';

import type { Machine, MachineClass } from '../../../../lib/api/types.js';
import { planNodeSync } from '../../../../lib/controllers/machine/nodesync.js';
import type { Node } from '../../../../lib/kube/types.js';

const LAST = 'node.machine.sapcloud.io/last-applied-anno-labels-taints';

function machine(tmpl: NonNullable<Machine['spec']>['nodeTemplate']): Machine {
  return {
    metadata: { name: 'm1', namespace: 'default' },
    spec: tmpl === undefined ? {} : { nodeTemplate: tmpl },
  };
}

function node(
  over: Partial<Node['metadata']> = {},
  spec: Node['spec'] = {},
  capacity?: Record<string, string>,
): Node {
  return {
    metadata: {
      name: 'm1',
      resourceVersion: '7',
      labels: { 'node.gardener.cloud/machine-name': 'm1' },
      finalizers: ['node.machine.sapcloud.io/machine-controller'],
      ...over,
    },
    spec,
    ...(capacity === undefined ? {} : { status: { capacity } }),
  };
}

describe('node template sync planning', () => {
  it('writes nothing when the node already matches', () => {
    expect(planNodeSync(node(), machine(undefined), undefined, true)).to.deep.equal({});
  });

  it('adds the machine-name label and the finalizer in one patch, conditional on the list it extends', () => {
    const plan = planNodeSync(
      { metadata: { name: 'm1', resourceVersion: '3' } },
      machine(undefined),
      undefined,
      true,
    );
    expect(plan.patch).to.deep.equal({
      metadata: {
        labels: { 'node.gardener.cloud/machine-name': 'm1' },
        finalizers: ['node.machine.sapcloud.io/machine-controller'],
        resourceVersion: '3',
      },
    });
  });

  it('applies template labels, annotations and taints and records what it applied', () => {
    const plan = planNodeSync(
      node(),
      machine({
        metadata: { labels: { pool: 'a' }, annotations: { note: 'x' } },
        spec: { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] },
      }),
      undefined,
      true,
    );
    const md = (plan.patch as { metadata: Record<string, Record<string, unknown>> }).metadata;
    expect(md.labels).to.deep.equal({ pool: 'a' });
    expect(md.annotations?.note).to.equal('x');
    expect(JSON.parse(String(md.annotations?.[LAST]))).to.deep.equal({
      metadata: { labels: { pool: 'a' }, annotations: { note: 'x' } },
      spec: { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] },
    });
    expect((plan.patch as { spec: unknown }).spec).to.deep.equal({
      taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }],
    });
  });

  it('removes keys that left the template but never touches keys users set on the node', () => {
    const applied = JSON.stringify({
      metadata: { labels: { pool: 'a', old: '1' } },
      spec: { taints: [{ key: 'gone', effect: 'NoSchedule' }] },
    });
    const n = node(
      {
        labels: { 'node.gardener.cloud/machine-name': 'm1', pool: 'a', old: '1', mine: 'user' },
        annotations: { [LAST]: applied, userNote: 'keep' },
      },
      {
        taints: [
          { key: 'gone', effect: 'NoSchedule' },
          { key: 'user-taint', effect: 'NoExecute' },
        ],
      },
    );
    const plan = planNodeSync(n, machine({ metadata: { labels: { pool: 'a' } } }), undefined, true);
    const patch = plan.patch as {
      metadata: Record<string, Record<string, unknown>>;
      spec: { taints: unknown };
    };
    expect(patch.metadata.labels).to.deep.equal({ old: null });
    expect(patch.metadata.annotations?.userNote).to.equal(undefined);
    expect(patch.spec.taints).to.deep.equal([{ key: 'user-taint', effect: 'NoExecute' }]);
  });

  it('taints the node of a machine being replaced NoSchedule at once (expiry, rebalance, interruption) and lifts it when the mark goes', () => {
    for (const why of ['expired', 'rebalance-recommended', 'interrupted']) {
      const m = machine(undefined);
      m.metadata.annotations = { 'machine.mcm-ts.io/replacing': why };
      const plan = planNodeSync(
        node({}, { taints: [{ key: 'user', effect: 'NoExecute' }] }),
        m,
        undefined,
        true,
      );
      expect(plan.patch, why).to.deep.include({
        spec: {
          taints: [
            { key: 'user', effect: 'NoExecute' },
            { key: 'machine.mcm-ts.io/disrupted', value: why, effect: 'NoSchedule' },
          ],
        },
      });
      expect((plan.patch?.metadata as { resourceVersion?: string }).resourceVersion).to.equal('7');
    }
    const tainted = node(
      {},
      { taints: [{ key: 'machine.mcm-ts.io/disrupted', value: 'expired', effect: 'NoSchedule' }] },
    );
    const marked = machine(undefined);
    marked.metadata.annotations = { 'machine.mcm-ts.io/replacing': 'expired' };
    expect(planNodeSync(tainted, marked, undefined, true), 'already tainted').to.deep.equal({});
    expect(planNodeSync(tainted, machine(undefined), undefined, true).patch).to.deep.include({
      spec: { taints: null },
    });
  });

  it('merges the class’s virtual capacity into the node status and removes what left it', () => {
    const cls = {
      metadata: { name: 'c' },
      providerSpec: {},
      nodeTemplate: {
        capacity: {},
        instanceType: 'i',
        region: 'r',
        zone: 'z',
        virtualCapacity: { 'example.com/dongle': '2' },
      },
    } as MachineClass;
    const plan = planNodeSync(node({}, {}, { cpu: '2' }), machine(undefined), cls, true);
    expect(plan.statusPatch).to.deep.equal({ status: { capacity: { 'example.com/dongle': '2' } } });
    const n2 = node(
      {
        annotations: {
          'node.machine.sapcloud.io/last-applied-virtual-capacity': JSON.stringify({
            'example.com/dongle': '2',
          }),
        },
      },
      {},
      { cpu: '2', 'example.com/dongle': '2' },
    );
    const plan2 = planNodeSync(n2, machine(undefined), undefined, true);
    expect(plan2.statusPatch).to.deep.equal({ status: { capacity: { 'example.com/dongle': null } } });
  });
});
