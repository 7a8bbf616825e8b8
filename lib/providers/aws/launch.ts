// The RunInstances request of a machine: what gardener's provider sends for the same class, plus
// a ClientToken so that EC2 itself refuses to start a second instance for a retried request.

import { createHash } from 'node:crypto';

import type {
  BlockDeviceMapping,
  InstanceNetworkInterfaceSpecification,
  Placement,
  RunInstancesCommandInput,
  Tag,
  TagSpecification,
  _InstanceType,
} from '@aws-sdk/client-ec2';

import { ROOT_DEVICE_NAME, type AwsBlockDevice, type AwsProviderSpec } from './spec.js';

/** The tag that names an instance's machine (gardener's, and the EC2 console's, name tag). */
export const NAME_TAG = 'Name';
/**
 * gardener's node-template annotation with an EC2 Placement as JSON, used when the class sets no
 * `placement` (e.g. `{"availabilityZone":"eu-west-1a","groupName":"pg"}`).
 */
export const AWS_PLACEMENT_ANNOTATION = 'machine.sapcloud.io/awsPlacement';

export interface LaunchRequest {
  spec: AwsProviderSpec;
  machineName: string;
  /** The machine's UID: the ClientToken is derived from it. */
  machineUID: string;
  /** The user data's bytes (sent base64-encoded, as EC2 requires). */
  userData: Buffer;
  /** The AMI's root device name; needed only when the class lists block devices. */
  rootDeviceName?: string | undefined;
  /** The machine's node-template annotation AWS_PLACEMENT_ANNOTATION, if any. */
  placementAnnotation?: string | undefined;
}

/** Whether the request needs the AMI's root device name (a `/root` device, or a single device). */
export function needsRootDeviceName(spec: AwsProviderSpec): boolean {
  return spec.blockDevices.length > 0;
}

/** The class tags without `Name`, then `Name=<machine>`: a machine's name always wins. */
export function instanceTags(spec: AwsProviderSpec, machineName: string): Tag[] {
  const tags: Tag[] = Object.entries(spec.tags)
    .filter(([k]) => k !== NAME_TAG)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([Key, Value]) => ({ Key, Value }));
  tags.push({ Key: NAME_TAG, Value: machineName });
  return tags;
}

function blockDeviceMapping(
  device: AwsBlockDevice,
  single: boolean,
  rootDeviceName: string | undefined,
): BlockDeviceMapping {
  const isRoot = device.deviceName === ROOT_DEVICE_NAME || single;
  let DeviceName = device.deviceName ?? '';
  if (isRoot) {
    if (rootDeviceName === undefined || rootDeviceName === '') {
      throw new Error('the image has no root device name, so the root block device cannot be mapped');
    }
    DeviceName = rootDeviceName;
  }
  if (device.noDevice !== undefined && device.noDevice !== '')
    return { DeviceName, NoDevice: device.noDevice };
  if (device.virtualName !== undefined && device.virtualName !== '') {
    return { DeviceName, VirtualName: device.virtualName };
  }
  const ebs = device.ebs ?? {};
  return {
    DeviceName,
    Ebs: {
      VolumeSize: ebs.volumeSize,
      VolumeType: ebs.volumeType as NonNullable<BlockDeviceMapping['Ebs']>['VolumeType'],
      Encrypted: ebs.encrypted ?? false,
      DeleteOnTermination: ebs.deleteOnTermination ?? true,
      ...(ebs.iops !== undefined && ebs.iops > 0 ? { Iops: ebs.iops } : {}),
      ...(ebs.throughput === undefined ? {} : { Throughput: ebs.throughput }),
      // EC2 refuses a KMS key for a volume that is not encrypted; gardener never sends one.
      ...(ebs.encrypted !== true || ebs.kmsKeyID === undefined || ebs.kmsKeyID === ''
        ? {}
        : { KmsKeyId: ebs.kmsKeyID }),
      ...(ebs.snapshotID === undefined || ebs.snapshotID === '' ? {} : { SnapshotId: ebs.snapshotID }),
    },
  };
}

