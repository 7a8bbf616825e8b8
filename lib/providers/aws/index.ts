import type { Driver } from '../../driver/driver.js';
import type { ProviderFactory } from '../../driver/registry.js';
import { AwsDriver } from './driver.js';
import { sdkEc2Api, type Ec2ApiFactory } from './client.js';
import { AwsPricing, type AwsPricingOptions } from './prices/pricing.js';

export { AWS_PROVIDER, AWS_PROVIDER_ID_PREFIX } from './driver.js';

/**
 * The driver, telling pricing of the class and Secret of the calls that carry them on a class's
 * regular path: CreateMachine, GetMachineStatus, and ListMachines (the orphan collection lists
 * every class, machines or not, at start and every period).
 */
function observedDriver(driver: AwsDriver, pricing: AwsPricing): Driver {
  return {
    createMachine: (req, signal) => {
      pricing.observeRequest(req.machineClass, req.secret);
      return driver.createMachine(req, signal);
    },
    initializeMachine: (req, signal) => driver.initializeMachine(req, signal),
    deleteMachine: (req, signal) => driver.deleteMachine(req, signal),
    getMachineStatus: (req, signal) => {
      pricing.observeRequest(req.machineClass, req.secret);
      return driver.getMachineStatus(req, signal);
    },
    listMachines: (req, signal) => {
      pricing.observeRequest(req.machineClass, req.secret);
      return driver.listMachines(req, signal);
    },
    getVolumeIDs: (req) => driver.getVolumeIDs(req),
  };
}

/**
 * The AWS EC2 provider (`MachineClass.provider: AWS`, gardener's value): gardener's AWS
 * providerSpec and Secret keys, on @aws-sdk/client-ec2. The endpoint comes from the SDK's
 * standard AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL variables. Node prices for the autoscaler's
 * price expander: on-demand list prices, and spot prices refreshed in the background (prices/).
 */
export function awsProvider(
  opts: { ec2?: Ec2ApiFactory; spot?: AwsPricingOptions['spot'] } = {},
): ProviderFactory {
  return (ctx) => {
    const logger = ctx.logger.child({ provider: 'AWS' });
    const ec2 = opts.ec2 ?? sdkEc2Api;
    const pricing = new AwsPricing({
      ec2,
      clock: ctx.clock,
      logger: logger.child({ component: 'prices' }),
      registry: ctx.registry,
      ...(opts.spot === undefined ? {} : { spot: opts.spot }),
    });
    const driver = new AwsDriver({
      logger,
      fence: ctx.fence,
      ec2,
      onInstance: (i) => {
        pricing.observeInstance(i);
      },
    });
    return {
      driver: observedDriver(driver, pricing),
      nodePrice: (req) => pricing.nodePrice(req),
      start: () => {
        pricing.start();
      },
      stop: async () => {
        await pricing.stop();
        driver.close();
      },
    };
  };
}
