import {
  MACHINE_CODES_ERROR_PREFIX,
  MACHINE_ERROR_CODE_NAMES,
  MachineErrorCode,
  type MachineErrorCodeName,
} from '../api/constants.js';
import type { NodeAddress } from '../api/types.js';

/** What a driver knows of a VM an error is about (see MachineError.vm). */
export interface MachineErrorVm {
  providerID: string;
  nodeName: string;
  addresses?: NodeAddress[];
}

/**
 * An error a driver returns: a machine error code and a message. Its string form is MCM's
 * machine-codes format, `machine codes error: code = [<CodeName>] message = [<msg>]`, which
 * providers and MCM parse, so drivers written for either understand each other's errors.
 */
export class MachineError extends Error {
  override name = 'MachineError';
  /**
   * The VM the error is about, when the driver found one: an Uninitialized GetMachineStatus names
   * it (as MCM's drivers return a response beside that error), so the machine controller can record
   * the VM and initialise it even when the machine does not record it yet.
   */
  readonly vm: MachineErrorVm | undefined;
  /**
   * When the driver knows the call cannot succeed before a time (an offering refused until its
   * mark ends), how long from now: the machine controller retries then, if that is sooner than its
   * period for the code. In process only (MCM's gRPC drivers have no such field).
   */
  readonly retryAfterMs: number | undefined;
  constructor(
    readonly code: MachineErrorCodeName,
    readonly detail: string,
    options?: { cause?: unknown; vm?: MachineErrorVm; retryAfterMs?: number },
  ) {
    super(formatMachineError(code, detail), options?.cause === undefined ? {} : { cause: options.cause });
    this.vm = options?.vm;
    this.retryAfterMs = options?.retryAfterMs;
  }

  get numericCode(): MachineErrorCode {
    return MachineErrorCode[this.code];
  }
}

export function formatMachineError(code: MachineErrorCodeName, message: string): string {
  return `${MACHINE_CODES_ERROR_PREFIX}code = [${code}] message = [${message}]`;
}

export interface DecodedMachineError {
  code: MachineErrorCodeName;
  message: string;
  /** False when the error did not follow the machine-codes format (its code is then Unknown). */
  ok: boolean;
  /** The driver's hint of when a retry may succeed (MachineError.retryAfterMs). */
  retryAfterMs?: number;
}

/** The first two top-level `[...]` groups of s, brackets inside them balanced. */
function bracketGroups(s: string, max: number): string[] {
  const groups: string[] = [];
  let depth = 0;
  let start = -1;
  for (let i = 0; i < s.length && groups.length < max; i++) {
    const c = s[i];
    if (c === '[') {
      if (depth === 0) start = i + 1;
      depth++;
    } else if (c === ']' && depth > 0) {
      depth--;
      if (depth === 0) groups.push(s.slice(start, i));
    }
  }
  return groups;
}

function isCodeName(name: string): name is MachineErrorCodeName {
  return (MACHINE_ERROR_CODE_NAMES as readonly string[]).includes(name);
}

/**
 * The code and message of anything a driver threw. A MachineError is taken as is; other errors
 * are parsed from their message as MCM does (the first two bracketed groups; an unknown code name
 * maps to Unknown); anything else is Unknown with ok=false.
 */
export function decodeMachineError(err: unknown): DecodedMachineError {
  if (err instanceof MachineError) {
    return {
      code: err.code,
      message: err.detail,
      ok: true,
      ...(err.retryAfterMs === undefined ? {} : { retryAfterMs: err.retryAfterMs }),
    };
  }
  const text = err instanceof Error ? err.message : typeof err === 'string' ? err : String(err);
  const at = text.indexOf(MACHINE_CODES_ERROR_PREFIX);
  if (at >= 0) {
    const [code, message] = bracketGroups(text.slice(at + MACHINE_CODES_ERROR_PREFIX.length), 2);
    if (code !== undefined && message !== undefined) {
      return { code: isCodeName(code) ? code : 'Unknown', message, ok: true };
    }
  }
  return { code: 'Unknown', message: text, ok: false };
}
