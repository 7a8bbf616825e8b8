import type { Status } from './types.js';

/**
 * Errors from the Kubernetes API, classified by the reason in the returned Status (or the HTTP
 * code when the body is not a Status). Callers branch on the class (`err instanceof
 * ConflictError`) or the helpers below, never on message text.
 */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  constructor(
    message: string,
    /** HTTP status code; 0 when no response was received. */
    readonly code: number,
    /** metav1.StatusReason, e.g. "NotFound", "Conflict", "Invalid". */
    readonly reason: string,
    readonly status?: Status,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class NotFoundError extends KubeApiError {
  override name = 'NotFoundError';
}
export class ConflictError extends KubeApiError {
  override name = 'ConflictError';
}
export class AlreadyExistsError extends KubeApiError {
  override name = 'AlreadyExistsError';
}
/** 410: a resourceVersion or continue token is too old (expired); re-list from scratch. */
export class GoneError extends KubeApiError {
  override name = 'GoneError';
}
export class InvalidError extends KubeApiError {
  override name = 'InvalidError';
}
export class BadRequestError extends KubeApiError {
  override name = 'BadRequestError';
}
export class ForbiddenError extends KubeApiError {
  override name = 'ForbiddenError';
}
export class UnauthorizedError extends KubeApiError {
  override name = 'UnauthorizedError';
}
/** 429, after the client's own Retry-After retries were used up. */
export class TooManyRequestsError extends KubeApiError {
  override name = 'TooManyRequestsError';
  constructor(
    message: string,
    code: number,
    reason: string,
    status: Status | undefined,
    /** Delay the server asked for, in milliseconds. */
    readonly retryAfterMs: number | undefined,
  ) {
    super(message, code, reason, status);
  }
}
/** The request or the server timed out (504, reason Timeout/ServerTimeout, or a client timeout). */
export class TimeoutError extends KubeApiError {
  override name = 'TimeoutError';
}
/** The server could not be reached, or answered 502/503 or another 5xx. */
export class UnavailableError extends KubeApiError {
  override name = 'UnavailableError';
}
/** The request was cancelled through its AbortSignal. */
export class AbortedError extends KubeApiError {
  override name = 'AbortedError';
}
/**
 * A write refused, or cancelled in flight, because this process may no longer write: its leader
 * Lease was lost or not renewed within the renew deadline (see fence.ts). Never sent again.
 */
export class FencedError extends AbortedError {
  override name = 'FencedError';
}
/** A watch stream sent nothing (not even a bookmark) for longer than the idle limit. */
export class WatchStalledError extends KubeApiError {
  override name = 'WatchStalledError';
}

function isStatus(body: unknown): body is Status {
  return typeof body === 'object' && body !== null && (body as { kind?: unknown }).kind === 'Status';
}

/** Maps an HTTP error response to its typed error. */
export function errorFromResponse(
  code: number,
  body: unknown,
  context: string,
  retryAfterMs?: number,
): KubeApiError {
  const status = isStatus(body) ? body : undefined;
  const reason = status?.reason ?? '';
  const detail =
    status?.message ?? (typeof body === 'string' && body !== '' ? body.slice(0, 500) : `HTTP ${code}`);
  const message = `${context}: ${detail}`;
  if (code === 404 || reason === 'NotFound')
    return new NotFoundError(message, code, reason || 'NotFound', status);
  if (code === 409 && reason === 'AlreadyExists')
    return new AlreadyExistsError(message, code, reason, status);
  if (code === 409) return new ConflictError(message, code, reason || 'Conflict', status);
  if (code === 410 || reason === 'Gone' || reason === 'Expired') {
    return new GoneError(message, code, reason || 'Gone', status);
  }
  if (code === 422 || reason === 'Invalid')
    return new InvalidError(message, code, reason || 'Invalid', status);
  if (code === 429) {
    const ms = retryAfterMs ?? (status?.details?.retryAfterSeconds ?? 0) * 1000;
    return new TooManyRequestsError(
      message,
      code,
      reason || 'TooManyRequests',
      status,
      ms > 0 ? ms : undefined,
    );
  }
  if (code === 504 || reason === 'Timeout' || reason === 'ServerTimeout') {
    return new TimeoutError(message, code, reason || 'Timeout', status);
  }
  if (code === 401) return new UnauthorizedError(message, code, reason || 'Unauthorized', status);
  if (code === 403) return new ForbiddenError(message, code, reason || 'Forbidden', status);
  if (code === 400) return new BadRequestError(message, code, reason || 'BadRequest', status);
  if (code >= 500) return new UnavailableError(message, code, reason || 'ServiceUnavailable', status);
  return new KubeApiError(message, code, reason, status);
}

export const isNotFound = (err: unknown): err is NotFoundError => err instanceof NotFoundError;
export const isConflict = (err: unknown): err is ConflictError => err instanceof ConflictError;
export const isAlreadyExists = (err: unknown): err is AlreadyExistsError => err instanceof AlreadyExistsError;
export const isGone = (err: unknown): err is GoneError => err instanceof GoneError;
export const isInvalid = (err: unknown): err is InvalidError => err instanceof InvalidError;
export const isTooManyRequests = (err: unknown): err is TooManyRequestsError =>
  err instanceof TooManyRequestsError;
export const isTimeout = (err: unknown): err is TimeoutError => err instanceof TimeoutError;
export const isUnavailable = (err: unknown): err is UnavailableError => err instanceof UnavailableError;

/** A readable message for anything thrown. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (typeof err === 'string') return err;
  try {
    return JSON.stringify(err);
  } catch {
    return 'unknown error';
  }
}

/** Errors worth retrying with backoff without changing the request. */
export function isTransient(err: unknown): boolean {
  return (
    err instanceof TimeoutError ||
    err instanceof UnavailableError ||
    err instanceof TooManyRequestsError ||
    err instanceof WatchStalledError
  );
}