function networkInterface(
  ni: AwsProviderSpec['networkInterfaces'][number],
  index: number,
): InstanceNetworkInterfaceSpecification {
  const out: InstanceNetworkInterfaceSpecification = {
    DeviceIndex: ni.deviceIndex ?? index,
    SubnetId: ni.subnetID,
    Groups: [...ni.securityGroupIDs],
    DeleteOnTermination: ni.deleteOnTermination ?? true,
  };
  if (ni.associatePublicIPAddress !== undefined) out.AssociatePublicIpAddress = ni.associatePublicIPAddress;
  if (ni.description !== undefined) out.Description = ni.description;
  if (ni.networkCardIndex !== undefined) out.NetworkCardIndex = ni.networkCardIndex;
  if (ni.interfaceType !== undefined) out.InterfaceType = ni.interfaceType;
  if (ni.ipv6AddressCount !== undefined) {
    out.Ipv6AddressCount = ni.ipv6AddressCount;
    out.PrimaryIpv6 = ni.primaryIpv6 ?? true;
  }
  return out;
}

const PLACEMENT_STRINGS = [
  'AvailabilityZone',
  'AvailabilityZoneId',
  'Affinity',
  'GroupName',
  'GroupId',
  'HostId',
  'HostResourceGroupArn',
  'SpreadDomain',
  'Tenancy',
] as const;

/**
 * The EC2 Placement in the awsPlacement annotation (JSON; field names matched without regard to
 * case, as gardener's decoder does, unknown fields ignored), undefined when it is absent, empty or
 * names nothing. Throws, naming the annotation, when it is not a JSON object of the right types.
 */
