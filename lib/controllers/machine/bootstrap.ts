// User data placeholders and the bootstrap token a new node joins with (MCM's format: secret
// kube-system/bootstrap-token-<id> of type bootstrap.kubernetes.io/token).

import { createHash, randomInt } from 'node:crypto';

import type { KubeApi } from '../../kube/client.js';
import { isAlreadyExists, isConflict, isNotFound } from '../../kube/errors.js';
import { CoreResources } from '../../kube/resources.js';
import type { Secret } from '../../kube/types.js';
import { rfc3339 } from '../conditions.js';

export const BOOTSTRAP_TOKEN_PLACEHOLDER = '<<BOOTSTRAP_TOKEN>>';
export const MACHINE_NAME_PLACEHOLDER = '<<MACHINE_NAME>>';
const BOOTSTRAP_NAMESPACE = 'kube-system';

const escaped = (s: string): string => encodeURIComponent(s);

/**
 * User data is bytes, not text: cloud-init takes gzip (and EC2 limits user data to 16 KiB, which
 * makes gzip common). The placeholders are ASCII, so they are found and replaced on the bytes;
 * everything around them, and data without them (gzip included), is kept byte for byte.
 */
function replaceBytes(data: Buffer, search: string, replacement: string): Buffer {
  const needle = Buffer.from(search, 'utf8');
  let at = data.indexOf(needle);
  if (at < 0) return data;
  const value = Buffer.from(replacement, 'utf8');
  const parts: Buffer[] = [];
  let from = 0;
  while (at >= 0) {
    parts.push(data.subarray(from, at), value);
    from = at + needle.length;
    at = data.indexOf(needle, from);
  }
  parts.push(data.subarray(from));
  return Buffer.concat(parts);
}

/** Whether user data asks for a bootstrap token (plain or URL-encoded placeholder). */
export function needsBootstrapToken(userData: Buffer): boolean {
  return (
    userData.includes(BOOTSTRAP_TOKEN_PLACEHOLDER) || userData.includes(escaped(BOOTSTRAP_TOKEN_PLACEHOLDER))
  );
}

/** User data with the token and machine name placeholders (plain or URL-encoded) filled in. */
export function substituteUserData(userData: Buffer, machineName: string, token: string | undefined): Buffer {
  let out = replaceBytes(userData, MACHINE_NAME_PLACEHOLDER, machineName);
  out = replaceBytes(out, escaped(MACHINE_NAME_PLACEHOLDER), escaped(machineName));
  if (token !== undefined) {
    out = replaceBytes(out, BOOTSTRAP_TOKEN_PLACEHOLDER, token);
    out = replaceBytes(out, escaped(BOOTSTRAP_TOKEN_PLACEHOLDER), escaped(token));
  }
  return out;
}

/** What identifies a machine's bootstrap token: the machine object (its UID is unique). */
export interface TokenOwner {
  name: string;
  uid: string;
}

/** How many token ids a machine may use when its first ones are taken by other machines. */
const TOKEN_ID_CANDIDATES = 3;

/** Label on a token Secret naming the UID of the machine it was made for. */
export const TOKEN_MACHINE_UID_LABEL = 'mcm-ts.io/machine-uid';

/**
 * The token ids a machine may use, in order: six characters of [a-z0-9] from a hash of its UID,
 * so every machine has ids of its own (36^6 ≈ 2.2·10^9 values; MCM derives them from three
 * characters of the machine name, so machines whose names end alike share one and the first node
 * to join deletes the other's token), yet a retried creation finds the same token again. Further
 * candidates serve the rare machine whose first id is taken.
 */
export function bootstrapTokenIds(owner: TokenOwner): string[] {
  const key = owner.uid === '' ? `name:${owner.name}` : owner.uid;
  const ids: string[] = [];
  for (let k = 0; k < TOKEN_ID_CANDIDATES; k++) {
    const digest = createHash('sha256').update(`${key}/${k}`).digest();
    let id = '';
    for (let i = 0; i < 6; i++) id += ALPHABET.charAt((digest[i] ?? 0) % ALPHABET.length);
    ids.push(id);
  }
  return ids;
}

