// The wire format of the MachineDeployment annotation `node.machine.sapcloud.io/trigger-deletion-by-mcm`
// (`name~RFC3339,...`; older autoscalers write bare names), shared by the MachineDeployment
// controller that acts on it and the autoscaler server that writes it.

import { TRIGGER_DELETION_ENTRY_SEPARATOR } from './constants.js';

/** RFC 3339 date-time (Go's time.RFC3339 layout, optional fractional seconds). */
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

export function isRFC3339(value: string): boolean {
  return RFC3339.test(value) && !Number.isNaN(Date.parse(value));
}

export type TriggerEntry =
  | { kind: 'marked'; name: string; time: string }
  | { kind: 'legacy'; name: string }
  | { kind: 'invalid'; raw: string; why: string };

/** Splits the annotation into entries; empty items (",,") are ignored. */
export function parseTriggerDeletion(value: string | undefined): TriggerEntry[] {
  const entries: TriggerEntry[] = [];
  for (const item of (value ?? '').split(',')) {
    const raw = item.trim();
    if (raw === '') continue;
    const parts = raw.split(TRIGGER_DELETION_ENTRY_SEPARATOR);
    const [name, time] = parts;
    if (parts.length === 1 && name !== undefined) entries.push({ kind: 'legacy', name });
    else if (parts.length !== 2 || name === undefined || name === '' || time === undefined) {
      entries.push({
        kind: 'invalid',
        raw,
        why: `expected <machine>${TRIGGER_DELETION_ENTRY_SEPARATOR}<RFC3339 time>`,
      });
    } else if (!isRFC3339(time))
      entries.push({ kind: 'invalid', raw, why: `"${time}" is not an RFC 3339 time` });
    else entries.push({ kind: 'marked', name, time });
  }
  return entries;
}
