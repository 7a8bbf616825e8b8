// Identity of a MachineDeployment template: which parts of it make a machine different (and so
// need a rollout) and which parts are updated in place, plus the hash and name of the MachineSet
// that runs a template. The hash only has to be stable within this implementation; which set is
// "new" is decided by comparing templates, never by comparing hashes.

import { Label } from './constants.js';
import { MACHINE_CONFIGURATION_FIELDS, type MachineTemplateSpec } from './types.js';
import { withoutGoZeroValues } from '../kube/equal.js';
import type { DeepReadonly } from '../kube/informer.js';

type AnyTemplate = MachineTemplateSpec | DeepReadonly<MachineTemplateSpec>;

/**
 * JSON with object keys sorted at every level, so that two equal values always serialise to the
 * same string whatever order their keys were written in (the input of the template hash; to
 * compare values, use jsonEqual).
 */
export function stableStringify(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) {
    const v = (value as Record<string, unknown>)[key];
    if (v !== undefined) out[key] = sortKeys(v);
  }
  return out;
}

/**
 * The part of a template that defines what a machine is. Left out: the template-hash label (it
 * differs per MachineSet by construction), the node template, the machine configuration
 * (timeouts, health settings) and the class kind. Those are copied to existing machines in place,
 * so changing them must not replace any machine.
 */
export function rolloutRelevantTemplate(template: AnyTemplate): unknown {
  const copy = structuredClone(template) as MachineTemplateSpec;
  if (copy.metadata?.labels !== undefined) {
    copy.metadata.labels = Object.fromEntries(
      Object.entries(copy.metadata.labels).filter(([key]) => key !== Label.MachineTemplateHash),
    );
  }
  if (copy.spec !== undefined) {
    const ignored = new Set<string>(['nodeTemplate', ...MACHINE_CONFIGURATION_FIELDS]);
    const spec = Object.fromEntries(
      Object.entries(copy.spec).filter(([key]) => !ignored.has(key)),
    ) as typeof copy.spec;
    if (spec.class !== undefined) {
      const { kind: _kind, ...classRef } = spec.class;
      spec.class = classRef;
    }
    copy.spec = spec;
  }
  return withoutGoZeroValues(copy) ?? null;
}

/** Identities of frozen templates (the informers' cached objects never change), by object. */
const identities = new WeakMap<object, string>();

/**
 * The rollout-relevant part of a template as canonical JSON: two templates produce the same
 * machines exactly when their identities are equal. Remembered for a frozen template, so a
 * deployment's reconcile compares its sets' cached templates without rebuilding them each time.
 */
export function templateIdentity(template: AnyTemplate): string {
  const frozen = Object.isFrozen(template);
  if (frozen) {
    const known = identities.get(template);
    if (known !== undefined) return known;
  }
  const identity = stableStringify(rolloutRelevantTemplate(template));
  if (frozen) identities.set(template, identity);
  return identity;
}

/** Whether two templates produce the same machines (gardener MCM's EqualIgnoreHash). */
export function templatesEqualIgnoringHash(a: AnyTemplate, b: AnyTemplate): boolean {
  return templateIdentity(a) === templateIdentity(b);
}

const FNV32_OFFSET_BASIS = 0x811c9dc5;
const FNV32_PRIME = 0x01000193;

/** 32-bit FNV-1a over the UTF-8 bytes of input. */
export function fnv32a(input: string): number {
  let hash = FNV32_OFFSET_BASIS;
  for (const byte of new TextEncoder().encode(input)) {
    hash ^= byte;
    hash = Math.imul(hash, FNV32_PRIME) >>> 0;
  }
  return hash >>> 0;
}

/**
 * The value of the machine-template-hash label for a template: FNV-1a of the rollout-relevant part
 * of the template, with the collision count mixed in so that a name collision can be resolved by
 * counting up. Decimal, as gardener MCM writes it.
 */
export function templateHash(template: AnyTemplate, collisionCount?: number): string {
  let input = templateIdentity(template);
  if (collisionCount !== undefined) input += `#collision=${collisionCount}`;
  return String(fnv32a(input));
}

// Consonants and digits without vowels and look-alikes: no accidental words in generated names.
const NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';
const NAME_SUFFIX_LENGTH = 5;

/** A short, name-safe, lowercase alphanumeric rendering of a hash value. */
export function encodeHash(hash: string): string {
  let n = Number(hash);
  if (!Number.isSafeInteger(n) || n < 0) n = fnv32a(hash);
  let out = '';
  do {
    out += NAME_ALPHABET[n % NAME_ALPHABET.length] ?? '';
    n = Math.floor(n / NAME_ALPHABET.length);
  } while (n > 0);
  return out;
}

/** `<deployment>-<first 5 characters of the encoded hash>`. */
export function machineSetName(deploymentName: string, hash: string): string {
  return `${deploymentName}-${encodeHash(hash).slice(0, NAME_SUFFIX_LENGTH)}`;
}
