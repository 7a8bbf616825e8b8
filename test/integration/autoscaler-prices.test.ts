// Prices and per-group options of the externalgrpc server, against a real kube-apiserver and the
// whole manager with the virtual provider: what the price expander and the options processor of a
// cluster-autoscaler get for template nodes, real nodes and pods, and how refused annotations are
// reported.

import path from 'node:path';

import { status } from '@grpc/grpc-js';
import { expect } from 'chai';
import protobuf from 'protobufjs';

import { MachineDeploymentResource } from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { OptionAnnotation } from '../../lib/autoscaler/options.js';
import { NOTIONAL_RATES, PRICE_ANNOTATION } from '../../lib/autoscaler/pricing.js';
import { decodeNode } from '../../lib/autoscaler/proto.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent } from '../../lib/kube/types.js';
import type { Manager } from '../../lib/manager.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS, nodeTemplate } from './env/lifecycle.js';
import { until } from './env/until.js';

async function expectCode(p: Promise<unknown>, code: status, text?: RegExp): Promise<void> {
  try {
    await p;
  } catch (err) {
    expect(grpcCode(err), String(err)).to.equal(code);
    if (text !== undefined) expect((err as { details?: string }).details ?? '').to.match(text);
    return;
  }
  expect.fail(`expected gRPC status ${status[code]}`);
}

const HOUR = { seconds: 1_800_000_000, nanos: 0 };
const window = (hours: number): Record<string, unknown> => ({
  startTimestamp: HOUR,
  endTimestamp: { seconds: HOUR.seconds + hours * 3600, nanos: 0 },
});

/** A pod as Go's v1.Pod.Marshal encodes it (the fields pricing reads). */
function podBytes(cpu: string, memory: string): Buffer {
  const type = protobuf
    .loadSync(path.join(repoRoot, 'protos', 'k8s-pod.proto'))
    .lookupType('k8s.io.api.core.v1.Pod');
  const msg = type.fromObject({
    metadata: { name: 'p', namespace: NS },
    spec: {
      containers: [
        { name: 'c', resources: { requests: { cpu: { string: cpu }, memory: { string: memory } } } },
      ],
    },
  });
  return Buffer.from(type.encode(msg).finish());
}

