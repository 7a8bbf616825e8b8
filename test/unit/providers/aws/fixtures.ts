/** gardener's sample AWS providerSpec (kubernetes/machine-class.yaml), as a MachineClass holds it. */
export function sampleSpec(): Record<string, unknown> {
  return {
    ami: 'ami-123456',
    blockDevices: [
      {
        deviceName: '/root',
        ebs: { volumeSize: 50, volumeType: 'gp2', encrypted: false, deleteOnTermination: true },
      },
      {
        deviceName: '/dev/sdb',
        ebs: { volumeSize: 50, volumeType: 'gp2', encrypted: true, deleteOnTermination: true },
      },
    ],
    iam: { name: 'iam-name' },
    keyName: 'key-value-pair-name',
    machineType: 't2.large',
    networkInterfaces: [{ subnetID: 'subnet-acbd1234', securityGroupIDs: ['sg-xyz12345'] }],
    region: 'eu-east-1',
    spotPrice: '',
    tags: {
      Name: 'sample-machine-name',
      'kubernetes.io/cluster/YOUR_CLUSTER_NAME': '1',
      'kubernetes.io/role/YOUR_ROLE_NAME': '1',
      tag1: 'tag1-value',
      tag2: 'tag2-value',
    },
    instanceMetadataOptions: {
      httpEndpoint: 'enabled',
      httpPutResponseHopLimit: 1,
      httpTokens: 'optional',
      httpProtocolIpv6: 'disabled',
    },
  };
}

export const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