export function placementOfAnnotation(value: string | undefined): Placement | undefined {
  if (value === undefined || value === '') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new Error(`annotation ${AWS_PLACEMENT_ANNOTATION}: not JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new Error(`annotation ${AWS_PLACEMENT_ANNOTATION}: must be a JSON object`);
  }
  const byLower = new Map(
    Object.entries(parsed as Record<string, unknown>).map(([k, v]) => [k.toLowerCase(), { k, v }]),
  );
  const out: Placement = {};
  for (const field of PLACEMENT_STRINGS) {
    const e = byLower.get(field.toLowerCase());
    if (e === undefined || e.v === null) continue;
    if (typeof e.v !== 'string')
      throw new Error(`annotation ${AWS_PLACEMENT_ANNOTATION}: ${e.k} must be a string`);
    if (e.v !== '') (out as Record<string, string>)[field] = e.v;
  }
  const partition = byLower.get('partitionnumber');
  if (partition !== undefined && partition.v !== null) {
    if (typeof partition.v !== 'number' || !Number.isInteger(partition.v))
      throw new Error(`annotation ${AWS_PLACEMENT_ANNOTATION}: ${partition.k} must be an integer`);
    out.PartitionNumber = partition.v;
  }
  return Object.keys(out).length === 0 ? undefined : out;
}

/** The RunInstances input of a machine, ClientToken included (see clientToken). */
export function runInstancesInput(req: LaunchRequest): RunInstancesCommandInput {
  const { spec } = req;
  const tags = instanceTags(spec, req.machineName);
  const tagSpec = (ResourceType: TagSpecification['ResourceType']): TagSpecification => ({
    ResourceType,
    Tags: tags.map((t) => ({ ...t })),
  });
  const input: RunInstancesCommandInput = {
    ImageId: spec.ami,
    InstanceType: spec.machineType as _InstanceType,
    MinCount: 1,
    MaxCount: 1,
    UserData: req.userData.toString('base64'),
    IamInstanceProfile: (spec.iam.name ?? '') !== '' ? { Name: spec.iam.name } : { Arn: spec.iam.arn },
    NetworkInterfaces: spec.networkInterfaces.map(networkInterface),
    TagSpecifications: [tagSpec('instance'), tagSpec('volume'), tagSpec('network-interface')],
  };
  if (spec.blockDevices.length > 0) {
    const single = spec.blockDevices.length === 1;
    input.BlockDeviceMappings = spec.blockDevices.map((d) =>
      blockDeviceMapping(d, single, req.rootDeviceName),
    );
  }
  if ((spec.keyName ?? '') !== '') input.KeyName = spec.keyName;
  if (spec.ebsOptimized !== undefined) input.EbsOptimized = spec.ebsOptimized;
  if (spec.monitoring !== undefined) input.Monitoring = { Enabled: spec.monitoring };
  const md = spec.instanceMetadataOptions;
  if (md !== undefined) {
    input.MetadataOptions = {
      ...(md.httpEndpoint === undefined ? {} : { HttpEndpoint: md.httpEndpoint as 'enabled' | 'disabled' }),
      ...(md.httpPutResponseHopLimit === undefined
        ? {}
        : { HttpPutResponseHopLimit: md.httpPutResponseHopLimit }),
      ...(md.httpTokens === undefined ? {} : { HttpTokens: md.httpTokens as 'required' | 'optional' }),
      ...(md.httpProtocolIpv6 === undefined
        ? {}
        : { HttpProtocolIpv6: md.httpProtocolIpv6 as 'enabled' | 'disabled' }),
    };
  }
  const cpu = spec.cpuOptions;
  if (cpu !== undefined) {
    input.CpuOptions = {
      ...(cpu.amdSevSnp === undefined ? {} : { AmdSevSnp: cpu.amdSevSnp as 'enabled' | 'disabled' }),
      ...(cpu.coreCount !== undefined && cpu.threadsPerCore !== undefined
        ? { CoreCount: cpu.coreCount, ThreadsPerCore: cpu.threadsPerCore }
        : {}),
    };
  }
  const cr = spec.capacityReservation;
  if (cr !== undefined) {
    input.CapacityReservationSpecification =
      (cr.capacityReservationPreference ?? '') !== ''
        ? { CapacityReservationPreference: cr.capacityReservationPreference as 'open' | 'none' }
        : {
            CapacityReservationTarget: {
              ...(cr.capacityReservationId === undefined
                ? {}
                : { CapacityReservationId: cr.capacityReservationId }),
              ...(cr.capacityReservationResourceGroupArn === undefined
                ? {}
                : { CapacityReservationResourceGroupArn: cr.capacityReservationResourceGroupArn }),
            },
          };
  }
  if (spec.instanceMarketOptions !== undefined) {
    input.InstanceMarketOptions = {
      MarketType: spec.instanceMarketOptions.marketType as 'spot' | 'capacity-block',
    };
  } else if (spec.spotPrice !== undefined) {
    input.InstanceMarketOptions = {
      MarketType: 'spot',
      SpotOptions: {
        SpotInstanceType: 'one-time',
        ...(spec.spotPrice === '' ? {} : { MaxPrice: spec.spotPrice }),
      },
    };
  }
  const pl = spec.placement;
  if (pl === undefined) {
    const fromAnnotation = placementOfAnnotation(req.placementAnnotation);
    if (fromAnnotation !== undefined) input.Placement = fromAnnotation;
  } else {
    input.Placement = {
      ...(pl.groupId === undefined ? {} : { GroupId: pl.groupId }),
      ...(pl.tenancy === undefined ? {} : { Tenancy: pl.tenancy as 'default' | 'dedicated' | 'host' }),
      ...(pl.hostId === undefined ? {} : { HostId: pl.hostId }),
      ...(pl.partitionNumber === undefined ? {} : { PartitionNumber: pl.partitionNumber }),
      ...(pl.affinity === undefined ? {} : { Affinity: pl.affinity }),
    };
  }
  input.ClientToken = clientToken(req.machineUID, input);
  return input;
}

/**
 * EC2's idempotency token (at most 64 ASCII characters): the machine's UID and the request, hashed.
 * A retry of the same request is the same token, so EC2 returns the instance the first attempt
 * started; a request changed in between (the class was edited) gets a new token instead of
 * EC2's IdempotentParameterMismatch.
 */
export function clientToken(machineUID: string, input: RunInstancesCommandInput): string {
  const { ClientToken: _ignored, ...rest } = input;
  return createHash('sha256').update(machineUID).update('\0').update(JSON.stringify(rest)).digest('hex');
}
