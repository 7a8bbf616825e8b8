import { expect } from 'chai';

import { lateBuilds, terminalLine } from '../../cmd/dev-builds.js';

describe('dev mode: what it builds while it runs', () => {
  const ca = { version: '1.36.1', tool: 'cluster-autoscaler-1.36' };

  it('builds nothing when everything is built', () => {
    expect(lateBuilds({ kube: true, kwok: true, autoscaler: { ...ca, built: true } })).to.deep.equal([]);
  });

  it('builds the rest of Kubernetes first, then kwok, then the cluster-autoscaler', () => {
    expect(
      lateBuilds({ kube: false, kwok: false, autoscaler: { ...ca, built: false } }).map((b) => [
        b.tool,
        b.joins,
      ]),
    ).to.deep.equal([
      ['kube', 'kube'],
      ['kwok', 'kwok'],
      ['cluster-autoscaler-1.36', 'cluster-autoscaler'],
    ]);
  });

  it('builds no cluster-autoscaler that is not wanted (--no-autoscaler) or cannot be built here', () => {
    expect(lateBuilds({ kube: false, kwok: true, autoscaler: undefined }).map((b) => b.tool)).to.deep.equal([
      'kube',
    ]);
  });

  it('puts the builds’ start, end and failure lines on the terminal, not their progress or summary', () => {
    expect(terminalLine('[tools 04:09:02] kube v1.34.10: building (log: /x/kube.log)')).to.equal(true);
    expect(terminalLine('[tools 04:09:17] kube v1.34.10: built in 15s')).to.equal(true);
    expect(terminalLine('[tools 04:09:17] kwok v0.8.0: FAILED after 3s; last lines of /x')).to.equal(true);
    expect(
      terminalLine('[tools 04:09:32] kube: still working, 30s elapsed, 120 packages built so far'),
    ).to.equal(false);
    expect(terminalLine('[tools 04:09:02] building into /x with go1.26.8 (GOMODCACHE=/y)')).to.equal(false);
    expect(terminalLine('kube                 v1.34.10   built    15s    /x/bin')).to.equal(false);
    expect(terminalLine('    go: downloading k8s.io/api v0.34.10')).to.equal(false);
  });
});
