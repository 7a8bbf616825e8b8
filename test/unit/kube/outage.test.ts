import { expect } from 'chai';

import { FakeClock } from '../../../lib/kube/clock.js';
import { OutageLog } from '../../../lib/kube/outage.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';

describe('OutageLog', () => {
  function setup(): { clock: FakeClock; logger: CapturingLogger; outage: OutageLog; seen: () => string[] } {
    const clock = new FakeClock(0);
    const logger = new CapturingLogger();
    const outage = new OutageLog({
      what: 'API requests',
      log: logger,
      clock,
      threshold: 2,
      repeatMs: 60_000,
    });
    return { clock, logger, outage, seen: () => logger.lines.map((l) => `${l.level}: ${l.msg}`) };
  }

  it('says nothing about one failure followed by success', () => {
    const { outage, seen } = setup();
    outage.failure(new Error('reset'));
    outage.success();
    expect(seen()).to.deep.equal([]);
  });

  it('warns at the second failure in a row, repeats the warning each minute, and reports the recovery once', async () => {
    const { clock, logger, outage, seen } = setup();
    outage.failure(new Error('refused'));
    outage.failure(new Error('refused'));
    expect(seen()).to.deep.equal(['warn: API requests failing repeatedly']);
    await clock.advance(30_000);
    outage.failure(new Error('refused'));
    expect(seen(), 'no repeat within the minute').to.have.length(1);
    await clock.advance(30_000);
    outage.failure(new Error('refused'));
    expect(seen()).to.deep.equal([
      'warn: API requests failing repeatedly',
      'warn: API requests failing repeatedly',
    ]);
    await clock.advance(5_000);
    outage.success();
    outage.success();
    expect(seen().slice(2)).to.deep.equal(['info: API requests recovered']);
    expect(logger.lines[2]?.fields).to.deep.equal({ failures: 4, outageMs: 65_000 });
    expect(outage.inOutage()).to.equal(false);
  });
});
