// The stock cluster-autoscaler (the newest pinned version) with two AWS node groups on the EC2
// emulator: one instance type has no capacity (InsufficientInstanceCapacity, answered by the fault
// proxy), so its machine fails with ResourceExhausted, the autoscaler backs that group off as
// OutOfResources and scales the other one; the failed group goes back to zero.

import { expect } from 'chai';

import {
  MachineClassResource,
  MachineDeploymentResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { backOffOf, requireAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import {
  REGION,
  ZONE,
  isLive,
  sampleMachineClass,
  tagOf,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { newestAutoscalerVersion } from '../harness/tools.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import type { LifecycleEnv } from '../integration/env/lifecycle.js';
import { NS } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { startAwsE2eEnv, type AwsE2eEnv } from './awsenv.js';

const POOL = 'aws-e2e';
/** Fits the pods best (least waste), but EC2 has none. */
const SCARCE = { type: 'm5.large', capacity: { cpu: '2', memory: '8Gi', pods: '20' } };
const SPARE = { type: 'm5.xlarge', capacity: { cpu: '4', memory: '16Gi', pods: '20' } };

describe('cluster-autoscaler with two AWS node groups on the EC2 emulator (real autoscaler, kube-scheduler, kwok, moto)', function () {
  this.timeout(600_000);
  const version = newestAutoscalerVersion();
  let aws: AwsE2eEnv;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let ca: Autoscaler | undefined;

  const pods = async (): Promise<Pod[]> =>
    (await env.client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${POOL}-pods` }))
      .items;
  const mcd = (name: string): Promise<MachineDeployment> =>
    env.client.get<MachineDeployment>(MachineDeploymentResource, name, NS);

  before(async () => {
    requireAutoscaler(version);
    aws = await startAwsE2eEnv({
      capacityByType: { [SCARCE.type]: SCARCE.capacity, [SPARE.type]: SPARE.capacity },
      withProxy: (proxy) => {
        proxy.rule({
          action: 'RunInstances',
          match: (params) => params.get('InstanceType') === SCARCE.type,
          error: {
            status: 500,
            code: 'InsufficientInstanceCapacity',
            message: `We currently do not have sufficient ${SCARCE.type} capacity in the Availability Zone you requested (${ZONE}).`,
          },
        });
      },
    });
    ({ env, cloud } = aws);
    for (const [name, shape] of [
      ['scarce', SCARCE],
      ['spare', SPARE],
    ] as const) {
      const cls = sampleMachineClass(cloud, `${POOL}-${name}`);
      cls.providerSpec.machineType = shape.type;
      cls.nodeTemplate = { capacity: shape.capacity, instanceType: shape.type, region: REGION, zone: ZONE };
      await env.client.create<MachineClass>(MachineClassResource, cls);
      await env.createDeployment(
        `${POOL}-${name}`,
        0,
        `${POOL}-${name}`,
        {},
        {
          nodeTemplate: { metadata: { labels: { pool: POOL } } },
        },
      );
      await env.client.patch(
        MachineDeploymentResource,
        `${POOL}-${name}`,
        { metadata: { annotations: { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '6' } } },
        { type: 'merge', namespace: NS },
      );
    }
    ca = await aws.startAutoscaler(version);
  });

  after(async () => {
    await aws.stop();
  });

  it(`cluster-autoscaler ${version}: InsufficientInstanceCapacity backs the m5.large group off, the m5.xlarge group takes the pods`, async () => {
    await env.client.create(
      AppsDeployments,
      nodeFillingDeployment({
        name: `${POOL}-pods`,
        namespace: NS,
        pool: POOL,
        replicas: 3,
        memory: '256Mi',
      }),
    );
    let scarceTried = false;
    let exhausted: Machine | undefined;
    const scheduled = await until(
      '3 pods running on new nodes',
      async () => {
        if (((await mcd(`${POOL}-scarce`)).spec?.replicas ?? 0) > 0) scarceTried = true;
        exhausted ??= (await env.machines(`${POOL}-scarce`)).find(
          (m) => m.status?.lastOperation?.errorCode === 'ResourceExhausted',
        );
        const ps = await pods();
        return ps.length === 3 &&
          ps.every((p) => p.spec?.nodeName !== undefined && p.status?.phase === 'Running')
          ? ps
          : undefined;
      },
      420_000,
    ).catch((err: unknown) => {
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n--- cluster-autoscaler log (tail)\n${ca?.log().split('\n').slice(-40).join('\n') ?? ''}`,
      );
    });
    expect(scarceTried, 'the best-fitting group was tried first').to.equal(true);
    // Backed off for its machine's ResourceExhausted, not after max-node-provision-time.
    const backOff = backOffOf(ca?.log() ?? '', `${NS}/${POOL}-scarce`);
    expect(backOff.outOfResource, 'the autoscaler backed the scarce group off as OutOfResource').to.equal(
      true,
    );
    expect(backOff.timedOut, "the scarce group's scale-up did not time out").to.equal(false);
    expect(exhausted?.status?.lastOperation?.description, 'its machine said why').to.include(
      'InsufficientInstanceCapacity',
    );
    const spareMachines = await env.machines(`${POOL}-spare`);
    const spareNodes = new Set(spareMachines.map((m) => m.metadata.labels?.node ?? ''));
    for (const p of scheduled)
      expect(spareNodes.has(p.spec?.nodeName ?? ''), 'pod on an m5.xlarge node').to.equal(true);
    const nodes = (await env.client.list<Node>(CoreResources.nodes)).items.filter((n) =>
      spareNodes.has(n.metadata.name ?? ''),
    );
    const live = (await taggedInstances(cloud.ec2)).filter(isLive);
    // What the cloud and the group held at this moment, for the messages below.
    const seen =
      `spare machines: ${spareMachines.map((m) => `${m.metadata.name ?? ''} ${m.status?.currentStatus?.phase ?? '-'} (${m.status?.lastOperation?.description ?? ''})`).join('; ')}; ` +
      `live instances: ${live.map((i) => `${i.InstanceId ?? ''} ${i.InstanceType ?? ''} ${i.State?.Name ?? ''} Name=${tagOf(i, 'Name') ?? ''}`).join('; ')}`;
    // The autoscaler's own account of its scale-ups and of the scarce group's failure.
    const decisions = (ca?.log() ?? '')
      .split('\n')
      .filter((l) =>
        /scale-up|scale up|backoff|backed off|OutOfResource|Failed adding|DeleteNodes|Failed to|error|unregistered|unready|not started|Removing|timed out/i.test(
          l,
        ),
      )
      .slice(-40)
      .join('\n');
    // 1.5 of 4 CPUs per pod: two pods fit an m5.xlarge node, so 3 pods need 2 nodes.
    expect(
      nodes.map((n) => n.metadata.labels?.['node.kubernetes.io/instance-type']),
      `two m5.xlarge nodes for 3 pods (${seen})\n--- cluster-autoscaler's decisions\n${decisions}`,
    ).to.deep.equal([SPARE.type, SPARE.type]);
    expect(
      live.every((i) => i.InstanceType === SPARE.type),
      `no m5.large instance exists (${seen})`,
    ).to.equal(true);
    // Every instance is a spare machine's and no machine has two. A machine the autoscaler asked
    // for late may still be on its way to an instance, so the counts need not be equal here.
    // Machines read after the instances: a machine exists before its instance and after it ends.
    const spareNames = new Set((await env.machines(`${POOL}-spare`)).map((m) => m.metadata.name ?? ''));
    const names = live.map((i) => tagOf(i, 'Name') ?? '');
    expect(
      names.filter((n) => !spareNames.has(n)),
      `instances without a spare machine (${seen})`,
    ).to.deep.equal([]);
    expect(new Set(names).size, `one instance per machine (${seen})`).to.equal(names.length);
    await until(
      'an instance for every spare machine',
      async () =>
        (await taggedInstances(cloud.ec2)).filter(isLive).length ===
        (await env.machines(`${POOL}-spare`)).length,
      120_000,
    );
    await until(
      'the scarce group back at 0 with no machine',
      async () =>
        (await mcd(`${POOL}-scarce`)).spec?.replicas === 0 &&
        (await env.machines(`${POOL}-scarce`)).length === 0,
      180_000,
    );
  });
});
