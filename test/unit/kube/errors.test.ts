import { expect } from 'chai';

import {
  AlreadyExistsError,
  BadRequestError,
  ConflictError,
  ForbiddenError,
  GoneError,
  InvalidError,
  KubeApiError,
  NotFoundError,
  TimeoutError,
  TooManyRequestsError,
  UnauthorizedError,
  UnavailableError,
  errorFromResponse,
  isTransient,
} from '../../../lib/kube/errors.js';

const status = (code: number, reason: string, message = 'msg'): unknown => ({
  kind: 'Status',
  apiVersion: 'v1',
  status: 'Failure',
  code,
  reason,
  message,
});

describe('errorFromResponse classifies API errors into typed errors', () => {
  const cases: { name: string; code: number; body: unknown; want: new (...a: never[]) => KubeApiError }[] = [
    { name: '404 NotFound', code: 404, body: status(404, 'NotFound'), want: NotFoundError },
    { name: '409 AlreadyExists', code: 409, body: status(409, 'AlreadyExists'), want: AlreadyExistsError },
    { name: '409 Conflict', code: 409, body: status(409, 'Conflict'), want: ConflictError },
    { name: '410 Gone', code: 410, body: status(410, 'Gone'), want: GoneError },
    { name: 'watch ERROR 410 Expired', code: 410, body: status(410, 'Expired'), want: GoneError },
    { name: '422 Invalid', code: 422, body: status(422, 'Invalid'), want: InvalidError },
    {
      name: '429 TooManyRequests',
      code: 429,
      body: status(429, 'TooManyRequests'),
      want: TooManyRequestsError,
    },
    { name: '504 Timeout', code: 504, body: status(504, 'Timeout'), want: TimeoutError },
    { name: '500 ServerTimeout reason', code: 500, body: status(500, 'ServerTimeout'), want: TimeoutError },
    { name: '503 plain text', code: 503, body: 'service unavailable', want: UnavailableError },
    { name: '401', code: 401, body: undefined, want: UnauthorizedError },
    { name: '403', code: 403, body: status(403, 'Forbidden'), want: ForbiddenError },
    { name: '400', code: 400, body: status(400, 'BadRequest'), want: BadRequestError },
  ];
  for (const tc of cases) {
    it(`maps ${tc.name} to ${tc.want.name}`, () => {
      const err = errorFromResponse(tc.code, tc.body, 'GET /x');
      expect(err).to.be.instanceOf(tc.want);
      expect(err).to.be.instanceOf(KubeApiError);
      expect(err.code).to.equal(tc.code);
      expect(err.message).to.contain('GET /x');
    });
  }

  it('keeps the Retry-After delay of a 429', () => {
    const err = errorFromResponse(429, status(429, 'TooManyRequests'), 'GET /x', 3000);
    if (!(err instanceof TooManyRequestsError)) throw new Error(`got ${err.name}`);
    expect(err.retryAfterMs).to.equal(3000);
  });

  it('treats timeouts, unavailability and throttling as transient, conflicts and invalid objects as not', () => {
    expect(isTransient(errorFromResponse(503, '', 'x'))).to.equal(true);
    expect(isTransient(errorFromResponse(504, '', 'x'))).to.equal(true);
    expect(isTransient(errorFromResponse(429, '', 'x'))).to.equal(true);
    expect(isTransient(errorFromResponse(409, status(409, 'Conflict'), 'x'))).to.equal(false);
    expect(isTransient(errorFromResponse(422, status(422, 'Invalid'), 'x'))).to.equal(false);
  });
});
