import { status } from '@grpc/grpc-js';

/** An answer with a gRPC status other than OK; the message tells the operator what to change. */
export class GrpcStatusError extends Error {
  override name = 'GrpcStatusError';
  constructor(
    readonly code: status,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export const notFound = (m: string): GrpcStatusError => new GrpcStatusError(status.NOT_FOUND, m);
export const invalidArgument = (m: string): GrpcStatusError =>
  new GrpcStatusError(status.INVALID_ARGUMENT, m);
export const failedPrecondition = (m: string): GrpcStatusError =>
  new GrpcStatusError(status.FAILED_PRECONDITION, m);
export const unavailable = (m: string, options?: ErrorOptions): GrpcStatusError =>
  new GrpcStatusError(status.UNAVAILABLE, m, options);
export const unimplemented = (m: string): GrpcStatusError => new GrpcStatusError(status.UNIMPLEMENTED, m);
export const deadlineExceeded = (m: string, options?: ErrorOptions): GrpcStatusError =>
  new GrpcStatusError(status.DEADLINE_EXCEEDED, m, options);
