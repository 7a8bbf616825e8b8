import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import {
  autoscalerDefaultFlags,
  backOffOf,
  backOffsOf,
  autoscalerHasFlag,
  autoscalerProcessEnv,
  externalGrpcCloudConfig,
  klogTime,
  requireAutoscaler,
} from '../../harness/autoscaler.js';
import {
  autoscalerBinaryPath,
  autoscalerComponent,
  autoscalerUnavailableReason,
  autoscalerVersions,
  newestAutoscalerVersion,
  newestUsableAutoscalerVersion,
  readToolVersions,
} from '../../harness/tools.js';

describe('test harness: cluster-autoscaler versions and flags', () => {
  const saved = { tools: process.env.MCM_TOOLS_DIR, sources: process.env.MCM_CA_SOURCES_DIR };
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'mcm-ca-tools-'));
    process.env.MCM_TOOLS_DIR = path.join(dir, 'tools');
    process.env.MCM_CA_SOURCES_DIR = path.join(dir, 'sources');
  });

  afterEach(() => {
    for (const [key, value] of [
      ['MCM_TOOLS_DIR', saved.tools],
      ['MCM_CA_SOURCES_DIR', saved.sources],
    ] as const) {
      if (value === undefined) Reflect.deleteProperty(process.env, key);
      else process.env[key] = value;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  function fakeBinary(version: string): string {
    const bin = path.join(dir, 'tools', `cluster-autoscaler-${version}`, 'bin');
    mkdirSync(bin, { recursive: true });
    const p = path.join(bin, 'cluster-autoscaler');
    writeFileSync(p, '#!/bin/sh\n');
    chmodSync(p, 0o755);
    return p;
  }

  it('lists the module-proxy release first and the source-built releases after it, oldest first', () => {
    const versions = autoscalerVersions();
    expect(versions[0]).to.equal(readToolVersions().CLUSTER_AUTOSCALER_VERSION);
    expect(versions).to.include.members(['1.33.0', '1.34.5', '1.35.2', '1.36.1']);
    expect(newestAutoscalerVersion()).to.equal(versions[versions.length - 1]);
    expect(autoscalerComponent('1.36.1')).to.equal('cluster-autoscaler-1.36');
  });

  it('gives a reason only for a source-built version whose sources directory is absent', () => {
    const reason = autoscalerUnavailableReason('1.36.1');
    expect(reason).to.be.a('string').and.to.contain(path.join(dir, 'sources')).and.to.contain('absent');
    // The proxy release never has a reason to be missing: the test must fail instead.
    expect(autoscalerUnavailableReason('1.33.0')).to.equal(undefined);
    expect(() => autoscalerBinaryPath('1.36.1')).to.throw(/absent/);
  });

  it('fails a test (never skips it) that needs a source-built version whose sources are absent, naming what is missing', () => {
    expect(() => {
      requireAutoscaler('1.35.2');
    }).to.throw(/cannot run cluster-autoscaler 1\.35\.2: .*sources.* is absent/);
    fakeBinary('1.35.2');
    expect(() => {
      requireAutoscaler('1.35.2');
    }).to.not.throw();
  });

  it('falls back to the newest version that can be built here: the module-proxy release on a bare clone, a built one before it', () => {
    expect(newestUsableAutoscalerVersion()).to.equal(readToolVersions().CLUSTER_AUTOSCALER_VERSION);
    fakeBinary('1.35.2');
    expect(newestUsableAutoscalerVersion()).to.equal('1.35.2');
    mkdirSync(path.join(dir, 'sources'));
    writeFileSync(path.join(dir, 'sources', 'cluster-autoscaler-1.36.1-externalgrpc-minsrc.tar.gz'), '');
    expect(newestUsableAutoscalerVersion()).to.equal('1.36.1');
  });

  it('names the missing tarball when the directory exists without it', () => {
    mkdirSync(path.join(dir, 'sources'));
    expect(autoscalerUnavailableReason('1.35.2')).to.contain(
      'cluster-autoscaler-1.35.2-externalgrpc-minsrc.tar.gz',
    );
  });

  it('gives no reason when the sources are there but the build is missing, and the path lookup names the build command', () => {
    mkdirSync(path.join(dir, 'sources'));
    writeFileSync(path.join(dir, 'sources', 'cluster-autoscaler-1.34.5-externalgrpc-minsrc.tar.gz'), '');
    expect(autoscalerUnavailableReason('1.34.5')).to.equal(undefined);
    expect(() => autoscalerBinaryPath('1.34.5')).to.throw(/hack\/tools\.sh cluster-autoscaler-1\.34/);
  });

  it('finds a built binary by version, even without the sources', () => {
    const p = fakeBinary('1.36.1');
    expect(autoscalerUnavailableReason('1.36.1')).to.equal(undefined);
    expect(autoscalerBinaryPath('1.36.1')).to.equal(p);
  });

  it('rejects a version that is not pinned', () => {
    expect(() => autoscalerBinaryPath('1.30.0')).to.throw(/not pinned/);
  });

  it('leaves out flags a version does not have', () => {
    expect(autoscalerHasFlag('1.34.5', 'max-node-startup-time')).to.equal(false);
    expect(autoscalerHasFlag('1.35.2', 'max-node-startup-time')).to.equal(true);
    expect(autoscalerDefaultFlags('1.33.0')).not.to.have.property('max-node-startup-time');
    expect(autoscalerDefaultFlags('1.36.1')).to.have.property('max-node-startup-time', '60s');
    expect(autoscalerDefaultFlags('1.36.1')).to.include({ 'leader-elect': false, 'scan-interval': '1s' });
  });

  it('writes the externalgrpc cloud-config keys (address, cert, key, cacert, grpc_timeout)', () => {
    expect(externalGrpcCloudConfig({ address: '127.0.0.1:9000' })).to.equal('address: "127.0.0.1:9000"\n');
    expect(
      externalGrpcCloudConfig({
        address: '127.0.0.1:9000',
        tls: { certFile: '/c/client.crt', keyFile: '/c/client.key', caFile: '/c/ca.crt' },
        grpcTimeout: '10s',
      }),
    ).to.equal(
      [
        'address: "127.0.0.1:9000"',
        'cert: "/c/client.crt"',
        'key: "/c/client.key"',
        'cacert: "/c/ca.crt"',
        'grpc_timeout: "10s"',
        '',
      ].join('\n'),
    );
  });
});

describe('test harness: cluster-autoscaler log times', () => {
  const at = (iso: string): number => Date.parse(iso);

  it('runs the autoscaler in UTC, without the in-cluster variables, and otherwise with the test’s environment', () => {
    const env = autoscalerProcessEnv({
      TZ: 'Europe/Berlin',
      PATH: '/bin',
      KUBERNETES_SERVICE_HOST: '10.0.0.1',
    });
    expect(env).to.deep.equal({
      TZ: 'UTC',
      PATH: '/bin',
      KUBERNETES_SERVICE_HOST: '',
      KUBERNETES_SERVICE_PORT: '',
    });
  });

  it('reads a klog line’s month, day and time as UTC, in the year of the time given', () => {
    const line =
      'W1128 08:12:34.567890 12345 orchestrator.go:100] Disabling scale-up for node group default/x until …';
    expect(klogTime(line, at('2026-11-28T08:13:00Z'))).to.equal(at('2026-11-28T08:12:34.567Z'));
    expect(klogTime('not a klog line', at('2026-11-28T08:13:00Z'))).to.equal(undefined);
  });

  it('reads the back-offs of a node group from the log: when, until when, error class and code', () => {
    const log = [
      'W1128 08:12:34.567890 1 clusterstate.go:404] Disabling scale-up for node group default/a until 2026-11-28 08:12:44.567890123 +0000 UTC m=+20.5; errorClass=Other; errorCode=FailedPrecondition',
      'W1128 08:12:35.000000 1 clusterstate.go:404] Disabling scale-up for node group default/b until 2026-11-28 08:13:05 +0000 UTC m=+21.0; errorClass=OutOfResource; errorCode=ResourceExhausted',
      'W1128 08:13:40.100000 1 clusterstate.go:358] Scale-up timed out for node group default/a after 1m0.1s',
      'W1128 08:13:40.100001 1 clusterstate.go:404] Disabling scale-up for node group default/a until 2026-11-28 08:14:10.1 +0000 UTC m=+86.0; errorClass=Other; errorCode=timeout',
    ].join('\n');
    const near = at('2026-11-28T08:13:00Z');
    expect(backOffsOf(log, 'default/a', near)).to.deep.equal([
      {
        at: at('2026-11-28T08:12:34.567Z'),
        until: at('2026-11-28T08:12:44.567Z'),
        errorClass: 'Other',
        errorCode: 'FailedPrecondition',
      },
      {
        at: at('2026-11-28T08:13:40.100Z'),
        until: at('2026-11-28T08:14:10.100Z'),
        errorClass: 'Other',
        errorCode: 'timeout',
      },
    ]);
    expect(backOffOf(log, 'default/a')).to.deep.equal({
      outOfResource: false,
      creationError: true,
      timedOut: true,
    });
    expect(backOffOf(log, 'default/b')).to.deep.equal({
      outOfResource: true,
      creationError: false,
      timedOut: false,
    });
    // A timeout alone is no creation error.
    expect(backOffOf(log.split('\n').slice(2).join('\n'), 'default/a').creationError).to.equal(false);
  });

  it('takes the year that puts the line nearest the time given, across New Year', () => {
    const dec31 = 'I1231 23:59:58.000001 1 main.go:1] last of the year';
    const jan1 = 'I0101 00:00:02.000000 1 main.go:1] first of the year';
    expect(klogTime(dec31, at('2027-01-01T00:00:05Z')), 'read on Jan 1').to.equal(at('2026-12-31T23:59:58Z'));
    expect(klogTime(jan1, at('2026-12-31T23:59:59Z')), 'read a little late, on Dec 31').to.equal(
      at('2027-01-01T00:00:02Z'),
    );
    // Feb 29 only exists in a leap year: near March 2029 it is 2028's.
    expect(klogTime('I0229 12:00:00.000000 1 x.go:1] leap', at('2029-03-01T00:00:00Z'))).to.equal(
      at('2028-02-29T12:00:00Z'),
    );
  });
});
