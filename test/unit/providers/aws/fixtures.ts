import type { Machine, MachineClass } from '../../../../lib/api/types.js';
import { decodeMachineError } from '../../../../lib/driver/codes.js';
import type { Secret } from '../../../../lib/kube/types.js';

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

/** gardener's sample class in eu-west-1, with `over` merged into its providerSpec. */
export const cls = (over: Record<string, unknown> = {}): MachineClass => ({
  metadata: { name: 'test-mc', namespace: 'default' },
  provider: 'AWS',
  providerSpec: { ...sampleSpec(), region: 'eu-west-1', ...over },
});

/** A class Secret with static keys and user data. */
export const secret: Secret = {
  metadata: { name: 's' },
  data: {
    providerAccessKeyId: b64('AKIDUNIT'),
    providerSecretAccessKey: b64('SECRETUNIT'),
    userData: b64('#!/bin/ud'),
  },
};

/** A machine, with a providerID when it records its instance. */
export const machine = (name: string, providerID?: string): Machine => ({
  metadata: { name, namespace: 'default', uid: `uid-${name}` },
  spec: providerID === undefined ? {} : { providerID },
});

/** `OK`, or the machine error a call failed with as `<code>: <message>`. */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return `${decodeMachineError(err).code}: ${decodeMachineError(err).message}`;
  }
  return 'OK';
}