export function bootstrapTokenSecretName(id: string): string {
  return `bootstrap-token-${id}`;
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

function randomTokenSecret(): string {
  let s = '';
  for (let i = 0; i < 16; i++) s += ALPHABET.charAt(randomInt(ALPHABET.length));
  return s;
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: string | undefined): string => Buffer.from(s ?? '', 'base64').toString('utf8');

/** A token Secret this process has seen: its name and UID (what deleting it exactly takes). */
export interface TokenSecretRef {
  name: string;
  uid: string;
}

/** A machine's bootstrap token and the Secret that holds it. */
export interface BootstrapToken {
  /** `<id>.<secret>`, for the user data. */
  token: string;
  secret: TokenSecretRef;
}

/**
 * The machine's bootstrap token (`<id>.<secret>`), creating its Secret in the target's
 * kube-system when missing; the machine's existing one is reused (a retried creation must hand the
 * VM the token it may already carry).
 */
export async function ensureBootstrapToken(
  target: KubeApi,
  owner: TokenOwner,
  expiresAt: number,
  extraGroups: string,
): Promise<BootstrapToken> {
  const tokenOf = (id: string, s: Secret): BootstrapToken => ({
    token: `${id}.${unb64(s.data?.['token-secret'])}`,
    secret: { name: s.metadata.name ?? bootstrapTokenSecretName(id), uid: s.metadata.uid ?? '' },
  });
  const ours = (s: Secret): boolean => s.metadata.labels?.[TOKEN_MACHINE_UID_LABEL] === owner.uid;
  for (const id of bootstrapTokenIds(owner)) {
    const data: Record<string, string> = {
      description: b64(`bootstrap token of machine ${owner.name}`),
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
      metadata: {
        name: bootstrapTokenSecretName(id),
        namespace: BOOTSTRAP_NAMESPACE,
        labels: { [TOKEN_MACHINE_UID_LABEL]: owner.uid },
      },
      type: 'bootstrap.kubernetes.io/token',
      data,
    };
    // Create first: the token usually does not exist yet, and AlreadyExists (a retried creation)
    // costs the same one extra request as a GET up front would every time.
    try {
      return tokenOf(id, await target.create<Secret>(CoreResources.secrets, secret));
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    let existing: Secret | undefined;
    try {
      existing = await target.get<Secret>(
        CoreResources.secrets,
        secret.metadata.name ?? '',
        BOOTSTRAP_NAMESPACE,
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (existing === undefined) {
      // Gone between our AlreadyExists and our read (its owner joined): it is free again.
      return tokenOf(id, await target.create<Secret>(CoreResources.secrets, secret));
    }
    if (ours(existing)) return tokenOf(id, existing);
    // Another machine's token holds this id: try the next candidate.
  }
  throw new Error(
    `no bootstrap token id is free for machine ${owner.name}: its ${TOKEN_ID_CANDIDATES} candidate ids are all held by other machines' tokens`,
  );
}

/**
 * Deletes the machine's token (once its node joined). Only a Secret labelled with the machine's
 * UID is deleted, with that Secret's UID as precondition; candidates are looked at in order up to
 * the first that does not exist (a token left behind by a rare collision expires on its own).
 * `known`: the Secret this process created or read for the machine; it is deleted by its UID
 * without reading it first (it is the machine's: the UID names that very object), and only a
 * failed precondition sends the deletion back to reading the candidates.
 */
export async function deleteBootstrapToken(
  target: KubeApi,
  owner: TokenOwner,
  known?: TokenSecretRef,
): Promise<void> {
  if (known !== undefined && known.uid !== '') {
    try {
      await target.delete(CoreResources.secrets, known.name, {
        namespace: BOOTSTRAP_NAMESPACE,
        preconditions: { uid: known.uid },
      });
      return;
    } catch (err) {
      if (isNotFound(err)) return;
      // A conflict: the name now holds another Secret (ours expired and was replaced); look.
      if (!isConflict(err)) throw err;
    }
  }
  for (const id of bootstrapTokenIds(owner)) {
    let s: Secret;
    try {
      s = await target.get<Secret>(CoreResources.secrets, bootstrapTokenSecretName(id), BOOTSTRAP_NAMESPACE);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    if (s.metadata.labels?.[TOKEN_MACHINE_UID_LABEL] !== owner.uid) continue;
    try {
      await target.delete(CoreResources.secrets, bootstrapTokenSecretName(id), {
        namespace: BOOTSTRAP_NAMESPACE,
        ...(s.metadata.uid === undefined ? {} : { preconditions: { uid: s.metadata.uid } }),
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return;
  }
}
