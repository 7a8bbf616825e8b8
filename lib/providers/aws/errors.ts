// EC2 API errors → machine error codes. The code decides how the controller retries: capacity
// errors are ResourceExhausted (the autoscaler backs the group off as OutOfResources), throttling
// and transport trouble are transient (retried soon; the SDK has already backed off), and a
// reference to something that does not exist is a configuration problem, retried slowly.

import type { MachineErrorCodeName } from '../../api/constants.js';
import { MachineError } from '../../driver/codes.js';
import { FencedError } from '../../kube/errors.js';

/** EC2 cannot place the instance now; another group or later may succeed (gardener's list and four more). */
export const CAPACITY_ERROR_CODES: ReadonlySet<string> = new Set([
  'InsufficientCapacity',
  'InsufficientAddressCapacity',
  'InsufficientInstanceCapacity',
  'InsufficientVolumeCapacity',
  'InstanceLimitExceeded',
  'VcpuLimitExceeded',
  'VolumeLimitExceeded',
  'MaxIOPSLimitExceeded',
  'RouteLimitExceeded',
  'Unsupported',
  // Not gardener's (it answers these Internal, which the autoscaler does not back off on as
  // capacity): Spot capacity or the subnet's addresses ran out, or the Spot price rose above the
  // class's maximum. Each says this offering cannot be filled now and another may be.
  'SpotMaxPriceTooLow',
  'MaxSpotInstanceCountExceeded',
  'InsufficientFreeAddressesInSubnet',
  'UnfulfillableCapacity',
]);

export const THROTTLING_ERROR_CODES: ReadonlySet<string> = new Set([
  'RequestLimitExceeded',
  'Throttling',
  'ThrottlingException',
  'RequestThrottled',
  'RequestThrottledException',
  'TooManyRequestsException',
  'EC2ThrottledException',
  'SlowDown',
]);

/** A name in the class or the account that EC2 does not know (or cannot use as given). */
const CONFIGURATION_ERROR_CODES: ReadonlySet<string> = new Set([
  'InvalidAMIID.NotFound',
  'InvalidAMIID.Malformed',
  'InvalidAMIID.Unavailable',
  'InvalidSubnetID.NotFound',
  'InvalidSubnetID.Malformed',
  'InvalidSubnet',
  'InvalidGroup.NotFound',
  'InvalidGroupId.Malformed',
  'InvalidSecurityGroupID.NotFound',
  'InvalidKeyPair.NotFound',
  'InvalidParameterValue',
  'InvalidParameterCombination',
  'InvalidParameter',
  'InvalidBlockDeviceMapping',
  'InvalidInstanceType',
  'InvalidPlacementGroup.Unknown',
  'InvalidCapacityReservationId.NotFound',
  'InvalidSnapshot.NotFound',
  'InvalidKMSKey.NotFound',
  'InvalidUserData.Malformed',
  'MissingParameter',
  // What the EC2 emulator answers for an unknown instance profile (EC2 says InvalidParameterValue).
  'NoSuchEntity',
]);

const AUTH_ERROR_CODES: ReadonlySet<string> = new Set([
  'AuthFailure',
  'UnauthorizedOperation',
  'InvalidClientTokenId',
  'SignatureDoesNotMatch',
  'OptInRequired',
  'Blocked',
  'ExpiredToken',
  'RequestExpired',
  'AccessDenied',
  'AccessDeniedException',
  'InvalidAccessKeyId',
]);

export const INSTANCE_NOT_FOUND_CODES: ReadonlySet<string> = new Set([
  'InvalidInstanceID.NotFound',
  'InvalidInstanceID.Malformed',
]);

/** Transport failures: the request may never have reached EC2, or its answer was lost. */
const TRANSPORT_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
]);

