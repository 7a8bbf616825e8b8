// The stock cluster-autoscaler (the newest pinned version) with `--expander=price` and AWS node
// groups on the EC2 emulator: it picks by our prices. First two on-demand groups that both fit the
// pending pod, m5.large (0.096/h in the list table) and m5.2xlarge (0.384/h): the m5.large group
// is scaled up. Then a spot m5.2xlarge group joins, priced from the emulator's
// DescribeSpotPriceHistory (moto answers a fixed 0.00001) by the provider's background refresh:
// the next pending pod goes to it.

import { expect } from 'chai';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { requireAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { REGION, ZONE, sampleMachineClass } from '../harness/ec2cloud.js';
import { newestAutoscalerVersion } from '../harness/tools.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import type { LifecycleEnv } from '../integration/env/lifecycle.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { startAwsE2eEnv, type AwsE2eEnv } from './awsenv.js';

const POOL = 'aws-price';
const LARGE = { type: 'm5.large', capacity: { cpu: '2', memory: '8Gi', pods: '20' } };
const XXL = { type: 'm5.2xlarge', capacity: { cpu: '8', memory: '32Gi', pods: '20' } };
const GROUPS = [
  { name: 'large', shape: LARGE, spot: false },
  { name: 'xxl', shape: XXL, spot: false },
  { name: 'spot', shape: XXL, spot: true },
] as const;

describe('cluster-autoscaler --expander=price with AWS node groups on the EC2 emulator (real autoscaler, kube-scheduler, kwok, moto)', function () {
  this.timeout(600_000);
  const version = newestAutoscalerVersion();
  let aws: AwsE2eEnv;
  let env: LifecycleEnv;
  let ca: Autoscaler | undefined;

  const replicas = async (name: string): Promise<number> =>
    (await env.client.get<MachineDeployment>(MachineDeploymentResource, `${POOL}-${name}`, NS)).spec
      ?.replicas ?? 0;
  const serve = (name: string): Promise<unknown> =>
    env.client.patch(
      MachineDeploymentResource,
      `${POOL}-${name}`,
      { metadata: { annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '3' } } },
      { type: 'merge', namespace: NS },
    );
  const priceMetric = async (name: string): Promise<number | undefined> => {
    const text = (await env.manager?.registry.metrics()) ?? '';
    const m = new RegExp(
      `^mcm_autoscaler_node_group_price_per_hour\\{node_group="${NS}/${POOL}-${name}",currency="USD",notional="false"\\} (\\S+)$`,
      'm',
    ).exec(text);
    return m === null ? undefined : Number(m[1]);
  };
  /** Waits until the pods of app run, failing at once if one of the `others` groups grows. */
  async function runsOn(app: string, others: string[]): Promise<Pod[]> {
    return until(
      `the pods of ${app} running`,
      async () => {
        for (const o of others) {
          const r = await replicas(o);
          if (r > 0)
            expect.fail(
              `the ${o} group was scaled up to ${r}\n${ca?.log().split('\n').slice(-40).join('\n') ?? ''}`,
            );
        }
        const ps = (
          await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${app}` })
        ).items;
        return ps.length > 0 &&
          ps.every((p) => p.spec?.nodeName !== undefined && p.status?.phase === 'Running')
          ? ps
          : undefined;
      },
      300_000,
    ).catch((err: unknown) => {
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n--- cluster-autoscaler log (tail)\n${ca?.log().split('\n').slice(-40).join('\n') ?? ''}`,
      );
    });
  }
  const instanceTypeOf = async (nodeName: string): Promise<string | undefined> =>
    (await env.client.get<Node>(CoreResources.nodes, nodeName)).metadata.labels?.[
      'node.kubernetes.io/instance-type'
    ];

  before(async () => {
    requireAutoscaler(version);
    // The classes exist before the manager starts: its first orphan collection pass lists the
    // spot class, which is how the provider learns to fetch its spot price.
    aws = await startAwsE2eEnv({
      capacityByType: { [LARGE.type]: LARGE.capacity, [XXL.type]: XXL.capacity },
      prepare: async (e, c) => {
        for (const g of GROUPS) {
          const cls = sampleMachineClass(c, `${POOL}-${g.name}`);
          cls.providerSpec.machineType = g.shape.type;
          // gardener's sample class asks for spot (spotPrice: ""); the on-demand ones do not.
          if (!g.spot) delete cls.providerSpec.spotPrice;
          cls.nodeTemplate = {
            capacity: g.shape.capacity,
            instanceType: g.shape.type,
            region: REGION,
            zone: ZONE,
          };
          await e.client.create<MachineClass>(MachineClassResource, cls);
          await e.createDeployment(
            `${POOL}-${g.name}`,
            0,
            `${POOL}-${g.name}`,
            {},
            {
              nodeTemplate: { metadata: { labels: { pool: POOL } } },
            },
          );
        }
      },
    });
    ({ env } = aws);
    await serve('large');
    await serve('xxl');
    // --v=5: the price expander logs the price it read for each option.
    ca = await aws.startAutoscaler(version, { expander: 'price', 'scale-down-enabled': false }, 5);
  });

  after(async () => {
    await aws.stop();
  });

  it(`cluster-autoscaler ${version}: of m5.large (0.096/h) and m5.2xlarge (0.384/h) on demand, the m5.large group is scaled up`, async () => {
    expect(await priceMetric('large')).to.equal(0.096);
    expect(await priceMetric('xxl')).to.equal(0.384);
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: `${POOL}-a`, namespace: NS, pool: POOL, replicas: 1, memory: '1Gi' }),
    );
    const [pod] = await runsOn(`${POOL}-a`, ['xxl']);
    expect(await instanceTypeOf(pod?.spec?.nodeName ?? '')).to.equal(LARGE.type);
    expect(await replicas('large')).to.equal(1);
    // The choice alone does not prove the prices (the expander's unfitness term prefers the smaller
    // type anyway): the autoscaler must have read the list prices for one node for one hour.
    const log = ca?.log() ?? '';
    expect(log).to.contain(`Price expander for ${NS}/${POOL}-large: all_nodes_price=0.096000`);
    expect(log).to.contain(`Price expander for ${NS}/${POOL}-xxl: all_nodes_price=0.384000`);
    expect(log).to.not.match(/Failed to calculate node price|Expander filtered out all options/);
  });

  it(`cluster-autoscaler ${version}: a spot m5.2xlarge group priced from DescribeSpotPriceHistory (0.00001/h) takes the next pod`, async () => {
    await serve('spot');
    // The provider fetched the spot price in the background (the class was seen at start).
    await until(
      'the spot group priced from the emulator',
      async () => ((await priceMetric('spot')) === 0.00001 ? true : undefined),
      60_000,
    );
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: `${POOL}-b`, namespace: NS, pool: POOL, replicas: 1, memory: '1Gi' }),
    );
    const [pod] = await runsOn(`${POOL}-b`, ['xxl']);
    expect(await replicas('spot')).to.equal(1);
    expect(await replicas('large')).to.equal(1);
    expect(await instanceTypeOf(pod?.spec?.nodeName ?? '')).to.equal(XXL.type);
    const spotMachines = await env.machines(`${POOL}-spot`);
    expect(spotMachines.map((m) => m.metadata.labels?.node)).to.include(pod?.spec?.nodeName);
    expect(ca?.log() ?? '').to.contain(`Price expander for ${NS}/${POOL}-spot: all_nodes_price=0.000010`);
    expect(ca?.log() ?? '').to.not.match(/Failed to calculate node price|Expander filtered out all options/);
  });
});
