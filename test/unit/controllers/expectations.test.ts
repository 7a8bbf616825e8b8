import { expect } from 'chai';

import { EXPECTATIONS_TTL_MS, Expectations } from '../../../lib/controllers/expectations.js';
import { FakeClock } from '../../../lib/kube/clock.js';

describe('Expectations', () => {
  const KEY = 'default/ms';
  let clock: FakeClock;
  let exp: Expectations;

  beforeEach(() => {
    clock = new FakeClock(0);
    exp = new Expectations(clock);
  });

  it('is satisfied with nothing pending', () => {
    expect(exp.satisfied(KEY)).to.equal(true);
    expect(exp.pending(KEY)).to.deep.equal({ adds: 0, deletes: 0 });
  });

  it('waits for every expected creation to be observed', () => {
    exp.expectCreations(KEY, 2);
    expect(exp.satisfied(KEY)).to.equal(false);
    exp.creationObserved(KEY);
    expect(exp.pending(KEY)).to.deep.equal({ adds: 1, deletes: 0 });
    expect(exp.satisfied(KEY)).to.equal(false);
    exp.creationObserved(KEY);
    expect(exp.satisfied(KEY)).to.equal(true);
    exp.creationObserved(KEY); // a creation by someone else: never below zero
    expect(exp.pending(KEY).adds).to.equal(0);
  });

  describe('deletion side', () => {
    it('waits for the deletion of each expected UID, not for any deletion', () => {
      exp.expectDeletions(KEY, ['a', 'b']);
      expect(exp.pending(KEY)).to.deep.equal({ adds: 0, deletes: 2 });
      exp.deletionObserved(KEY, 'c'); // a machine we did not delete
      expect(exp.satisfied(KEY)).to.equal(false);
      exp.deletionObserved(KEY, 'a');
      exp.deletionObserved(KEY, 'a'); // seen twice (deletionTimestamp, then gone): counted once
      expect(exp.pending(KEY).deletes).to.equal(1);
      expect(exp.satisfied(KEY)).to.equal(false);
      exp.deletionObserved(KEY, 'b');
      expect(exp.satisfied(KEY)).to.equal(true);
    });

    it('keeps creations and deletions of one key apart', () => {
      exp.expectCreations(KEY, 1);
      exp.expectDeletions(KEY, ['a']);
      exp.deletionObserved(KEY, 'a');
      expect(exp.satisfied(KEY), 'the creation is still pending').to.equal(false);
      exp.creationObserved(KEY);
      expect(exp.satisfied(KEY)).to.equal(true);
    });

    it('keeps keys apart', () => {
      exp.expectDeletions(KEY, ['a']);
      exp.deletionObserved('default/other', 'a');
      expect(exp.satisfied(KEY)).to.equal(false);
      expect(exp.satisfied('default/other')).to.equal(true);
    });
  });

  describe('TTL', () => {
    it('stops trusting unmet expectations once the TTL has passed since they were set', async () => {
      exp.expectDeletions(KEY, ['a']);
      await clock.advance(EXPECTATIONS_TTL_MS);
      expect(exp.satisfied(KEY), 'at the TTL').to.equal(false);
      await clock.advance(1);
      expect(exp.satisfied(KEY), 'after the TTL').to.equal(true);
    });

    it('counts the TTL from the latest expectation set for the key', async () => {
      exp.expectCreations(KEY, 1);
      await clock.advance(EXPECTATIONS_TTL_MS - 1000);
      exp.expectDeletions(KEY, ['a']);
      await clock.advance(2000);
      expect(exp.satisfied(KEY)).to.equal(false);
      await clock.advance(EXPECTATIONS_TTL_MS);
      expect(exp.satisfied(KEY)).to.equal(true);
    });

    it('starts afresh after an expiry: stale counts do not add to new ones', async () => {
      exp.expectCreations(KEY, 3);
      await clock.advance(EXPECTATIONS_TTL_MS + 1);
      exp.expectCreations(KEY, 1);
      expect(exp.pending(KEY).adds).to.equal(1);
      exp.creationObserved(KEY);
      expect(exp.satisfied(KEY)).to.equal(true);
    });

    it('tells how long unmet expectations have left before they expire', async () => {
      expect(exp.expiresIn(KEY), 'nothing pending').to.equal(0);
      exp.expectCreations(KEY, 1);
      expect(exp.expiresIn(KEY)).to.equal(EXPECTATIONS_TTL_MS);
      await clock.advance(60_000);
      expect(exp.expiresIn(KEY)).to.equal(EXPECTATIONS_TTL_MS - 60_000);
      exp.creationObserved(KEY);
      expect(exp.expiresIn(KEY), 'met').to.equal(0);
    });

    it('honours a custom TTL', async () => {
      const short = new Expectations(clock, 1000);
      short.expectCreations(KEY, 1);
      await clock.advance(1001);
      expect(short.satisfied(KEY)).to.equal(true);
    });
  });

  it('forgets a key entirely on delete', () => {
    exp.expectCreations(KEY, 1);
    exp.expectDeletions(KEY, ['a']);
    exp.delete(KEY);
    expect(exp.satisfied(KEY)).to.equal(true);
    expect(exp.pending(KEY)).to.deep.equal({ adds: 0, deletes: 0 });
  });
});
