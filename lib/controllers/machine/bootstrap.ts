// User data placeholders and the bootstrap token a new node joins with (MCM's format: secret
// kube-system/bootstrap-token-<id> of type bootstrap.kubernetes.io/token).

import { randomInt } from 'node:crypto';

import type { KubeApi } from '../../kube/client.js';
import { isAlreadyExists, isNotFound } from '../../kube/errors.js';
import { CoreResources } from '../../kube/resources.js';
import type { Secret } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';

export const BOOTSTRAP_TOKEN_PLACEHOLDER = '<<BOOTSTRAP_TOKEN>>';
export const MACHINE_NAME_PLACEHOLDER = '<<MACHINE_NAME>>';
const BOOTSTRAP_NAMESPACE = 'kube-system';

const escaped = (s: string): string => encodeURIComponent(s);

/** Whether user data asks for a bootstrap token (plain or URL-encoded placeholder). */
export function needsBootstrapToken(userData: string): boolean {
  return (
    userData.includes(BOOTSTRAP_TOKEN_PLACEHOLDER) || userData.includes(escaped(BOOTSTRAP_TOKEN_PLACEHOLDER))
  );
}

/** User data with the token and machine name placeholders (plain or URL-encoded) filled in. */
export function substituteUserData(userData: string, machineName: string, token: string | undefined): string {
  let out = userData
    .replaceAll(MACHINE_NAME_PLACEHOLDER, machineName)
    .replaceAll(escaped(MACHINE_NAME_PLACEHOLDER), escaped(machineName));
  if (token !== undefined) {
    out = out
      .replaceAll(BOOTSTRAP_TOKEN_PLACEHOLDER, token)
      .replaceAll(escaped(BOOTSTRAP_TOKEN_PLACEHOLDER), escaped(token));
  }
  return out;
}

/** MCM's token id: the first 6 hex characters of the hex encoding of the name's last 5 bytes. */
export function bootstrapTokenId(machineName: string): string {
  const bytes = Buffer.from(machineName, 'utf8');
  return bytes
    .subarray(Math.max(0, bytes.length - 5))
    .toString('hex')
    .slice(0, 6)
    .padEnd(6, '0');
}

export function bootstrapTokenSecretName(machineName: string): string {
  return `bootstrap-token-${bootstrapTokenId(machineName)}`;
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

function randomTokenSecret(): string {
  let s = '';
  for (let i = 0; i < 16; i++) s += ALPHABET.charAt(randomInt(ALPHABET.length));
  return s;
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: string | undefined): string => Buffer.from(s ?? '', 'base64').toString('utf8');

/**
 * The machine's bootstrap token (`<id>.<secret>`), creating its Secret in the target's
 * kube-system when missing; an existing one is reused.
 */
export async function ensureBootstrapToken(
  target: KubeApi,
  machineName: string,
  expiresAt: number,
  extraGroups: string,
): Promise<string> {
  const id = bootstrapTokenId(machineName);
  const name = bootstrapTokenSecretName(machineName);
  const tokenOf = (s: Secret): string => `${id}.${unb64(s.data?.['token-secret'])}`;
  // Create first: the token usually does not exist yet, and AlreadyExists (a retried creation)
  // costs the same one extra request as a GET up front would every time.
  const data: Record<string, string> = {
    description: b64(`bootstrap token of machine ${machineName}`),
    'token-id': b64(id),
    'token-secret': b64(randomTokenSecret()),
    expiration: b64(rfc3339(expiresAt)),
    'usage-bootstrap-authentication': b64('true'),
    'usage-bootstrap-signing': b64('true'),
  };
  if (extraGroups !== '') data['auth-extra-groups'] = b64(extraGroups);
  const secret: Secret = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, namespace: BOOTSTRAP_NAMESPACE },
    type: 'bootstrap.kubernetes.io/token',
    data,
  };
  // The id comes from five characters of the machine name (as in MCM), so two machines can share
  // a token Secret, and the other machine may delete it (after joining) between our AlreadyExists
  // and our read: then it is created again.
  for (let attempt = 1; ; attempt++) {
    try {
      return tokenOf(await target.create<Secret>(CoreResources.secrets, secret));
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    try {
      return tokenOf(await target.get<Secret>(CoreResources.secrets, name, BOOTSTRAP_NAMESPACE));
    } catch (err) {
      if (!isNotFound(err) || attempt >= 3) throw err;
    }
  }
}

export async function deleteBootstrapToken(target: KubeApi, machineName: string): Promise<void> {
  try {
    await target.delete(CoreResources.secrets, bootstrapTokenSecretName(machineName), {
      namespace: BOOTSTRAP_NAMESPACE,
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}
