import { expect } from 'chai';

import { MachineClassResource, type MachineClass } from '../../lib/api/types.js';
import { ProviderRegistry, type NodePriceAnswer, type Provider } from '../../lib/driver/registry.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Secret } from '../../lib/kube/types.js';
import { Manager } from '../../lib/manager.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { AWS_PROVIDER, AWS_PROVIDER_ID_PREFIX, awsProvider } from '../../lib/providers/aws/index.js';
import { sampleMachineClass, sampleSecret, type Ec2Cloud } from '../harness/ec2cloud.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { LifecycleEnv, NS, testLogger } from './env/lifecycle.js';
import { until } from './env/until.js';

/** gardener's sample ids: the classes are only listed (ListMachines), nothing is launched. */
const SAMPLE_IDS = { ami: 'ami-123456', subnetId: 'subnet-acbd1234', securityGroupId: 'sg-xyz12345' };

describe('AWS prices on the EC2 emulator (real kube-apiserver, moto, the whole manager)', function () {
  this.timeout(60_000);
  let moto: Moto;
  let env: LifecycleEnv;
  let aws: Provider | undefined;
  const savedEndpoint = process.env.AWS_ENDPOINT_URL_EC2;

  before(async () => {
    moto = await startMoto();
    process.env.AWS_ENDPOINT_URL_EC2 = moto.endpoint;
    env = await LifecycleEnv.start();
    // The manager's AWS provider, kept at hand to ask its prices as the autoscaler's server does.
    const providers = new ProviderRegistry().register(
      AWS_PROVIDER,
      (ctx) => {
        aws = awsProvider()(ctx);
        return aws;
      },
      { providerIDPrefix: AWS_PROVIDER_ID_PREFIX },
    );
    env.manager = new Manager(env.config({ machineSafetyOrphanVmsPeriodMs: 2_000 }), {
      logger: testLogger().child({ component: 'manager' }),
      controlKubeConfig: env.cp.kubeConfig,
      registry: newRegistry(),
      providers,
    });
    await env.manager.start();
  });

  after(async () => {
    await env.stop();
    await moto.stop();
    if (savedEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
    else process.env.AWS_ENDPOINT_URL_EC2 = savedEndpoint;
  });

  async function applyClass(
    name: string,
    edit: (spec: Record<string, unknown>) => void,
  ): Promise<MachineClass> {
    const secret: Secret = sampleSecret();
    secret.metadata.name = `${name}-secret`;
    await env.client.create<Secret>(CoreResources.secrets, secret);
    const cls = sampleMachineClass(SAMPLE_IDS as Ec2Cloud, name);
    cls.metadata.namespace = NS;
    cls.secretRef = { namespace: NS, name: `${name}-secret` };
    cls.providerSpec.region = 'us-east-1';
    cls.providerSpec.machineType = 'm5.large';
    edit(cls.providerSpec);
    return env.client.create<MachineClass>(MachineClassResource, cls);
  }

  const priceOf = (machineClass: MachineClass, zone: string): NodePriceAnswer | undefined =>
    aws?.nodePrice?.({ machineClass, labels: { 'topology.kubernetes.io/zone': zone } });

  it("a spot class without machines is priced at moto's spot price (0.00001) once the background refresh ran; an on-demand class at the list price (0.096)", async () => {
    // gardener's sample class is a spot class already (spotPrice: ''); the other one is not.
    const spot = await applyClass('spot-mc', () => undefined);
    const onDemand = await applyClass('od-mc', (spec) => {
      delete spec.spotPrice;
    });

    expect(priceOf(onDemand, 'us-east-1a')).to.deep.equal({
      pricePerHour: 0.096,
      currency: 'USD',
      source: 'aws on-demand list price us-east-1 2026-07-20',
    });
    // The orphan collection's ListMachines shows the spot class's Secret to the provider; the
    // refresh follows in the background. Until then the spot class is priced on demand.
    const answer = await until(
      'the spot class priced from DescribeSpotPriceHistory',
      () => {
        const a = priceOf(spot, 'us-east-1a');
        if (a === undefined || !('pricePerHour' in a)) expect.fail(`no price: ${JSON.stringify(a)}`);
        if (a.pricePerHour === 0.096) {
          expect(a.source).to.match(/, for spot \(/);
          return undefined;
        }
        return a;
      },
      20_000,
    );
    expect(answer).to.deep.include({ pricePerHour: 0.00001, currency: 'USD' });
    expect(answer.source).to.match(
      /^aws spot price us-east-1a \(DescribeSpotPriceHistory \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, since 2006-01-02T15:04:05Z\)$/,
    );
    expect(priceOf(spot, 'us-east-1b')).to.deep.include({ pricePerHour: 0.00001 });
    expect(priceOf(onDemand, 'us-east-1a')).to.deep.include({ pricePerHour: 0.096 });
  });
});
