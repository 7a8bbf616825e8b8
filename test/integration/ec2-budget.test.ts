// The EC2 calls the manager makes per machine, as a budget CI holds (issue #49): a MachineDeployment
// of gardener's AWS sample class taken 0→N→0 on the EC2 emulator, counted by action at the proxy in
// front of it, must stay within the budgets below. Counts, not times. The floor is 2 (one
// RunInstances, one TerminateInstances); the lookups above it are DescribeInstances (before a
// launch, and a new instance's wait to show in it, both by Name tag and gathered across machines),
// one DescribeImages and one DescribeSpotPriceHistory per run. A change that adds a call per
// machine fails here, and must raise its budget in the same commit, saying why.

import { expect } from 'chai';

import { MachinePhase } from '../../lib/api/constants.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { startMoto, type Moto } from '../harness/moto.js';
import {
  CLUSTER_TAG,
  REGION,
  applySampleClass,
  isLive,
  provisionCloud,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { LifecycleEnv, phaseOf, NS } from './env/lifecycle.js';
import { perMachineBudget } from './env/budget.js';
import { until } from './env/until.js';

const MACHINES = 50;

/**
 * EC2 calls per machine over 0→N→0, by action, from the figures measured on 2026-11-30 plus about
 * 10 % and at least 0.1. At 50 machines, two runs: DescribeInstances 0.06 (3 calls), 2.10 in all
 * (0.08 and 2.12 in the AWS benchmark; at 30, 0.10 and 2.17). Before the lookups waited for company (the build
 * before this budget's last change) DescribeInstances was 0.20 to 0.27 at 30 and 0.81 at 200.
 * The total is the target, 2.2 at 50. An action not listed may use 0.05 per machine (one
 * call per run at 50 is 0.02).
 */
const BUDGET_PER_MACHINE: Readonly<Record<string, number>> = {
  RunInstances: 1.1,
  TerminateInstances: 1.1,
  DescribeInstances: 0.18,
};
const UNLISTED_BUDGET = 0.05;
/** All calls together, per machine. */
const TOTAL_BUDGET_PER_MACHINE = 2.2;

describe('EC2 call budget per machine (the EC2 emulator, real kube-apiserver, the whole manager)', function () {
  this.timeout(300_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  const savedEndpoint = process.env.AWS_ENDPOINT_URL_EC2;

  before(async () => {
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint);
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    env = await LifecycleEnv.start({ kwok: true });
    cloud = await provisionCloud(moto.endpoint);
    // The kubelet simulator reads the emulator directly: its calls are not the manager's.
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
    });
    kubelet.start();
  });

  after(async () => {
    await kubelet.stop();
    await env.stop();
    await proxy.stop();
    await moto.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    if (savedEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
    else process.env.AWS_ENDPOINT_URL_EC2 = savedEndpoint;
  });

  it(`takes a MachineDeployment of the AWS sample class 0→${MACHINES}→0 within the per-machine budget of each EC2 action`, async () => {
    await applySampleClass(env.client, cloud, NS, 'budget');
    await env.createDeployment('budget', 0, 'budget');
    // The default settings: the orphan collection's first scan comes at start, the next minutes later.
    await env.startManager();
    await until('the orphan collection’s first scan', () =>
      Promise.resolve((proxy.calls.get('DescribeInstances') ?? 0) > 0 ? true : undefined),
    );
    const before = new Map(proxy.calls);

    await env.scale('budget', MACHINES);
    await until(
      `${MACHINES} machines Running`,
      async () => {
        const ms = await env.machines('budget');
        return ms.length === MACHINES && ms.every((m) => phaseOf(m) === MachinePhase.Running)
          ? true
          : undefined;
      },
      180_000,
    );
    await env.scale('budget', 0);
    await until(
      'every machine gone and no instance live',
      async () =>
        (await env.machines('budget')).length === 0 &&
        (await taggedInstances(cloud.ec2)).filter(isLive).length === 0
          ? true
          : undefined,
      180_000,
    );

    const { over, total, summary } = perMachineBudget(
      before,
      proxy.calls,
      MACHINES,
      BUDGET_PER_MACHINE,
      UNLISTED_BUDGET,
    );
    console.log(
      `      EC2 calls per machine over 0→${MACHINES}→0: ${summary} (budget ${TOTAL_BUDGET_PER_MACHINE})`,
    );
    expect(over, 'EC2 actions over their budget').to.deep.equal([]);
    expect(total, 'all EC2 calls per machine').to.be.at.most(TOTAL_BUDGET_PER_MACHINE);
  });
});
