// The AWS side of the AWS provider's tests and of dev mode on the emulator: the network, key pair
// and instance profile gardener's sample MachineClass names, created in the EC2 emulator, and the
// sample objects with those ids put in.

import { readFileSync } from 'node:fs';
import path from 'node:path';

import {
  CreateKeyPairCommand,
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  DescribeImagesCommand,
  DescribeInstancesCommand,
  TerminateInstancesCommand,
  EC2Client,
  type Instance,
} from '@aws-sdk/client-ec2';
import { CreateInstanceProfileCommand, IAMClient } from '@aws-sdk/client-iam';
import yaml from 'js-yaml';

import { MachineClassResource, type MachineClass } from '../../lib/api/types.js';
import type { KubeApi } from '../../lib/kube/client.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Secret } from '../../lib/kube/types.js';
import { repoRoot } from './tools.js';

export const REGION = 'eu-west-1';
export const ZONE = 'eu-west-1a';
/** The tag keys of gardener's sample class. */
export const CLUSTER_TAG = 'kubernetes.io/cluster/YOUR_CLUSTER_NAME';
export const ROLE_TAG = 'kubernetes.io/role/YOUR_ROLE_NAME';

export interface Ec2Cloud {
  ec2: EC2Client;
  iam: IAMClient;
  vpcId: string;
  subnetId: string;
  securityGroupId: string;
  /** An AMI of the emulator's catalogue, with its root device name. */
  ami: string;
  rootDeviceName: string;
}

const credentials = { accessKeyId: 'test-admin', secretAccessKey: 'test-admin' };

/** Creates what the sample class refers to: VPC, subnet, security group, key pair, instance profile. */
export async function provisionCloud(endpoint: string): Promise<Ec2Cloud> {
  const ec2 = new EC2Client({ region: REGION, endpoint, credentials });
  const iam = new IAMClient({ region: REGION, endpoint, credentials });
  const vpc = await ec2.send(new CreateVpcCommand({ CidrBlock: '10.250.0.0/16' }));
  const vpcId = vpc.Vpc?.VpcId ?? '';
  const subnet = await ec2.send(
    new CreateSubnetCommand({ VpcId: vpcId, CidrBlock: '10.250.0.0/19', AvailabilityZone: ZONE }),
  );
  const sg = await ec2.send(
    new CreateSecurityGroupCommand({ VpcId: vpcId, GroupName: 'nodes', Description: 'cluster nodes' }),
  );
  await ec2.send(new CreateKeyPairCommand({ KeyName: 'key-value-pair-name' }));
  await iam.send(new CreateInstanceProfileCommand({ InstanceProfileName: 'iam-name' }));
  const images = await ec2.send(
    new DescribeImagesCommand({ Filters: [{ Name: 'root-device-type', Values: ['ebs'] }] }),
  );
  const image = (images.Images ?? []).find((i) => (i.RootDeviceName ?? '') !== '' && i.ImageId !== undefined);
  if (image === undefined) throw new Error('the EC2 emulator has no AMI with a root device');
  return {
    ec2,
    iam,
    vpcId,
    subnetId: subnet.Subnet?.SubnetId ?? '',
    securityGroupId: sg.GroupId ?? '',
    ami: image.ImageId ?? '',
    rootDeviceName: image.RootDeviceName ?? '',
  };
}

/** Another subnet of the cloud's VPC, in `zone` (a /19 of 10.250.0.0/16 per `index`, 1 to 7). */
export async function addSubnet(cloud: Ec2Cloud, zone: string, index: number): Promise<string> {
  const subnet = await cloud.ec2.send(
    new CreateSubnetCommand({
      VpcId: cloud.vpcId,
      CidrBlock: `10.250.${index * 32}.0/19`,
      AvailabilityZone: zone,
    }),
  );
  return subnet.Subnet?.SubnetId ?? '';
}

function fixture<T>(name: string): T {
  return yaml.load(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'gardener-aws', name), 'utf8')) as T;
}

/** gardener's sample MachineClass with the emulator's ids and region. */
export function sampleMachineClass(cloud: Ec2Cloud, name = 'test-mc'): MachineClass {
  const cls = fixture<MachineClass>('machine-class.yaml');
  cls.metadata.name = name;
  const spec = cls.providerSpec;
  spec.ami = cloud.ami;
  spec.region = REGION;
  spec.networkInterfaces = [{ subnetID: cloud.subnetId, securityGroupIDs: [cloud.securityGroupId] }];
  return cls;
}

/** gardener's sample Secret. */
export function sampleSecret(): Secret {
  return fixture<Secret>('secret.yaml');
}

/**
 * Terminates an instance as something outside the manager would (the cloud, a user). EC2 answers a
 * termination of an instance that is terminated already as a success; the emulator refuses it with
 * InvalidNetworkInterfaceID.NotFound (its first termination deleted the instance's interface). That
 * answer is taken as done only when the instance is indeed shutting down or terminated.
 */
export async function terminateInstance(ec2: EC2Client, id: string): Promise<void> {
  try {
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
  } catch (err) {
    if ((err as { name?: string }).name !== 'InvalidNetworkInterfaceID.NotFound') throw err;
    const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    const state = page.Reservations?.[0]?.Instances?.[0]?.State?.Name;
    if (state !== 'terminated' && state !== 'shutting-down') throw err;
  }
}

/** Every instance carrying a tag key, whatever its state. */
export async function taggedInstances(ec2: EC2Client, tagKey = CLUSTER_TAG): Promise<Instance[]> {
  const out: Instance[] = [];
  let NextToken: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: 'tag-key', Values: [tagKey] }],
        ...(NextToken === undefined ? {} : { NextToken }),
      }),
    );
    for (const r of page.Reservations ?? []) out.push(...(r.Instances ?? []));
    NextToken = page.NextToken === '' ? undefined : page.NextToken;
  } while (NextToken !== undefined);
  return out;
}

export const isLive = (i: Instance): boolean => ['pending', 'running'].includes(i.State?.Name ?? '');
export const tagOf = (i: Instance, key: string): string | undefined =>
  i.Tags?.find((t) => t.Key === key)?.Value;

/** The instance id of a providerID, the driver's (`aws:///<region>/<id>`) or a kubelet's (`aws:///<zone>/<id>`). */
export const instanceIdOf = (providerID: string): string => providerID.slice(providerID.lastIndexOf('/') + 1);

/**
 * gardener's sample class (edited as asked) named `name`, with a sample Secret `<name>-secret` of
 * its own, created in namespace.
 */
export async function applySampleClass(
  client: KubeApi,
  cloud: Ec2Cloud,
  namespace: string,
  name: string,
  edit: (c: MachineClass) => void = () => undefined,
  editSecret: (s: Secret) => void = () => undefined,
): Promise<void> {
  const secret = sampleSecret();
  secret.metadata.name = `${name}-secret`;
  secret.metadata.namespace = namespace;
  editSecret(secret);
  await client.create<Secret>(CoreResources.secrets, secret);
  const cls = sampleMachineClass(cloud, name);
  cls.metadata.namespace = namespace;
  cls.secretRef = { namespace, name: `${name}-secret` };
  edit(cls);
  await client.create<MachineClass>(MachineClassResource, cls);
}
