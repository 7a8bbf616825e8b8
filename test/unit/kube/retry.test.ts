import { expect } from 'chai';

import { Backoff } from '../../../lib/kube/backoff.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { ConflictError, NotFoundError } from '../../../lib/kube/errors.js';
import { retryOnConflict } from '../../../lib/kube/retry.js';

describe('Backoff', () => {
  it('doubles from the initial delay up to the maximum and resets', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: 0 });
    expect([b.next(), b.next(), b.next(), b.next(), b.next(), b.next()]).to.deep.equal([
      100, 200, 400, 800, 1000, 1000,
    ]);
    b.reset();
    expect(b.next()).to.equal(100);
  });

  it('adds at most the jitter fraction', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 0.5, random: () => 1 });
    expect(b.next()).to.equal(150);
  });

  it('starts over after being idle for resetAfterMs', async () => {
    const clock = new FakeClock();
    const b = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 0, resetAfterMs: 5000, clock });
    b.next();
    b.next();
    expect(b.next()).to.equal(400);
    await clock.advance(6000);
    expect(b.next()).to.equal(100);
  });
});

describe('retryOnConflict', () => {
  it('retries conflicts until the function succeeds', async () => {
    const clock = new FakeClock();
    let calls = 0;
    const p = retryOnConflict(
      () => {
        calls++;
        if (calls < 3) return Promise.reject(new ConflictError('conflict', 409, 'Conflict'));
        return Promise.resolve('ok');
      },
      { clock },
    );
    await clock.advance(10_000);
    expect(await p).to.equal('ok');
    expect(calls).to.equal(3);
  });

  it('does not retry other errors', async () => {
    let calls = 0;
    let error: unknown;
    try {
      await retryOnConflict(() => {
        calls++;
        return Promise.reject(new NotFoundError('gone', 404, 'NotFound'));
      });
    } catch (err) {
      error = err;
    }
    expect(error).to.be.instanceOf(NotFoundError);
    expect(calls).to.equal(1);
  });

  it('gives up after the configured number of attempts with the last conflict', async () => {
    const clock = new FakeClock();
    let calls = 0;
    const p = retryOnConflict(
      () => {
        calls++;
        return Promise.reject(new ConflictError(`conflict ${calls}`, 409, 'Conflict'));
      },
      { clock, steps: 4 },
    ).catch((err: unknown) => err);
    await clock.advance(60_000);
    const err = await p;
    expect(err).to.be.instanceOf(ConflictError);
    expect((err as Error).message).to.equal('conflict 4');
    expect(calls).to.equal(4);
  });
});
