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
