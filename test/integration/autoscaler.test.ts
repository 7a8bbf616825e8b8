import { status } from '@grpc/grpc-js';
import { expect } from 'chai';

import { Annotation } from '../../lib/api/constants.js';
import { MachineDeploymentResource, type MachineDeployment } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { OptionAnnotation } from '../../lib/autoscaler/options.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { decodeNode } from '../../lib/autoscaler/proto.js';
import type { Manager } from '../../lib/manager.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { LifecycleEnv, NS, nodeTemplate, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

interface Instance {
  id: string;
  status: { instanceState: string; errorInfo?: { instanceErrorClass: number; errorCode: string } | null };
}

async function expectCode(p: Promise<unknown>, code: status, text?: RegExp): Promise<string> {
  try {
    await p;
  } catch (err) {
    expect(grpcCode(err), String(err)).to.equal(code);
    const details = (err as { details?: string }).details ?? '';
    if (text !== undefined) expect(details).to.match(text);
    return details;
  }
  expect.fail(`expected gRPC status ${status[code]}`);
}

describe('autoscaler externalgrpc server (real kube-apiserver, manager with the virtual provider)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;
  let manager: Manager;
  let ca: CloudProviderClient;

  const instances = async (id: string): Promise<Instance[]> =>
    ((await ca.call('NodeGroupNodes', { id })).instances as Instance[]).sort((a, b) =>
      a.id.localeCompare(b.id),
    );
  const targetSize = async (id: string): Promise<number> =>
    Number((await ca.call('NodeGroupTargetSize', { id })).targetSize);
  const deployment = (name: string): Promise<MachineDeployment> =>
    env.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);
  /** Serves a deployment as a node group through the min/max annotations (any strings). */
  const groupLimits = (name: string, min: string, max: string): Promise<unknown> =>
    env.client.patch(
      MachineDeploymentResource,
      name,
      { metadata: { annotations: { [GroupAnnotation.MinSize]: min, [GroupAnnotation.MaxSize]: max } } },
      { type: 'merge', namespace: NS },
    );
  const runningIds = async (id: string, n: number): Promise<Instance[]> =>
    until(`${n} running instances in ${id}`, async () => {
      const list = await instances(id);
      return list.length === n && list.every((i) => i.status.instanceState === 'instanceRunning')
        ? list
        : undefined;
    });

  before(async () => {
    env = await LifecycleEnv.start();
    await env.createClass(
      'small',
      {},
      { nodeTemplate: nodeTemplate({ capacity: { cpu: '2', memory: '4Gi' } }) },
    );
    await env.createClass('bare', {});
    await env.createClass(
      'tight',
      { zoneCapacity: { 'eu-tight-a': 2 } },
      { nodeTemplate: nodeTemplate({ zone: 'eu-tight-a' }) },
    );
    manager = await env.startManager({
      grpcAddress: '127.0.0.1:0',
      grpcInsecure: true,
      nodeGroups: [
        { min: 1, max: 5, namespace: NS, name: 'flagged' },
        { min: 0, max: 3, namespace: NS, name: 'missing' },
      ],
    });
    ca = cloudProviderClient(`127.0.0.1:${manager.grpcPort}`);
  });

  after(async () => {
    ca.close();
    await env.stop();
  });

  it('serves groups from --nodes and from min/max annotations, skipping absent, invalid and max-0 deployments', async () => {
    await env.createDeployment('flagged', 2, 'small');
    const annotated = await env.createDeployment('annotated', 1, 'bare');
    await groupLimits('annotated', '0', '4');
    await env.createDeployment('broken', 1, 'bare');
    await groupLimits('broken', 'one', '4');
    await env.createDeployment('zero', 1, 'bare');
    await groupLimits('zero', '0', '0');
    expect(annotated.metadata.name).to.equal('annotated');
    const groups = await until('both groups', async () => {
      const res = (await ca.call('NodeGroups')).nodeGroups as {
        id: string;
        minSize: number;
        maxSize: number;
      }[];
      return res.length === 2 ? res : undefined;
    });
    expect(groups.map((g) => [g.id, g.minSize, g.maxSize])).to.deep.equal([
      [`${NS}/annotated`, 0, 4],
      [`${NS}/flagged`, 1, 5],
    ]);
    // Annotations override the flag's limits live.
    await env.client.patch(
      MachineDeploymentResource,
      'flagged',
      { metadata: { annotations: { [GroupAnnotation.MaxSize]: '6' } } },
      { type: 'merge', namespace: NS },
    );
    await until('max 6 from the annotation', async () => {
      const res = (await ca.call('NodeGroups')).nodeGroups as { id: string; maxSize: number }[];
      return res.find((g) => g.id === `${NS}/flagged`)?.maxSize === 6;
    });
  });

  it('reports every machine with its providerID once its Node exists, and maps nodes, placeholders and strangers', async () => {
    const id = `${NS}/flagged`;
    const list = await runningIds(id, 2);
    for (const i of list) expect(i.id).to.match(/^virtual:\/\/eu-virtual-a\//);
    const node = (await env.nodes()).find((n) => n.spec?.providerID === list[0]?.id);
    expect(node, 'node of the first instance').to.not.equal(undefined);
    const byNode = (
      await ca.call('NodeGroupForNode', {
        node: { providerID: node?.spec?.providerID, name: node?.metadata.name },
      })
    ).nodeGroup as { id: string; minSize: number; maxSize: number };
    expect([byNode.id, byNode.minSize, byNode.maxSize]).to.deep.equal([id, 1, 6]);
    const machine = (await env.machines('flagged'))[0]?.metadata.name ?? '';
    const fake = `requested://${machine}`;
    const byPlaceholder = (await ca.call('NodeGroupForNode', { node: { providerID: fake, name: fake } }))
      .nodeGroup as { id: string };
    expect(byPlaceholder.id).to.equal(id);
    const stranger = (
      await ca.call('NodeGroupForNode', { node: { providerID: 'aws:///eu-1a/i-123', name: 'ip-10-0-0-1' } })
    ).nodeGroup as { id: string };
    expect(stranger.id).to.equal('');
    const empty = (await ca.call('NodeGroupForNode', { node: { providerID: '', name: 'x' } })).nodeGroup as {
      id: string;
    };
    expect(empty.id).to.equal('');
  });

  it('counts a booting node as no group’s and its machine as an unregistered instance until the machine joined', async () => {
    // The class's VMs boot for an hour: each registers its node NotReady and its machine stays
    // Pending. The node may turn Ready before it has its template's labels and taints; the
    // autoscaler must keep counting the group's template node for it until the machine joined.
    await env.createClass('booting', { bootDelay: '1h' });
    await env.createDeployment('booting', 1, 'booting');
    await groupLimits('booting', '0', '2');
    const id = `${NS}/booting`;
    const { machine, node } = await until('a Pending machine with its node registered', async () => {
      const m = (await env.machines('booting'))[0];
      const n = (await env.nodes()).find((x) => x.metadata.name === m?.metadata.labels?.node);
      return m !== undefined && n !== undefined && phaseOf(m) === 'Pending'
        ? { machine: m, node: n }
        : undefined;
    });
    const name = machine.metadata.name ?? '';
    await until('the group served', async () => (await instances(id)).length === 1);
    const listed = await instances(id);
    expect(listed.map((i) => [i.id, i.status.instanceState, i.status.errorInfo ?? null])).to.deep.equal([
      [`requested://${name}`, 'instanceCreating', null],
    ]);
    const forNode = (
      await ca.call('NodeGroupForNode', {
        node: { providerID: node.spec?.providerID, name: node.metadata.name },
      })
    ).nodeGroup as { id: string };
    expect(forNode.id, 'the booting node').to.equal('');
    const fake = `requested://${name}`;
    const forPlaceholder = (await ca.call('NodeGroupForNode', { node: { providerID: fake, name: fake } }))
      .nodeGroup as { id: string };
    expect(forPlaceholder.id, 'the autoscaler’s stand-in for the unregistered instance').to.equal(id);
    expect(phaseOf((await env.machines('booting'))[0] ?? machine), 'still Pending after the calls').to.equal(
      'Pending',
    );
    await env.client.delete(MachineDeploymentResource, 'booting', { namespace: NS });
  });

  it('counts a node as its group’s only while it carries the labels of its machine’s node template', async () => {
    // The autoscaler sends the node as its cache holds it: one registered before the template
    // was applied lacks the labels the pending pods select, so it is no capacity of the group yet.
    await env.createDeployment(
      'labelled',
      1,
      'bare',
      {},
      { nodeTemplate: { metadata: { labels: { pool: 'p1' } } } },
    );
    await groupLimits('labelled', '0', '2');
    const id = `${NS}/labelled`;
    const [instance] = await runningIds(id, 1);
    const node = (await env.nodes()).find((n) => n.spec?.providerID === instance?.id);
    const labels = node?.metadata.labels ?? {};
    expect(labels.pool, 'the template applied to the node').to.equal('p1');
    const groupOf = async (l: Record<string, string>): Promise<string> =>
      (
        (
          await ca.call('NodeGroupForNode', {
            node: { providerID: node?.spec?.providerID, name: node?.metadata.name, labels: l },
          })
        ).nodeGroup as { id: string }
      ).id;
    expect(await groupOf(labels), 'with the template labels').to.equal(id);
    const { pool: _pool, ...without } = labels;
    expect(await groupOf(without), 'without them').to.equal('');
    expect(await groupOf({ ...labels, pool: 'other' }), 'with another value').to.equal('');
    await env.client.delete(MachineDeploymentResource, 'labelled', { namespace: NS });
  });

  it('in a group that answers options, a node that just joined under a not-ready taint is no group’s, even when its Ready condition is dated a minute back (as kwok dates it)', async () => {
    // The autoscaler counts a node with the not-ready taint as unready, and in a group that
    // answers options (MaxNodeStartupTime 0, kubernetes/autoscaler#10245) at once Unready: the
    // server holds it out until the taint goes, counting from the machine's join when the
    // kubelet dates the condition earlier. NodeGroupForNode and NodeGroupNodes must agree.
    await env.createDeployment(
      'fresh',
      1,
      'bare',
      {},
      { nodeTemplate: { metadata: { labels: { pool: 'fresh' } } } },
    );
    await groupLimits('fresh', '0', '2');
    await env.client.patch(
      MachineDeploymentResource,
      'fresh',
      { metadata: { annotations: { [OptionAnnotation.ScaleDownUnneededTime]: '10m' } } },
      { type: 'merge', namespace: NS },
    );
    const id = `${NS}/fresh`;
    // Joined (Running) moments ago. Without a node lifecycle controller here, the node keeps the
    // not-ready taint the API server put on it when it registered NotReady.
    const machine = await until('the machine Running', async () => {
      const m = (await env.machines('fresh'))[0];
      return m !== undefined && phaseOf(m) === 'Running' ? m : undefined;
    });
    const node = (await env.nodes()).find((n) => n.metadata.name === machine.metadata.labels?.node);
    if (node === undefined) throw new Error('no node');
    const name = node.metadata.name ?? '';
    // The node as it looks right after it turned Ready: the taint still on, the condition dated back.
    await env.client.patch(
      CoreResources.nodes,
      name,
      { spec: { taints: [{ key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' }] } },
      { type: 'merge' },
    );
    expect(
      Date.now() - Date.parse(machine.status?.lastOperation?.lastUpdateTime ?? ''),
      'joined moments ago',
    ).to.be.below(30_000);
    const dated = new Date(Date.now() - 120_000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    await env.client.patch(
      CoreResources.nodes,
      name,
      {
        status: {
          conditions: [
            {
              type: 'Ready',
              status: 'True',
              reason: 'KubeletReady',
              lastHeartbeatTime: dated,
              lastTransitionTime: dated,
            },
          ],
        },
      },
      { type: 'strategic', subresource: 'status' },
    );
    const groupOf = async (): Promise<string> =>
      (
        (
          await ca.call('NodeGroupForNode', {
            node: { providerID: node.spec?.providerID, name, labels: node.metadata.labels ?? {} },
          })
        ).nodeGroup as { id: string }
      ).id;
    await until('the server holds the just-joined node out of its group', async () => {
      const listed = await instances(id);
      return listed.length === 1 && listed[0]?.status.instanceState === 'instanceCreating';
    });
    expect(await groupOf(), 'NodeGroupForNode agrees with NodeGroupNodes').to.equal('');
    // The taint goes: the node is its group's.
    await env.client.patch(CoreResources.nodes, name, { spec: { taints: [] } }, { type: 'merge' });
    await until('the node counted again', async () => (await groupOf()) === id);
    await env.client.delete(MachineDeploymentResource, 'fresh', { namespace: NS });
  });

  it('IncreaseSize raises replicas with read-your-writes TargetSize and refuses beyond max, bad deltas and unknown groups', async () => {
    const id = `${NS}/flagged`;
    expect(await targetSize(id)).to.equal(2);
    await ca.call('NodeGroupIncreaseSize', { id, delta: 2 });
    expect(await targetSize(id), 'TargetSize right after the call').to.equal(4);
    expect((await deployment('flagged')).spec?.replicas).to.equal(4);
    await expectCode(
      ca.call('NodeGroupIncreaseSize', { id, delta: 3 }),
      status.FAILED_PRECONDITION,
      /max size 6/,
    );
    await expectCode(ca.call('NodeGroupIncreaseSize', { id, delta: 0 }), status.INVALID_ARGUMENT, /positive/);
    await expectCode(ca.call('NodeGroupIncreaseSize', { id: `${NS}/nope`, delta: 1 }), status.NOT_FOUND);
    await expectCode(ca.call('NodeGroupTargetSize', { id: 'not-a-group-id' }), status.NOT_FOUND);
    await expectCode(ca.call('NodeGroupNodes', { id: `${NS}/missing` }), status.NOT_FOUND);
    expect((await deployment('flagged')).spec?.replicas, 'nothing applied by refused calls').to.equal(4);
    await runningIds(id, 4);
  });

  it('DeleteNodes removes exactly the chosen machines, reports them Deleting at once, is idempotent and refuses below min or foreign nodes', async () => {
    const id = `${NS}/flagged`;
    const before = await runningIds(id, 4);
    const chosen = before.slice(0, 2).map((i) => i.id);
    const nodes = await env.nodes();
    const wire = chosen.map((pid) => {
      const n = nodes.find((x) => x.spec?.providerID === pid);
      return { providerID: pid, name: n?.metadata.name ?? '' };
    });
    // What DeleteNodes wrote, from the watch: the deployment controller may rewrite the trigger
    // annotation (and drop the entries of machines already gone) before a later GET would see it.
    const start = await deployment('flagged');
    const abort = new AbortController();
    const events = await env.client.watch<MachineDeployment>(MachineDeploymentResource, {
      namespace: NS,
      fieldSelector: 'metadata.name=flagged',
      resourceVersion: start.metadata.resourceVersion ?? '',
      signal: abort.signal,
    });
    await ca.call('NodeGroupDeleteNodes', { id, nodes: wire });
    let written: MachineDeployment | undefined;
    for await (const ev of events) {
      if (ev.type === 'MODIFIED' && ev.object.spec?.replicas === 2) {
        written = ev.object;
        break;
      }
    }
    abort.abort();
    expect(await targetSize(id)).to.equal(2);
    const after = await instances(id);
    expect(after.filter((i) => chosen.includes(i.id)).map((i) => i.status.instanceState)).to.deep.equal([
      'instanceDeleting',
      'instanceDeleting',
    ]);
    expect((await deployment('flagged')).spec?.replicas).to.equal(2);
    // One write: the new size and both machines in the trigger annotation together.
    const trigger = written?.metadata.annotations?.[Annotation.TriggerDeletionByMCM] ?? '';
    for (const w of wire)
      expect(trigger, 'the trigger annotation DeleteNodes wrote').to.include(`${w.name}~`);
    // A retry (the autoscaler timed out and asks again) changes nothing.
    await ca.call('NodeGroupDeleteNodes', { id, nodes: wire });
    expect((await deployment('flagged')).spec?.replicas).to.equal(2);
    const survivors = before
      .slice(2)
      .map((i) => i.id)
      .sort();
    await until('exactly the chosen machines gone', async () => {
      const ids = (await instances(id)).map((i) => i.id).sort();
      return JSON.stringify(ids) === JSON.stringify(survivors);
    });
    const names = new Set((await env.nodes()).map((n) => n.metadata.name));
    for (const w of wire) expect(names.has(w.name), `node ${w.name} deleted`).to.equal(false);
    // Below min (1): deleting both survivors is refused as a whole.
    const rest = (await env.nodes()).filter((n) => survivors.includes(n.spec?.providerID ?? ''));
    await expectCode(
      ca.call('NodeGroupDeleteNodes', {
        id,
        nodes: rest.map((n) => ({ providerID: n.spec?.providerID, name: n.metadata.name })),
      }),
      status.FAILED_PRECONDITION,
      /min size 1/,
    );
    // A node of another group is refused, and nothing is applied.
    const other = (await instances(`${NS}/annotated`)).find(
      (i) => i.status.instanceState === 'instanceRunning',
    );
    await expectCode(
      ca.call('NodeGroupDeleteNodes', {
        id,
        nodes: [
          { providerID: other?.id, name: 'x' },
          { providerID: rest[0]?.spec?.providerID, name: rest[0]?.metadata.name },
        ],
      }),
      status.INVALID_ARGUMENT,
      /annotated/,
    );
    expect((await deployment('flagged')).spec?.replicas).to.equal(2);
  });

  it('reports failed creations with their error class and DecreaseTargetSize removes only unregistered capacity, clamping at min', async () => {
    await env.createDeployment('tight', 4, 'tight');
    await groupLimits('tight', '1', '8');
    const id = `${NS}/tight`;
    const list = await until('2 running and 2 out-of-resources instances', async () => {
      const l = await instances(id).catch(() => []);
      const running = l.filter((i) => i.status.instanceState === 'instanceRunning').length;
      const oor = l.filter((i) => i.status.errorInfo?.instanceErrorClass === 1).length;
      return running === 2 && oor === 2 ? l : undefined;
    });
    const failed = list.filter((i) => i.status.errorInfo !== undefined && i.status.errorInfo !== null);
    for (const f of failed) {
      expect(f.id).to.match(/^requested:\/\//);
      expect(f.status.instanceState).to.equal('instanceCreating');
      expect(f.status.errorInfo?.errorCode).to.equal('ResourceExhausted');
    }
    await expectCode(
      ca.call('NodeGroupDecreaseTargetSize', { id, delta: -3 }),
      status.FAILED_PRECONDITION,
      /registered/,
    );
    await expectCode(ca.call('NodeGroupDecreaseTargetSize', { id, delta: 1 }), status.INVALID_ARGUMENT);
    await ca.call('NodeGroupDecreaseTargetSize', { id, delta: -2 });
    expect(await targetSize(id)).to.equal(2);
    const running = list
      .filter((i) => i.status.instanceState === 'instanceRunning')
      .map((i) => i.id)
      .sort();
    await until('only the registered machines remain', async () => {
      const ids = (await instances(id)).map((i) => i.id).sort();
      return JSON.stringify(ids) === JSON.stringify(running);
    });
    const machines = await env.machines('tight');
    expect(machines.map(phaseOf).every((p) => p === 'Running')).to.equal(true);
  });

  it('TemplateNodeInfo encodes the class nodeTemplate and deployment labels/taints into fields 1 and 2; UNIMPLEMENTED without a nodeTemplate', async () => {
    await env.client.patch(
      MachineDeploymentResource,
      'flagged',
      {
        spec: {
          template: {
            spec: {
              nodeTemplate: {
                metadata: { labels: { pool: 'blue' } },
                spec: { taints: [{ key: 'dedicated', value: 'blue', effect: 'NoSchedule' }] },
              },
            },
          },
        },
      },
      { type: 'merge', namespace: NS },
    );
    const res = await until('template with the pool label', async () => {
      const r = await ca.call('NodeGroupTemplateNodeInfo', { id: `${NS}/flagged` });
      const n = decodeNode(r.nodeBytes as Buffer) as { metadata: { labels: Record<string, string> } };
      return n.metadata.labels.pool === 'blue' ? r : undefined;
    });
    expect(Buffer.compare(res.nodeInfo as Buffer, res.nodeBytes as Buffer)).to.equal(0);
    const node = decodeNode(res.nodeBytes as Buffer) as {
      metadata: { labels: Record<string, string> };
      spec: { taints: { key: string; effect: string }[] };
      status: {
        capacity: Record<string, { string: string }>;
        allocatable: Record<string, { string: string }>;
        conditions: { type: string; status: string }[];
      };
    };
    expect(node.status.capacity.cpu?.string).to.equal('2');
    expect(node.status.capacity.pods?.string).to.equal('110');
    expect(node.status.allocatable.memory?.string).to.equal('4Gi');
    expect(node.metadata.labels['node.kubernetes.io/instance-type']).to.equal('v-medium');
    expect(node.metadata.labels['topology.kubernetes.io/zone']).to.equal('eu-virtual-a');
    expect(node.spec.taints.map((t) => `${t.key}:${t.effect}`)).to.deep.equal(['dedicated:NoSchedule']);
    expect(node.status.conditions.find((c) => c.type === 'Ready')?.status).to.equal('True');
    await expectCode(
      ca.call('NodeGroupTemplateNodeInfo', { id: `${NS}/annotated` }),
      status.UNIMPLEMENTED,
      /no nodeTemplate/,
    );
  });

  it('refuses scale-down during a rollout with a message saying when it is possible again, and serves scale-up', async () => {
    const id = `${NS}/annotated`;
    await runningIds(id, 1);
    await env.scale('annotated', 2);
    await runningIds(id, 2);
    await env.createClass('bare2', { bootDelay: '1h' });
    await env.client.patch(
      MachineDeploymentResource,
      'annotated',
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: 'bare2' } } } } },
      { type: 'merge', namespace: NS },
    );
    const nodes = await env.nodes();
    const old = (await instances(id)).find((i) => i.status.instanceState === 'instanceRunning');
    const n = nodes.find((x) => x.spec?.providerID === old?.id);
    await until(
      'rollout visible',
      async () =>
        (await env.client.list(MachineDeploymentResource, { namespace: NS })).items.length > 0 &&
        (await instances(id)).length > 2,
    );
    await expectCode(
      ca.call('NodeGroupDeleteNodes', { id, nodes: [{ providerID: old?.id, name: n?.metadata.name }] }),
      status.FAILED_PRECONDITION,
      /rolling out.*once the rollout has replaced them/,
    );
    const size = await targetSize(id);
    await ca.call('NodeGroupIncreaseSize', { id, delta: 1 });
    expect(await targetSize(id)).to.equal(size + 1);
  });

  it('answers GPU, pricing, options and health calls as configured', async () => {
    expect((await ca.call('GPULabel')).label).to.equal('');
    expect((await ca.call('GetAvailableGPUTypes')).gpuTypes).to.deep.equal({});
    await expectCode(ca.call('PricingNodePrice', {}), status.INVALID_ARGUMENT, /no node/);
    // A group without option annotations answers no options: the autoscaler's flags apply.
    expect(
      (await ca.call('NodeGroupGetOptions', { id: `${NS}/flagged` })).nodeGroupAutoscalingOptions,
    ).to.equal(null);
    await expectCode(ca.call('NodeGroupGetOptions', { id: `${NS}/nope` }), status.NOT_FOUND);
    await ca.call('Refresh');
    await ca.call('Cleanup');
    const text = await manager.registry.metrics();
    expect(text).to.match(
      /mcm_autoscaler_grpc_requests_total\{method="NodeGroupIncreaseSize",code="FAILED_PRECONDITION"\} [1-9]/,
    );
  });
});