describe('autoscaler prices and per-group options (real kube-apiserver, manager with the virtual provider)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;
  let manager: Manager;
  let ca: CloudProviderClient;

  const serve = (name: string, annotations: Record<string, string> = {}): Promise<unknown> =>
    env.client.patch(
      MachineDeploymentResource,
      name,
      {
        metadata: {
          annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '5', ...annotations },
        },
      },
      { type: 'merge', namespace: NS },
    );
  /** The template node the autoscaler prices for a group: ours, renamed as the autoscaler does. */
  const templateOf = async (id: string): Promise<Record<string, unknown>> => {
    const res = await ca.call('NodeGroupTemplateNodeInfo', { id });
    const node = decodeNode(res.nodeBytes as Buffer) as {
      metadata: { labels: Record<string, string>; annotations: Record<string, string> };
    };
    return {
      providerID: '',
      name: `template-node-for-${id}-4242`,
      labels: node.metadata.labels,
      annotations: node.metadata.annotations,
    };
  };
  const price = async (node: Record<string, unknown>, hours = 1): Promise<number> =>
    Number((await ca.call('PricingNodePrice', { node, ...window(hours) })).price);

  before(async () => {
    env = await LifecycleEnv.start();
    const shape = { capacity: { cpu: '4', memory: '8Gi' } };
    await env.createClass('cheap', { pricePerHour: 1 }, { nodeTemplate: nodeTemplate(shape) });
    await env.createClass('dear', { pricePerHour: 3 }, { nodeTemplate: nodeTemplate(shape) });
    await env.createClass('unpriced', {}, { nodeTemplate: nodeTemplate(shape) });
    await env.createClass('bare', {});
    await env.createDeployment('cheap', 1, 'cheap');
    await env.createDeployment('dear', 0, 'dear');
    await env.createDeployment('unpriced', 0, 'unpriced');
    await env.createDeployment('tuned', 0, 'cheap');
    await env.createDeployment('bare', 1, 'bare');
    await serve('cheap');
    await serve('dear');
    await serve('unpriced');
    await serve('bare');
    await serve('tuned', {
      [OptionAnnotation.ScaleDownUnneededTime]: '10s',
      [OptionAnnotation.ScaleDownUtilizationThreshold]: '0.3',
      // gardener writes the keys it does not set with empty values: they mean "not set".
      [OptionAnnotation.MaxNodeProvisionTime]: '',
      [OptionAnnotation.ScaleDownUnreadyTime]: 'soon',
    });
    manager = await env.startManager({ grpcAddress: '127.0.0.1:0', grpcInsecure: true });
    ca = cloudProviderClient(`127.0.0.1:${manager.grpcPort}`);
    await until('five groups served', async () =>
      ((await ca.call('NodeGroups')).nodeGroups as unknown[]).length === 5 ? true : undefined,
    );
  });

  after(async () => {
    ca.close();
    await env.stop();
  });

  it('prices a template node by its group class, over the window asked (1 and 3 per hour)', async () => {
    expect(await price(await templateOf(`${NS}/cheap`))).to.equal(1);
    expect(await price(await templateOf(`${NS}/dear`))).to.equal(3);
    expect(await price(await templateOf(`${NS}/dear`), 2)).to.equal(6);
  });

  it('prices a real node by its machine class', async () => {
    const node = await until('the cheap group node', async () => {
      const names = new Set((await env.machines('cheap')).map((m) => m.metadata.labels?.node ?? ''));
      return (await env.nodes()).find((n) => names.has(n.metadata.name ?? ''));
    });
    const answer = Number(
      (
        await ca.call('PricingNodePrice', {
          node: {
            providerID: node.spec?.providerID,
            name: node.metadata.name,
            labels: node.metadata.labels ?? {},
          },
          // The 1.33/1.34 fields (metav1.Time) when the 1.35 ones are absent.
          startTime: HOUR,
          endTime: { seconds: HOUR.seconds + 3600, nanos: 0 },
        })
      ).price,
    );
    expect(answer).to.equal(1);
  });

  it('prices an unpriced group notionally by its size, with a Warning event on its deployment', async () => {
    // The unpriced class's nodeTemplate: 4 vCPU and 8 GiB at 0.04048 and 0.004445 per hour.
    const notional = 4 * NOTIONAL_RATES.perVcpuHour + 8 * NOTIONAL_RATES.perGiBHour;
    expect(await price(await templateOf(`${NS}/unpriced`))).to.be.closeTo(notional, 1e-9);
    expect(await price(await templateOf(`${NS}/unpriced`), 2)).to.be.closeTo(2 * notional, 1e-9);
    const event = await until('a NotionalPrice event on the unpriced deployment', async () => {
      const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
      return events.find((e) => e.reason === 'NotionalPrice' && e.involvedObject.name === 'unpriced');
    });
    expect(event.type).to.equal('Warning');
    expect(event.message).to.include('sets no providerSpec.pricePerHour');
    expect(event.message).to.include('4 vCPU and 8.00 GiB');
    expect(event.message).to.include(PRICE_ANNOTATION);
    // A group whose class has no nodeTemplate is sized by a node of the group (the virtual
    // provider's default VM: 2 vCPU and 4 GiB).
    const node = await until('a node of the bare group', async () => {
      const nodes = await env.nodes();
      const names = new Set((await env.machines('bare')).map((m) => m.metadata.labels?.node ?? ''));
      return nodes.find((n) => names.has(n.metadata.name ?? ''));
    });
    const fromNode = 2 * NOTIONAL_RATES.perVcpuHour + 4 * NOTIONAL_RATES.perGiBHour;
    expect(
      await price({
        providerID: '',
        name: `template-node-for-${NS}/bare-7`,
        labels: node.metadata.labels ?? {},
      }),
    ).to.be.closeTo(fromNode, 1e-9);
    expect(
      await price({ providerID: node.spec?.providerID ?? '', name: node.metadata.name ?? '', labels: {} }),
    ).to.be.closeTo(fromNode, 1e-9);
  });

  it('answers NOT_FOUND for a node that is not ours, INVALID_ARGUMENT for a bad window', async () => {
    await expectCode(
      ca.call('PricingNodePrice', {
        node: { providerID: 'aws:///x/i-1', name: 'stranger', labels: {} },
        ...window(1),
      }),
      status.NOT_FOUND,
      /not a machine of this manager/,
    );
    await expectCode(
      ca.call('PricingNodePrice', { node: await templateOf(`${NS}/cheap`), startTimestamp: HOUR }),
      status.INVALID_ARGUMENT,
    );
  });

  it('lets the price-per-hour annotation on the deployment win over the class, and reports a bad one', async () => {
    await env.client.patch(
      MachineDeploymentResource,
      'dear',
      { metadata: { annotations: { [PRICE_ANNOTATION]: '0.25' } } },
      { type: 'merge', namespace: NS },
    );
    await until('the override in effect', async () =>
      (await price(await templateOf(`${NS}/dear`))) === 0.25 ? true : undefined,
    );
    await env.client.patch(
      MachineDeploymentResource,
      'dear',
      { metadata: { annotations: { [PRICE_ANNOTATION]: 'cheap' } } },
      { type: 'merge', namespace: NS },
    );
    await until('the class price back', async () =>
      (await price(await templateOf(`${NS}/dear`))) === 3 ? true : undefined,
    );
    await until('an InvalidPriceAnnotation event on the deployment', async () => {
      const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
      return events.find((e) => e.reason === 'InvalidPriceAnnotation' && e.involvedObject.name === 'dear');
    });
  });

  it("prices a pod as its share of the most cost-efficient group's node", async () => {
    // 1 of 4 cores on the cheap group's 4-core, 8 GiB node at 1 per hour: 0.25 for one hour.
    const p = Number(
      (await ca.call('PricingPodPrice', { pod_bytes: podBytes('1', '1Gi'), ...window(1) })).price,
    );
    expect(p).to.be.closeTo(0.25, 1e-9);
    // 1.33 sends the pod in field 1 only.
    const legacy = Number(
      (
        await ca.call('PricingPodPrice', {
          pod: podBytes('500m', '4Gi'),
          startTime: HOUR,
          endTime: { seconds: HOUR.seconds + 7200, nanos: 0 },
        })
      ).price,
    );
    expect(legacy).to.be.closeTo(1, 1e-9); // half the memory for two hours
    await expectCode(ca.call('PricingPodPrice', { ...window(1) }), status.INVALID_ARGUMENT, /no pod/);
  });

  it('serves the options of annotated groups over the defaults sent, and none for the others', async () => {
    const defaults = {
      scaleDownUtilizationThreshold: 0.5,
      scaleDownGpuUtilizationThreshold: 0.5,
      ignoreDaemonSetsUtilization: true,
      scaleDownUnneededDuration: { seconds: 600, nanos: 0 },
      scaleDownUnreadyDuration: { seconds: 1200, nanos: 0 },
      MaxNodeProvisionDuration: { seconds: 900, nanos: 0 },
    };
    const plain = await ca.call('NodeGroupGetOptions', { id: `${NS}/cheap`, defaults });
    expect(plain.nodeGroupAutoscalingOptions).to.equal(null);
    const tuned = (await ca.call('NodeGroupGetOptions', { id: `${NS}/tuned`, defaults }))
      .nodeGroupAutoscalingOptions as Record<string, unknown>;
    expect(tuned.scaleDownUtilizationThreshold).to.equal(0.3);
    expect(tuned.scaleDownGpuUtilizationThreshold).to.equal(0.5);
    expect(tuned.ignoreDaemonSetsUtilization).to.equal(true);
    expect(tuned.scaleDownUnneededDuration).to.deep.equal({ seconds: 10, nanos: 0 });
    expect(tuned.scaleDownUnneededTime).to.deep.equal({ duration: 10e9 });
    // The refused and the empty values answer as unset: the defaults.
    expect(tuned.scaleDownUnreadyDuration).to.deep.equal({ seconds: 1200, nanos: 0 });
    expect(tuned.MaxNodeProvisionDuration).to.deep.equal({ seconds: 900, nanos: 0 });
    expect(tuned.MaxNodeProvisionTime).to.deep.equal({ duration: 900e9 });
    const event = await until('an InvalidAutoscalerOption event on the deployment', async () => {
      const events = (await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS })).items;
      return events.find((e) => e.reason === 'InvalidAutoscalerOption' && e.involvedObject.name === 'tuned');
    });
    expect(event.message).to.include(OptionAnnotation.ScaleDownUnreadyTime);
    expect(event.message).to.not.include(OptionAnnotation.MaxNodeProvisionTime);
    // 1.33 sends its defaults as metav1.Duration only.
    const legacy = (
      await ca.call('NodeGroupGetOptions', {
        id: `${NS}/tuned`,
        defaults: {
          scaleDownUtilizationThreshold: 0.5,
          scaleDownUnreadyTime: { duration: 1200e9 },
          MaxNodeProvisionTime: { duration: 900e9 },
        },
      })
    ).nodeGroupAutoscalingOptions as Record<string, unknown>;
    expect(legacy.scaleDownUnreadyTime).to.deep.equal({ duration: 1200e9 });
    expect(legacy.scaleDownUnreadyDuration).to.deep.equal({ seconds: 1200, nanos: 0 });
  });

  it("exports each group's price as a metric, the notional ones marked", async () => {
    const text = await manager.registry.metrics();
    expect(text).to.match(
      new RegExp(
        `mcm_autoscaler_node_group_price_per_hour\\{node_group="${NS}/cheap",currency="",notional="false"\\} 1\\b`,
      ),
    );
    const unpriced = new RegExp(
      `^mcm_autoscaler_node_group_price_per_hour\\{node_group="${NS}/unpriced",currency="USD",notional="true"\\} (\\S+)$`,
      'm',
    ).exec(text);
    expect(unpriced, "the unpriced group's series").to.not.equal(null);
    expect(Number(unpriced?.[1])).to.be.closeTo(
      4 * NOTIONAL_RATES.perVcpuHour + 8 * NOTIONAL_RATES.perGiBHour,
      1e-9,
    );
  });
});
