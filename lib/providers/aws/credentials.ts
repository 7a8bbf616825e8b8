// Credentials and user data from the class's Secret, under gardener's keys. Values never leave
// this module in a message: problems name the keys only.

import { createHash } from 'node:crypto';

import type { Secret } from '../../kube/types.js';

export const SecretKey = {
  AccessKeyId: 'providerAccessKeyId',
  AlternativeAccessKeyId: 'accessKeyID',
  SecretAccessKey: 'providerSecretAccessKey',
  AlternativeSecretAccessKey: 'secretAccessKey',
  UserData: 'userData',
  WorkloadIdentityTokenFile: 'workloadIdentityTokenFile',
  RoleARN: 'roleARN',
} as const;

export type AwsCredentials =
  | { kind: 'static'; accessKeyId: string; secretAccessKey: string }
  | { kind: 'webIdentity'; tokenFile: string; roleARN: string };

export type CredentialsResult = { ok: true; credentials: AwsCredentials } | { ok: false; problems: string[] };

/** The decoded value of a Secret key ('' when absent); `data` is base64 as the API serves it. */
function value(secret: Secret, key: string): string {
  const raw = secret.data?.[key];
  if (raw !== undefined) return Buffer.from(raw, 'base64').toString('utf8');
  return secret.stringData?.[key] ?? '';
}

function has(secret: Secret, key: string): boolean {
  return secret.data?.[key] !== undefined || secret.stringData?.[key] !== undefined;
}

/**
 * The AWS credentials of a Secret: a web identity when it has `workloadIdentityTokenFile` (then
 * `roleARN` is required), else an access key (`providerAccessKeyId` or `accessKeyID`, and
 * `providerSecretAccessKey` or `secretAccessKey`).
 */
export function readCredentials(secret: Secret): CredentialsResult {
  const problems: string[] = [];
  if (has(secret, SecretKey.WorkloadIdentityTokenFile)) {
    const tokenFile = value(secret, SecretKey.WorkloadIdentityTokenFile).trim();
    const roleARN = value(secret, SecretKey.RoleARN).trim();
    if (tokenFile === '') {
      problems.push(
        `secretRef.${SecretKey.WorkloadIdentityTokenFile}: Required value: the path of the token file`,
      );
    }
    if (roleARN === '') {
      problems.push(
        `secretRef.${SecretKey.RoleARN}: Required value: the role to assume when ${SecretKey.WorkloadIdentityTokenFile} is set`,
      );
    }
    return problems.length > 0
      ? { ok: false, problems }
      : { ok: true, credentials: { kind: 'webIdentity', tokenFile, roleARN } };
  }
  const accessKeyId =
    value(secret, SecretKey.AccessKeyId).trim() || value(secret, SecretKey.AlternativeAccessKeyId).trim();
  const secretAccessKey =
    value(secret, SecretKey.SecretAccessKey).trim() ||
    value(secret, SecretKey.AlternativeSecretAccessKey).trim();
  if (accessKeyId === '') {
    problems.push(
      `secretRef.${SecretKey.AccessKeyId}: Required value: ${SecretKey.AccessKeyId} or ${SecretKey.AlternativeAccessKeyId}`,
    );
  }
  if (secretAccessKey === '') {
    problems.push(
      `secretRef.${SecretKey.SecretAccessKey}: Required value: ${SecretKey.SecretAccessKey} or ${SecretKey.AlternativeSecretAccessKey}`,
    );
  }
  return problems.length > 0
    ? { ok: false, problems }
    : { ok: true, credentials: { kind: 'static', accessKeyId, secretAccessKey } };
}

/**
 * The user data of a Secret as bytes (required to create an instance), or undefined when missing.
 * Bytes, not text: gzipped cloud-init must reach EC2 exactly as the Secret holds it.
 */
export function readUserData(secret: Secret): Buffer | undefined {
  const raw = secret.data?.[SecretKey.UserData];
  const bytes =
    raw !== undefined
      ? Buffer.from(raw, 'base64')
      : Buffer.from(secret.stringData?.[SecretKey.UserData] ?? '', 'utf8');
  return bytes.length === 0 ? undefined : bytes;
}

export const USER_DATA_PROBLEM = `secretRef.${SecretKey.UserData}: Required value: the user data of the instances`;

/** A key for caching a client per credentials, from which the credentials cannot be recovered. */
export function credentialsFingerprint(region: string, c: AwsCredentials): string {
  const h = createHash('sha256').update(region).update('\0').update(c.kind);
  if (c.kind === 'static') h.update('\0').update(c.accessKeyId).update('\0').update(c.secretAccessKey);
  else h.update('\0').update(c.tokenFile).update('\0').update(c.roleARN);
  return h.digest('hex');
}

/** The secret values of a Secret that must never appear in a message (for redaction). */
export function secretValues(secret: Secret): string[] {
  const keys = [
    SecretKey.AccessKeyId,
    SecretKey.AlternativeAccessKeyId,
    SecretKey.SecretAccessKey,
    SecretKey.AlternativeSecretAccessKey,
    SecretKey.UserData,
  ];
  return keys.map((k) => value(secret, k).trim()).filter((v) => v.length >= 4);
}
