import type { MachineErrorCodeName } from '../api/constants.js';

/** How soon the machine controller looks at a machine again (MCM's retry periods). */
export const RetryPeriod = {
  /** An optimistic-lock conflict: try again at once. */
  Conflict: 200,
  /** Transient trouble: Unknown, DeadlineExceeded, Aborted, Unavailable. */
  Short: 5_000,
  /** A provider error that needs something to change first. */
  Medium: 3 * 60_000,
  /** Nothing left to do soon: periodic re-check, or an error that will not go away by itself. */
  Long: 10 * 60_000,
} as const;

export type RetryClass = 'short' | 'medium' | 'long' | 'resource-exhausted';

/** Codes that mean "the call may well succeed if simply repeated". */
const TRANSIENT: ReadonlySet<MachineErrorCodeName> = new Set([
  'Unknown',
  'DeadlineExceeded',
  'Aborted',
  'Unavailable',
]);

export function isTransientCode(code: MachineErrorCodeName): boolean {
  return TRANSIENT.has(code);
}

/**
 * The retry class of a failed create-path call (CreateMachine, GetMachineStatus during creation):
 * capacity errors wait for --resource-exhausted-retry, transient errors are retried soon, the
 * rest after the medium period.
 */
export function createRetryClass(code: MachineErrorCodeName): RetryClass {
  if (code === 'ResourceExhausted') return 'resource-exhausted';
  return isTransientCode(code) ? 'short' : 'medium';
}

/** The retry class of a failed DeleteMachine (NotFound is success and never gets here). */
export function deleteRetryClass(code: MachineErrorCodeName): RetryClass {
  return isTransientCode(code) ? 'short' : 'long';
}

/** The retry class of a failed GetMachineStatus during deletion. */
export function deletionStatusRetryClass(code: MachineErrorCodeName): RetryClass {
  return isTransientCode(code) ? 'short' : 'medium';
}

export function retryDelay(cls: RetryClass, resourceExhaustedRetryMs: number): number {
  switch (cls) {
    case 'short':
      return RetryPeriod.Short;
    case 'medium':
      return RetryPeriod.Medium;
    case 'long':
      return RetryPeriod.Long;
    case 'resource-exhausted':
      return resourceExhaustedRetryMs > 0 ? resourceExhaustedRetryMs : RetryPeriod.Long;
  }
}
