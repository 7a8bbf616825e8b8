import { expect } from 'chai';
import fc from 'fast-check';
import { FakeClock } from '../../../lib/kube/clock.js';
import {
  BucketRateLimiter,
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  TokenBucket,
  defaultControllerRateLimiter,
} from '../../../lib/kube/ratelimit.js';

/** Largest number of grant times falling inside any closed window, against the allowed budget. */
function worstWindowExcess(grants: number[], qps: number, burst: number): number {
  const sorted = [...grants].sort((a, b) => a - b);
  let worst = -Infinity;
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i; j < sorted.length; j++) {
      const count = j - i + 1;
      const allowed = burst + (qps * ((sorted[j] ?? 0) - (sorted[i] ?? 0))) / 1000;
      worst = Math.max(worst, count - allowed);
    }
  }
  return worst;
}

describe('ItemExponentialFailureRateLimiter', () => {
  it('doubles the delay per failure from the base and caps it at the max', () => {
    const rl = new ItemExponentialFailureRateLimiter<string>(5, 100);
    expect([1, 2, 3, 4, 5, 6].map(() => rl.when('a'))).to.deep.equal([5, 10, 20, 40, 80, 100]);
    expect(rl.numRequeues('a')).to.equal(6);
  });

  it('tracks failures per item', () => {
    const rl = new ItemExponentialFailureRateLimiter<string>(1, 1000);
    rl.when('a');
    rl.when('a');
    expect(rl.when('b')).to.equal(1);
    expect(rl.numRequeues('a')).to.equal(2);
    expect(rl.numRequeues('b')).to.equal(1);
  });

  it('starts again from the base after forget', () => {
    const rl = new ItemExponentialFailureRateLimiter<string>(5, 1000);
    rl.when('a');
    rl.when('a');
    rl.forget('a');
    expect(rl.numRequeues('a')).to.equal(0);
    expect(rl.when('a')).to.equal(5);
  });

  it('stays at the max instead of overflowing after very many failures', () => {
    const rl = new ItemExponentialFailureRateLimiter<string>(5, 1_000_000);
    let last = 0;
    for (let i = 0; i < 2000; i++) last = rl.when('a');
    expect(last).to.equal(1_000_000);
  });

  it('returns 0 for a zero base even after 2^n overflows', () => {
    const rl = new ItemExponentialFailureRateLimiter<string>(0, 1000);
    let last = -1;
    for (let i = 0; i < 1100; i++) last = rl.when('a');
    expect(last).to.equal(0);
  });

  it('property: the n-th delay since the last forget is min(base * 2^n, max)', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('when' as const), item: fc.constantFrom('a', 'b', 'c') }),
      fc.record({ kind: fc.constant('forget' as const), item: fc.constantFrom('a', 'b', 'c') }),
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.array(op, { maxLength: 80 }),
        (base, max, ops) => {
          const rl = new ItemExponentialFailureRateLimiter<string>(base, max);
          const model = new Map<string, number>();
          for (const o of ops) {
            const n = model.get(o.item) ?? 0;
            if (o.kind === 'when') {
              const delay = rl.when(o.item);
              expect(delay).to.equal(Math.min(base * 2 ** n, max));
              model.set(o.item, n + 1);
            } else {
              rl.forget(o.item);
              model.delete(o.item);
            }
            expect(rl.numRequeues(o.item)).to.equal(model.get(o.item) ?? 0);
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('TokenBucket', () => {
  it('grants a full burst immediately, then one token per 1/qps seconds', () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(10, 3, clock);
    const delays = [1, 2, 3, 4, 5].map(() => bucket.reserve());
    expect(delays).to.deep.equal([0, 0, 0, 100, 200]);
  });

  it('refills while time passes but never above the burst', async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(10, 2, clock);
    bucket.reserve();
    bucket.reserve();
    await clock.advance(60_000);
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve()]).to.deep.equal([0, 0, 100]);
  });

  it('tryTake() succeeds only while a token is available now and never borrows from the future', async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(10, 2, clock);
    expect([bucket.tryTake(), bucket.tryTake(), bucket.tryTake()]).to.deep.equal([true, true, false]);
    await clock.advance(100);
    expect([bucket.tryTake(), bucket.tryTake()]).to.deep.equal([true, false]);
    expect(bucket.reserve()).to.equal(100);
    await clock.advance(100);
    expect(bucket.tryTake(), 'the token that refilled belongs to the reservation').to.be.false;
  });

  it('take() resolves only once its token is due', async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(10, 1, clock);
    await bucket.take();
    let taken = false;
    void bucket.take().then(() => {
      taken = true;
    });
    await clock.advance(99);
    expect(taken).to.be.false;
    await clock.advance(1);
    expect(taken).to.be.true;
  });

  it('take() rejects on abort and returns the unused token', async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(10, 1, clock);
    bucket.reserve();
    const ac = new AbortController();
    const waiting = bucket.take(ac.signal);
    ac.abort(new Error('stop'));
    let rejection: unknown;
    await waiting.catch((err: unknown) => {
      rejection = err;
    });
    expect(rejection).to.be.instanceOf(Error).with.property('message', 'stop');
    // Without the refund the next caller would wait 200 ms behind the abandoned reservation.
    expect(bucket.reserve()).to.equal(100);
  });

  it('does not restore a cancelled token that later reservations were scheduled behind', async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket(100, 1, clock);
    bucket.reserve(); // now
    const ac = new AbortController();
    const first = bucket.take(ac.signal); // due at +10 ms
    const second = bucket.reserve(); // due at +20 ms
    expect(second).to.equal(20);
    await clock.advance(5);
    ac.abort(new Error('stop'));
    await first.catch(() => undefined);
    // The second reservation already owns the +20 slot; a new one must come after it.
    expect(bucket.reserve()).to.be.at.least(25 - 1e-9);
  });

  it('rejects nonsensical settings', () => {
    expect(() => new TokenBucket(0, 1)).to.throw(RangeError);
    expect(() => new TokenBucket(1, 0)).to.throw(RangeError);
    expect(() => new TokenBucket(1, 1.5)).to.throw(RangeError);
  });

  it('property: never grants more than burst + qps * t tokens in any window of length t', () => {
    const step = fc.record({
      advanceMs: fc.integer({ min: 0, max: 500 }),
      takes: fc.integer({ min: 0, max: 6 }),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 20 }),
        fc.array(step, { maxLength: 40 }),
        (qps, burst, steps) => {
          let now = 0;
          const clock = {
            now: () => now,
            monotonic: () => now,
            setTimeout: () => ({ cancel: () => undefined }),
            sleep: () => Promise.resolve(),
          };
          const bucket = new TokenBucket(qps, burst, clock);
          const grants: number[] = [];
          for (const s of steps) {
            now += s.advanceMs;
            for (let i = 0; i < s.takes; i++) grants.push(now + bucket.reserve());
          }
          expect(worstWindowExcess(grants, qps, burst)).to.be.at.most(1e-6);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('BucketRateLimiter', () => {
  it('is shared by all items and keeps no per-item state', () => {
    const clock = new FakeClock();
    const rl = new BucketRateLimiter<string>(10, 1, clock);
    expect(rl.when('a')).to.equal(0);
    expect(rl.when('b')).to.equal(100);
    rl.forget('b');
    expect(rl.numRequeues('b')).to.equal(0);
  });
});

describe('MaxOfRateLimiter', () => {
  it('returns the longest delay and forwards forget to every limiter', () => {
    const clock = new FakeClock();
    const rl = new MaxOfRateLimiter<string>(
      new ItemExponentialFailureRateLimiter<string>(50, 10_000),
      new BucketRateLimiter<string>(1, 1, clock),
    );
    expect(rl.when('a')).to.equal(50); // backoff dominates the first, free, token
    expect(rl.when('a')).to.equal(1000); // the bucket dominates now
    expect(rl.numRequeues('a')).to.equal(2);
    rl.forget('a');
    expect(rl.numRequeues('a')).to.equal(0);
  });
});

describe('defaultControllerRateLimiter', () => {
  it('backs off 5 ms, 10 ms, ... per item and caps at 1000 s', () => {
    const rl = defaultControllerRateLimiter<string>(new FakeClock());
    expect([rl.when('a'), rl.when('a'), rl.when('a')]).to.deep.equal([5, 10, 20]);
    for (let i = 0; i < 40; i++) rl.when('b');
    expect(rl.when('b')).to.equal(1_000_000);
  });

  it('limits all items together to a burst of 100 at 10 qps', () => {
    const rl = defaultControllerRateLimiter<string>(new FakeClock());
    const delays = Array.from({ length: 102 }, (_, i) => rl.when(`key-${i}`));
    expect(delays.slice(0, 100).every((d) => d === 5)).to.be.true;
    expect(delays[100]).to.equal(100);
    expect(delays[101]).to.equal(200);
  });
});
