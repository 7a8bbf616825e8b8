import { expect } from 'chai';

import { FakeClock } from '../../../../lib/kube/clock.js';
import { LaunchPacer } from '../../../../lib/providers/aws/pacer.js';

describe('AWS provider: launch pacing after throttling', () => {
  it('does not delay before a throttle; then starts at 2/s, halves per throttle down to its floor', () => {
    const pacer = new LaunchPacer(new FakeClock());
    expect(pacer.pace).to.equal(undefined);
    pacer.throttled();
    expect(pacer.pace).to.equal(2);
    pacer.throttled();
    expect(pacer.pace).to.equal(1);
    for (let k = 0; k < 10; k++) pacer.throttled();
    expect(pacer.pace).to.equal(0.2);
  });

  it('grows back with each launch that goes through until launches are not limited', () => {
    const pacer = new LaunchPacer(new FakeClock(), {
      initialRate: 2,
      minRate: 0.2,
      maxRate: 3,
      increase: 0.5,
    });
    pacer.throttled();
    pacer.succeeded();
    expect(pacer.pace).to.equal(2.5);
    pacer.succeeded();
    expect(pacer.pace).to.equal(undefined);
  });

  it('gives waiting launches their turns one interval apart, and a cancelled wait rejects', async () => {
    const clock = new FakeClock();
    const pacer = new LaunchPacer(clock);
    pacer.throttled();
    const done: number[] = [];
    const start = clock.monotonic();
    const turns = [0, 1, 2].map((k) =>
      pacer.turn().then(() => {
        done[k] = clock.monotonic() - start;
      }),
    );
    const cancel = new AbortController();
    const cancelled = pacer.turn(cancel.signal).catch((e: unknown) => e);
    await clock.advance(600);
    cancel.abort(new Error('stop'));
    await clock.advance(1000);
    await Promise.all(turns);
    expect(done).to.deep.equal([0, 500, 1000]);
    expect(((await cancelled) as Error).message).to.equal('stop');
  });
});
