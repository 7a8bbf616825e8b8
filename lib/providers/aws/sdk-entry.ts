// The part of the AWS SDK the EC2 provider runs: the one list of it. `npm run build` bundles this
// module with what it needs of the SDK, and nothing else, into dist/lib/providers/aws/sdk-bundle/
// (hack/bundle-aws-sdk.mjs), and client.ts loads that bundle on the first EC2 call. The whole
// @aws-sdk/client-ec2 module holds every EC2 command and the schema of every EC2 shape, which
// cost the manager about 30 MiB more than the bundle (`npm run bench sdk-memory`).
//
// To send another EC2 command: export it here, give Ec2Api (client.ts) its method, add its case to
// the bundle's unit test (test/unit/providers/aws/sdk-bundle.test.ts) and rebuild. Nothing else in
// lib/ may take a value from an @aws-sdk package (types are fine: they vanish at compile time);
// eslint refuses it.

export {
  AssignIpv6AddressesCommand,
  DescribeImagesCommand,
  DescribeInstanceStatusCommand,
  DescribeInstancesCommand,
  DescribeSpotPriceHistoryCommand,
  EC2Client,
  ModifyInstanceAttributeCommand,
  ModifyNetworkInterfaceAttributeCommand,
  RunInstancesCommand,
  TerminateInstancesCommand,
} from '@aws-sdk/client-ec2';
export { fromTokenFile } from '@aws-sdk/credential-provider-web-identity';
