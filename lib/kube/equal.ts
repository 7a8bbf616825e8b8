/**
 * Structural equality of JSON values (objects, arrays, strings, numbers, booleans, null). An
 * absent key and a key holding undefined are equal, as they serialize the same.
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') {
    return (a ?? undefined) === (b ?? undefined);
  }
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  for (const k of Object.keys(ao)) if (!jsonEqual(ao[k], bo[k])) return false;
  for (const k of Object.keys(bo)) if (!(k in ao) && bo[k] !== undefined) return false;
  return true;
}

/** Keys whose value is a free-form string map: an entry with an empty value is still an entry. */
const STRING_MAPS = new Set(['labels', 'annotations']);

/**
 * The value without Go zero values ("" / 0 / false / null / empty objects and arrays), so that a
 * field written as `""` compares equal to a missing one, as it does for the Go structs behind
 * API objects: `jsonEqual(withoutGoZeroValues(a), withoutGoZeroValues(b))` is Go's semantic
 * equality. Entries of label and annotation maps are kept as they are.
 */
export function withoutGoZeroValues(value: unknown, keepEntries = false): unknown {
  if (Array.isArray(value)) {
    const items = value.map((v) => withoutGoZeroValues(v));
    return items.length === 0 ? undefined : items;
  }
  if (value === null || value === undefined || value === '' || value === 0 || value === false)
    return undefined;
  if (typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    const kept = keepEntries && typeof v === 'string' ? v : withoutGoZeroValues(v, STRING_MAPS.has(key));
    if (kept !== undefined) out[key] = kept;
  }
  return Object.keys(out).length === 0 ? undefined : out;
}