export interface AwsErrorInfo {
  /** EC2's error code (e.g. `InvalidAMIID.NotFound`), or the transport error's code or name. */
  code: string;
  message: string;
  httpStatus: number | undefined;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

/** The error code, message and HTTP status of anything the SDK threw. */
export function awsErrorInfo(err: unknown): AwsErrorInfo {
  if (!isRecord(err)) return { code: 'Unknown', message: String(err), httpStatus: undefined };
  const metadata = isRecord(err.$metadata) ? err.$metadata : undefined;
  const httpStatus = typeof metadata?.httpStatusCode === 'number' ? metadata.httpStatusCode : undefined;
  const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
  const code = str(err.Code) ?? str(err.code) ?? str(err.name) ?? 'Unknown';
  const message = str(err.message) ?? str(err.Message) ?? code;
  return { code, message, httpStatus };
}

/** The machine error code of an EC2 error. */
export function machineCodeOf(info: AwsErrorInfo): MachineErrorCodeName {
  const { code, httpStatus } = info;
  if (CAPACITY_ERROR_CODES.has(code)) return 'ResourceExhausted';
  if (THROTTLING_ERROR_CODES.has(code)) return 'Unavailable';
  if (INSTANCE_NOT_FOUND_CODES.has(code)) return 'NotFound';
  if (AUTH_ERROR_CODES.has(code)) return 'PermissionDenied';
  if (CONFIGURATION_ERROR_CODES.has(code) || code.startsWith('Invalid')) return 'InvalidArgument';
  if (code === 'AbortError') return 'Canceled';
  if (TRANSPORT_ERROR_CODES.has(code)) return 'Unavailable';
  if (httpStatus !== undefined && httpStatus >= 500) return 'Unavailable';
  return 'Internal';
}

/** Removes every secret value from a message (an error text must never carry one). */
export function redact(message: string, secrets: readonly string[]): string {
  let out = message;
  for (const s of secrets) if (s !== '') out = out.split(s).join('<redacted>');
  return out;
}

/**
 * The MachineError for an EC2 call that failed: `AWS <operation> failed: <code>: <EC2's message>`,
 * secrets redacted.
 */
export function toMachineError(
  err: unknown,
  operation: string,
  secrets: readonly string[] = [],
): MachineError {
  if (err instanceof MachineError) return err;
  if (err instanceof FencedError) {
    return new MachineError(
      'Unavailable',
      `AWS ${operation} refused: this process no longer holds the leader Lease (${err.message})`,
    );
  }
  const info = awsErrorInfo(err);
  const code = machineCodeOf(info);
  // SignatureDoesNotMatch echoes the canonical request it could not verify; the SDK error itself
  // (which holds the request) is not kept as the cause, so no logger prints it.
  const message =
    info.code === 'SignatureDoesNotMatch'
      ? 'the secret access key of the class Secret does not match its access key id'
      : redact(info.message, secrets);
  return new MachineError(code, `AWS ${operation} failed: ${info.code}: ${message}`);
}

/**
 * What a failed RunInstances means for a retry: `retry` when EC2 answered that it started nothing
 * and may later (throttling), `unknown` when the outcome is not known (no answer came, or a server
 * error other than capacity: EC2 may have started the instance before failing, so look before
 * trying again; only the ClientToken would otherwise keep a second one from starting, and
 * EC2-compatible APIs such as moto ignore it), `fail` otherwise.
 */
export function launchFailure(err: unknown): 'retry' | 'unknown' | 'fail' {
  // The leader fence refused the attempt before it was sent: nothing was started, nothing may be.
  if (err instanceof FencedError) return 'fail';
  const info = awsErrorInfo(err);
  if (info.code === 'AbortError') return 'fail';
  if (THROTTLING_ERROR_CODES.has(info.code)) return 'retry';
  if (info.httpStatus === undefined)
    return TRANSPORT_ERROR_CODES.has(info.code) || info.code === 'Unknown' || info.code === 'Error'
      ? 'unknown'
      : 'fail';
  if (info.httpStatus >= 500 && !CAPACITY_ERROR_CODES.has(info.code)) return 'unknown';
  return 'fail';
}
