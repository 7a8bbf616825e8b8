import { expect } from 'chai';

import { clientToken, instanceTags, runInstancesInput } from '../../../../lib/providers/aws/launch.js';
import { parseAwsProviderSpec, type AwsProviderSpec } from '../../../../lib/providers/aws/spec.js';
import { sampleSpec } from './fixtures.js';

function spec(over: Record<string, unknown> = {}): AwsProviderSpec {
  const r = parseAwsProviderSpec({ ...sampleSpec(), ...over });
  if (!r.ok) throw new Error(r.problems.join('; '));
  return r.spec;
}

const launch = (s: AwsProviderSpec, uid = 'uid-1') =>
  runInstancesInput({
    spec: s,
    machineName: 'pool-a-1',
    machineUID: uid,
    userData: Buffer.from('#!/bin/sh\necho ok\n'),
    rootDeviceName: '/dev/xvda',
  });

describe('AWS provider: the RunInstances request of a machine', () => {
  it("launches gardener's sample class as gardener does", () => {
    const input = launch(spec());
    expect(input.ImageId).to.equal('ami-123456');
    expect(input.InstanceType).to.equal('t2.large');
    expect([input.MinCount, input.MaxCount]).to.deep.equal([1, 1]);
    expect(input.KeyName).to.equal('key-value-pair-name');
    expect(input.IamInstanceProfile).to.deep.equal({ Name: 'iam-name' });
    expect(Buffer.from(input.UserData ?? '', 'base64').toString('utf8')).to.equal('#!/bin/sh\necho ok\n');
    expect(input.NetworkInterfaces).to.deep.equal([
      { DeviceIndex: 0, SubnetId: 'subnet-acbd1234', Groups: ['sg-xyz12345'], DeleteOnTermination: true },
    ]);
    expect(input.BlockDeviceMappings).to.deep.equal([
      {
        DeviceName: '/dev/xvda',
        Ebs: { VolumeSize: 50, VolumeType: 'gp2', Encrypted: false, DeleteOnTermination: true },
      },
      {
        DeviceName: '/dev/sdb',
        Ebs: { VolumeSize: 50, VolumeType: 'gp2', Encrypted: true, DeleteOnTermination: true },
      },
    ]);
    expect(input.MetadataOptions).to.deep.equal({
      HttpEndpoint: 'enabled',
      HttpPutResponseHopLimit: 1,
      HttpTokens: 'optional',
      HttpProtocolIpv6: 'disabled',
    });
    // spotPrice "" is a spot request at the on-demand price (gardener's deprecated field).
    expect(input.InstanceMarketOptions).to.deep.equal({
      MarketType: 'spot',
      SpotOptions: { SpotInstanceType: 'one-time' },
    });
  });

  it('tags the instance, its volumes and its network interfaces with the class tags and Name=<machine>', () => {
    const input = launch(spec());
    const want = [
      { Key: 'kubernetes.io/cluster/YOUR_CLUSTER_NAME', Value: '1' },
      { Key: 'kubernetes.io/role/YOUR_ROLE_NAME', Value: '1' },
      { Key: 'tag1', Value: 'tag1-value' },
      { Key: 'tag2', Value: 'tag2-value' },
      { Key: 'Name', Value: 'pool-a-1' },
    ];
    expect(input.TagSpecifications?.map((t) => t.ResourceType)).to.deep.equal([
      'instance',
      'volume',
      'network-interface',
    ]);
    for (const t of input.TagSpecifications ?? []) expect(t.Tags).to.deep.equal(want);
    expect(instanceTags(spec(), 'm').filter((t) => t.Key === 'Name')).to.deep.equal([
      { Key: 'Name', Value: 'm' },
    ]);
  });

  it('maps a single block device to the root device, and sends none when the class lists none', () => {
    const single = launch(
      spec({ blockDevices: [{ ebs: { volumeSize: 20, volumeType: 'gp3', iops: 3000, throughput: 125 } }] }),
    );
    expect(single.BlockDeviceMappings).to.deep.equal([
      {
        DeviceName: '/dev/xvda',
        Ebs: {
          VolumeSize: 20,
          VolumeType: 'gp3',
          Encrypted: false,
          DeleteOnTermination: true,
          Iops: 3000,
          Throughput: 125,
        },
      },
    ]);
    expect(launch(spec({ blockDevices: [] })).BlockDeviceMappings).to.be.undefined;
  });

  it('keeps a volume after termination only when the class says so, and passes kms key (encrypted volumes only) and snapshot', () => {
    const input = launch(
      spec({
        blockDevices: [
          { deviceName: '/root', ebs: { volumeSize: 20, volumeType: 'gp2' } },
          {
            deviceName: '/dev/sdc',
            ebs: {
              volumeSize: 5,
              volumeType: 'gp2',
              deleteOnTermination: false,
              encrypted: true,
              kmsKeyID: 'k-1',
              snapshotID: 'snap-1',
            },
          },
          {
            deviceName: '/dev/sdd',
            ebs: { volumeSize: 5, volumeType: 'gp2', encrypted: false, kmsKeyID: 'k-2' },
          },
        ],
      }),
    );
    expect(input.BlockDeviceMappings?.[1]?.Ebs).to.deep.equal({
      VolumeSize: 5,
      VolumeType: 'gp2',
      Encrypted: true,
      DeleteOnTermination: false,
      KmsKeyId: 'k-1',
      SnapshotId: 'snap-1',
    });
    // EC2 refuses a KMS key for a volume that is not encrypted: it is not sent (gardener sends none).
    expect(input.BlockDeviceMappings?.[2]?.Ebs).to.deep.equal({
      VolumeSize: 5,
      VolumeType: 'gp2',
      Encrypted: false,
      DeleteOnTermination: true,
    });
  });

  it('passes the optional sections: instance profile ARN, placement, CPU, market type, capacity reservation', () => {
    const input = launch(
      spec({
        iam: { arn: 'arn:aws:iam::1:instance-profile/p' },
        spotPrice: undefined,
        placement: { groupId: 'pg-1', tenancy: 'dedicated' },
        cpuOptions: { coreCount: 4, threadsPerCore: 1 },
        instanceMarketOptions: { marketType: 'capacity-block' },
        capacityReservation: { capacityReservationPreference: 'open' },
        monitoring: true,
        ebsOptimized: true,
        keyName: '',
        networkInterfaces: [
          { subnetID: 's-1', securityGroupIDs: ['g-1'], associatePublicIPAddress: true, ipv6AddressCount: 1 },
          { subnetID: 's-2', securityGroupIDs: ['g-2'], deviceIndex: 3, deleteOnTermination: false },
        ],
      }),
    );
    expect(input.IamInstanceProfile).to.deep.equal({ Arn: 'arn:aws:iam::1:instance-profile/p' });
    expect(input.Placement).to.deep.equal({ GroupId: 'pg-1', Tenancy: 'dedicated' });
    expect(input.CpuOptions).to.deep.equal({ CoreCount: 4, ThreadsPerCore: 1 });
    expect(input.InstanceMarketOptions).to.deep.equal({ MarketType: 'capacity-block' });
    expect(input.CapacityReservationSpecification).to.deep.equal({ CapacityReservationPreference: 'open' });
    expect(input.Monitoring).to.deep.equal({ Enabled: true });
    expect(input.EbsOptimized).to.be.true;
    expect(input.KeyName).to.be.undefined;
    expect(input.NetworkInterfaces).to.deep.equal([
      {
        DeviceIndex: 0,
        SubnetId: 's-1',
        Groups: ['g-1'],
        DeleteOnTermination: true,
        AssociatePublicIpAddress: true,
        Ipv6AddressCount: 1,
        PrimaryIpv6: true,
      },
      { DeviceIndex: 3, SubnetId: 's-2', Groups: ['g-2'], DeleteOnTermination: false },
    ]);
  });

  it('derives the ClientToken from the machine UID and the request: stable on retry, new when either changes', () => {
    const a = launch(spec());
    expect(a.ClientToken).to.match(/^[0-9a-f]{64}$/);
    expect(launch(spec()).ClientToken).to.equal(a.ClientToken);
    expect(launch(spec(), 'uid-2').ClientToken).not.to.equal(a.ClientToken);
    expect(launch(spec({ machineType: 'm5.large' })).ClientToken).not.to.equal(a.ClientToken);
    expect(clientToken('uid-1', { ...a, ClientToken: 'ignored' })).to.equal(a.ClientToken);
  });

  it('refuses to map a root device when the AMI names none', () => {
    expect(() =>
      runInstancesInput({
        spec: spec(),
        machineName: 'm',
        machineUID: 'u',
        userData: Buffer.from('x'),
        rootDeviceName: undefined,
      }),
    ).to.throw(/root device/);
  });
});
