import type { LabelSelector } from './types.js';
import type { DeepReadonly } from './informer.js';

type AnySelector = LabelSelector | DeepReadonly<LabelSelector>;

/**
 * Whether labels satisfy a LabelSelector (matchLabels AND every matchExpression). An empty selector
 * ({} with no terms) matches everything, as in Kubernetes; callers that want "empty matches
 * nothing" (the MachineSet controller, like the ReplicaSet one) check isEmptySelector first.
 */
export function selectorMatches(
  selector: AnySelector,
  labels: Readonly<Record<string, string>> | undefined,
): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (l[k] !== v) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(l, req.key);
    const value = l[req.key];
    switch (req.operator) {
      case 'In':
        if (!has || value === undefined || !(req.values ?? []).includes(value)) return false;
        break;
      case 'NotIn':
        if (has && value !== undefined && (req.values ?? []).includes(value)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        // An unknown operator matches nothing rather than everything.
        return false;
    }
  }
  return true;
}

export function isEmptySelector(selector: AnySelector | undefined): boolean {
  return (
    selector === undefined ||
    (Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0)
  );
}

/** The string form used in `?labelSelector=` and in scale subresource status (`a=b,c in (d,e)`). */
export function selectorToString(selector: AnySelector): string {
  const parts: string[] = [];
  for (const k of Object.keys(selector.matchLabels ?? {}).sort()) {
    parts.push(`${k}=${selector.matchLabels?.[k] ?? ''}`);
  }
  for (const req of selector.matchExpressions ?? []) {
    const values = [...(req.values ?? [])].sort().join(',');
    switch (req.operator) {
      case 'In':
        parts.push(`${req.key} in (${values})`);
        break;
      case 'NotIn':
        parts.push(`${req.key} notin (${values})`);
        break;
      case 'Exists':
        parts.push(req.key);
        break;
      case 'DoesNotExist':
        parts.push(`!${req.key}`);
        break;
      default:
        break;
    }
  }
  return parts.join(',');
}
