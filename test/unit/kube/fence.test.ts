import { expect } from 'chai';

import { FakeClock } from '../../../lib/kube/clock.js';
import { FencedError } from '../../../lib/kube/errors.js';
import { LeaseFence } from '../../../lib/kube/fence.js';

describe('LeaseFence (writes only while leadership is proved)', () => {
  it('allows nothing before the first grant', () => {
    const fence = new LeaseFence(new FakeClock());
    expect(fence.allowed()).to.equal(false);
    expect(fence.signal.aborted).to.equal(true);
    expect(() => {
      fence.check('PATCH /x');
    }).to.throw(FencedError, /PATCH \/x: refused, this process has not acquired the leader Lease/);
  });

  it('allows writes for the window after the renewal was sent, then refuses them and aborts its signal', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    const sentAt = clock.monotonic();
    await clock.advance(300); // the renewal took 300 ms to come back
    fence.grant(sentAt, 10_000);
    expect(fence.allowed()).to.equal(true);
    const signal = fence.signal;
    expect(signal.aborted).to.equal(false);
    await clock.advance(9_699);
    expect(fence.allowed()).to.equal(true);
    await clock.advance(1);
    expect(fence.allowed()).to.equal(false);
    expect(signal.aborted, 'the signal aborts when the window ends').to.equal(true);
    expect(() => {
      fence.check('POST /machines');
    }).to.throw(FencedError, /not renewed within the renew deadline/);
  });

  it('refuses at once when the deadline passed while timers could not run (a frozen process)', () => {
    let mono = 0;
    const clock = Object.assign(new FakeClock(), { monotonic: () => mono });
    const fence = new LeaseFence(clock);
    fence.grant(0, 10_000);
    mono = 20_000; // SIGSTOP for 20 s: no timer has fired yet
    const signal = fence.signal;
    expect(() => {
      fence.check('POST /nodes');
    }).to.throw(FencedError);
    expect(signal.aborted, 'check() closes the fence itself').to.equal(true);
  });

  it('extends the window with each renewal and opens a fresh signal after a lapse and a new grant', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    fence.grant(clock.monotonic(), 10_000);
    await clock.advance(8_000);
    fence.grant(clock.monotonic(), 10_000);
    await clock.advance(8_000);
    expect(fence.allowed(), 'renewed 8 s ago').to.equal(true);
    const first = fence.signal;
    await clock.advance(2_000); // a renewal was late: the window lapsed
    expect(first.aborted).to.equal(true);
    expect(() => {
      fence.check('DELETE /m');
    }).to.throw(/not renewed within the renew deadline/);
    fence.grant(clock.monotonic(), 10_000);
    expect(fence.allowed()).to.equal(true);
    expect(fence.signal.aborted).to.equal(false);
    expect(fence.signal).to.not.equal(first);
  });

  it('stays closed for good once revoked: a later grant (a renewal answered after the loss) does not reopen it', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    fence.grant(clock.monotonic(), 10_000);
    const sentAt = clock.monotonic();
    await clock.advance(1_000);
    fence.revoke('the machine-controller Lease was lost');
    const revoked = fence.signal;
    fence.grant(sentAt, 10_000);
    await clock.advance(1_000);
    fence.grant(clock.monotonic(), 10_000);
    expect(fence.allowed()).to.equal(false);
    expect(fence.signal, 'no fresh signal either').to.equal(revoked);
    expect(fence.signal.aborted).to.equal(true);
    expect(() => {
      fence.check('POST /machines');
    }).to.throw(/the machine-controller Lease was lost/);
  });

  it('ignores a grant whose window has already passed', async () => {
    const clock = new FakeClock();
    const fence = new LeaseFence(clock);
    const sentAt = clock.monotonic();
    await clock.advance(11_000); // the renewal answer arrived after the deadline
    fence.grant(sentAt, 10_000);
    expect(fence.allowed()).to.equal(false);
  });
});
