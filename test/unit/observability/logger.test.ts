import { PassThrough } from 'node:stream';

import { expect } from 'chai';

import { createLogger, levelForVerbosity } from '../../../lib/observability/logger.js';

function capture(verbosity: number): {
  lines: () => Record<string, unknown>[];
  log: ReturnType<typeof createLogger>;
} {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (d: Buffer) => (text += d.toString()));
  const log = createLogger({ verbosity, stream });
  return {
    log,
    lines: () =>
      text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('logger', () => {
  it('maps klog --v to the most verbose level written', () => {
    expect([0, 2, 3, 4, 5, 9].map(levelForVerbosity)).to.deep.equal([
      'info',
      'info',
      'verbose',
      'debug',
      'trace',
      'trace',
    ]);
  });

  it('writes JSON lines with time, level, v, message and context fields', async () => {
    const { log, lines } = capture(2);
    log.child({ controller: 'machineset' }).info('creating machines', { key: 'ns/ms', count: 3 });
    await flush();
    const [line] = lines();
    expect(line).to.include({
      level: 'info',
      v: 2,
      message: 'creating machines',
      controller: 'machineset',
      key: 'ns/ms',
      count: 3,
    });
    expect(Date.parse(String(line?.timestamp))).to.not.be.NaN;
  });

  it('drops lines above the verbosity and keeps errors and warnings', async () => {
    const { log, lines } = capture(3);
    log.error('e');
    log.warn('w');
    log.verbose('v3');
    log.debug('v4');
    log.trace('v5');
    await flush();
    expect(lines().map((l) => l.message)).to.deep.equal(['e', 'w', 'v3']);
  });

  it('logs errors by their message', async () => {
    const { log, lines } = capture(2);
    log.error('reconcile failed', { err: new Error('boom') });
    await flush();
    expect(lines()[0]).to.include({ err: 'boom' });
  });
});
