import { expect } from 'chai';

import type { MachineErrorCodeName } from '../../../../lib/api/constants.js';
import {
  awsErrorInfo,
  launchFailure,
  machineCodeOf,
  redact,
  toMachineError,
} from '../../../../lib/providers/aws/errors.js';

/** An error shaped as @aws-sdk/client-ec2 throws it for an EC2 error response. */
function ec2Error(code: string, message: string, httpStatusCode = 400): Error {
  return Object.assign(new Error(message), { name: code, $fault: 'client', $metadata: { httpStatusCode } });
}

describe('AWS provider: EC2 errors as machine errors', () => {
  const cases: [string, Error, MachineErrorCodeName][] = [
    [
      'InsufficientInstanceCapacity',
      ec2Error('InsufficientInstanceCapacity', 'no capacity', 500),
      'ResourceExhausted',
    ],
    ['InsufficientCapacity', ec2Error('InsufficientCapacity', 'x', 500), 'ResourceExhausted'],
    ['InsufficientAddressCapacity', ec2Error('InsufficientAddressCapacity', 'x'), 'ResourceExhausted'],
    ['InsufficientVolumeCapacity', ec2Error('InsufficientVolumeCapacity', 'x'), 'ResourceExhausted'],
    ['InstanceLimitExceeded', ec2Error('InstanceLimitExceeded', 'x'), 'ResourceExhausted'],
    ['VcpuLimitExceeded', ec2Error('VcpuLimitExceeded', 'x'), 'ResourceExhausted'],
    ['VolumeLimitExceeded', ec2Error('VolumeLimitExceeded', 'x'), 'ResourceExhausted'],
    ['MaxIOPSLimitExceeded', ec2Error('MaxIOPSLimitExceeded', 'x'), 'ResourceExhausted'],
    ['RouteLimitExceeded', ec2Error('RouteLimitExceeded', 'x'), 'ResourceExhausted'],
    ['Unsupported (type not offered in the zone)', ec2Error('Unsupported', 'x'), 'ResourceExhausted'],
    // Not gardener's mapping (Internal there): see the README's differences.
    ['SpotMaxPriceTooLow', ec2Error('SpotMaxPriceTooLow', 'x'), 'ResourceExhausted'],
    ['MaxSpotInstanceCountExceeded', ec2Error('MaxSpotInstanceCountExceeded', 'x'), 'ResourceExhausted'],
    [
      'InsufficientFreeAddressesInSubnet',
      ec2Error('InsufficientFreeAddressesInSubnet', 'x'),
      'ResourceExhausted',
    ],
    ['UnfulfillableCapacity', ec2Error('UnfulfillableCapacity', 'x'), 'ResourceExhausted'],
    ['RequestLimitExceeded', ec2Error('RequestLimitExceeded', 'slow down', 503), 'Unavailable'],
    ['Throttling', ec2Error('Throttling', 'x'), 'Unavailable'],
    [
      'an unknown AMI',
      ec2Error('InvalidAMIID.NotFound', "The image id '[ami-1]' does not exist"),
      'InvalidArgument',
    ],
    ['an unknown subnet', ec2Error('InvalidSubnetID.NotFound', 'x'), 'InvalidArgument'],
    ['an unknown security group', ec2Error('InvalidGroup.NotFound', 'x'), 'InvalidArgument'],
    ['an unknown key pair', ec2Error('InvalidKeyPair.NotFound', 'x'), 'InvalidArgument'],
    [
      'an unknown instance profile',
      ec2Error('InvalidParameterValue', 'Invalid IAM Instance Profile name'),
      'InvalidArgument',
    ],
    ['an unknown instance', ec2Error('InvalidInstanceID.NotFound', 'x'), 'NotFound'],
    ['refused credentials', ec2Error('AuthFailure', 'x', 401), 'PermissionDenied'],
    ['a missing permission', ec2Error('UnauthorizedOperation', 'x', 403), 'PermissionDenied'],
    ['an EC2 server error', ec2Error('InternalError', 'x', 500), 'Unavailable'],
    [
      'a refused connection',
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
      'Unavailable',
    ],
    ['a timeout', Object.assign(new Error('timed out'), { name: 'TimeoutError' }), 'Unavailable'],
    ['an aborted call', Object.assign(new Error('aborted'), { name: 'AbortError' }), 'Canceled'],
    ['anything else', ec2Error('DryRunOperation', 'x'), 'Internal'],
  ];
  for (const [what, err, code] of cases) {
    it(`${what} → ${code}`, () => {
      expect(machineCodeOf(awsErrorInfo(err))).to.equal(code);
      expect(toMachineError(err, 'RunInstances').code).to.equal(code);
    });
  }

  it("keeps EC2's code and message in the machine error, under the operation", () => {
    const e = toMachineError(
      ec2Error('InvalidAMIID.NotFound', "The image id '[ami-1]' does not exist"),
      'DescribeImages',
    );
    expect(e.detail).to.equal(
      "AWS DescribeImages failed: InvalidAMIID.NotFound: The image id '[ami-1]' does not exist",
    );
  });

  it('never carries a secret value, and drops the echoed request of a signature error', () => {
    const e = toMachineError(
      ec2Error('InvalidParameterValue', 'bad value AKIDSECRETISH near MYSECRET'),
      'RunInstances',
      ['AKIDSECRETISH', 'MYSECRET'],
    );
    expect(e.detail).not.to.include('AKIDSECRETISH');
    expect(e.detail).not.to.include('MYSECRET');
    const sig = toMachineError(
      ec2Error(
        'SignatureDoesNotMatch',
        'The canonical string for this request should have been AKIDX/20260101/...',
        403,
      ),
      'DescribeInstances',
    );
    expect(sig.detail).not.to.include('AKIDX');
    expect(sig.code).to.equal('PermissionDenied');
    expect(redact('a-b-a', ['a'])).to.equal('<redacted>-b-<redacted>');
  });

  const launches: [string, unknown, 'retry' | 'unknown' | 'fail'][] = [
    ['throttled: EC2 started nothing', ec2Error('RequestLimitExceeded', 'x', 503), 'retry'],
    ['an EC2 server error: the instance may exist', ec2Error('InternalError', 'x', 500), 'unknown'],
    [
      'a proxy in front of EC2 answering 502: the instance may exist',
      ec2Error('Unknown', 'x', 502),
      'unknown',
    ],
    [
      'no capacity (the controller retries it later)',
      ec2Error('InsufficientInstanceCapacity', 'x', 500),
      'fail',
    ],
    ['a bad request', ec2Error('InvalidSubnetID.NotFound', 'x', 400), 'fail'],
    [
      'a reset connection: the instance may exist',
      Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
      'unknown',
    ],
    [
      'a timeout: the instance may exist',
      Object.assign(new Error('timed out'), { name: 'TimeoutError' }),
      'unknown',
    ],
    ['a cancelled call', Object.assign(new Error('aborted'), { name: 'AbortError' }), 'fail'],
  ];
  for (const [what, err, want] of launches) {
    it(`a failed RunInstances, ${what}: ${want}`, () => {
      expect(launchFailure(err)).to.equal(want);
    });
  }
});
