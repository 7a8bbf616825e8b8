import { expect } from 'chai';

import { readFileSync } from 'node:fs';
import path from 'node:path';

import { HEAP_GROWING_PERCENT, NODE_FLAGS, runtimeFlags } from '../../lib/runtime.js';
import { entrypointNodeFlags } from '../bench/entrypoint.js';
import { repoRoot } from '../harness/tools.js';

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

  it('starts the manager with NODE_FLAGS from the image and the npm scripts, which the benchmarks read', () => {
    const dockerfile = readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8');
    expect(NODE_FLAGS).to.deep.equal(['--max-semi-space-size=4']);
    expect(entrypointNodeFlags(dockerfile)).to.deep.equal(NODE_FLAGS);
    const scripts = (
      JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
        scripts: Record<string, string>;
      }
    ).scripts;
    expect(scripts['start:manager'], 'start:manager').to.contain(`node ${NODE_FLAGS.join(' ')} dist/cmd/`);
    // `npm start` runs hack/start.sh, which builds what dev mode needs and then starts it.
    expect(scripts.start).to.equal('bash hack/start.sh');
    const start = readFileSync(path.join(repoRoot, 'hack', 'start.sh'), 'utf8');
    expect(start).to.contain(`exec node ${NODE_FLAGS.join(' ')} dist/cmd/dev.js "$@"`);
  });

  it('reads the node flags of the last ENTRYPOINT and refuses one that does not start the manager', () => {
    expect(entrypointNodeFlags('FROM x\nENTRYPOINT ["node", "dist/cmd/manager.js"]\n')).to.deep.equal([]);
    expect(
      entrypointNodeFlags(
        'ENTRYPOINT ["node", "a"]\nENTRYPOINT ["node", "--x=1", "--y", "dist/cmd/manager.js"]',
      ),
    ).to.deep.equal(['--x=1', '--y']);
    expect(() => entrypointNodeFlags('FROM x\n')).to.throw(/no ENTRYPOINT/);
    expect(() => entrypointNodeFlags('ENTRYPOINT ["bash", "dist/cmd/manager.js"]')).to.throw(/not \["node"/);
  });
});
