import { expect } from 'chai';

import { HEAP_GROWING_PERCENT, runtimeFlags } from '../../lib/runtime.js';

describe('runtime: the V8 flags the manager sets on itself', () => {
  it('caps old-generation growth at twice the live size by default', () => {
    expect(HEAP_GROWING_PERCENT).to.equal(100);
    expect(runtimeFlags([])).to.deep.equal(['--heap-growing-percent=100']);
    expect(runtimeFlags(['--enable-source-maps', '--max-old-space-size=512'])).to.deep.equal([
      '--heap-growing-percent=100',
    ]);
  });

  it("leaves the growth to node's own flag when one is given, in either spelling", () => {
    expect(runtimeFlags(['--heap-growing-percent=30'])).to.deep.equal([]);
    expect(runtimeFlags(['--heap_growing_percent=30'])).to.deep.equal([]);
    expect(runtimeFlags(['--heap-growing-percent', '30'])).to.deep.equal([]);
    expect(runtimeFlags(['--heap-growing-percentage=30'])).to.deep.equal(['--heap-growing-percent=100']);
  });
});
