import { expect } from 'chai';

import { run } from '../../integration/env/chart.js';

describe('test harness: running a command with input', () => {
  it('a command that exits without reading its input still yields its exit code (no EPIPE thrown)', async () => {
    // 4 MiB exceeds any pipe buffer: the write is still under way when `true` exits.
    const r = await run('true', [], { stdin: 'x'.repeat(4 * 1024 * 1024) });
    expect(r.code).to.equal(0);
    const f = await run('false', [], { stdin: 'x'.repeat(4 * 1024 * 1024) });
    expect(f.code).to.equal(1);
  });
});
