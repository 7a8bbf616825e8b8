import type { ProviderFactory } from '../../driver/registry.js';
import { AwsDriver } from './driver.js';
import type { Ec2ApiFactory } from './client.js';

export { AWS_PROVIDER, AWS_PROVIDER_ID_PREFIX } from './driver.js';

/**
 * The AWS EC2 provider (`MachineClass.provider: AWS`, gardener's value): gardener's AWS
 * providerSpec and Secret keys, on @aws-sdk/client-ec2. The endpoint comes from the SDK's
 * standard AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL variables.
 */
export function awsProvider(opts: { ec2?: Ec2ApiFactory } = {}): ProviderFactory {
  return (ctx) => {
    const driver = new AwsDriver({
      logger: ctx.logger.child({ provider: 'AWS' }),
      fence: ctx.fence,
      ...(opts.ec2 === undefined ? {} : { ec2: opts.ec2 }),
    });
    return {
      driver,
      stop: () => {
        driver.close();
        return Promise.resolve();
      },
    };
  };
}
