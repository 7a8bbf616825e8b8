import { expect } from 'chai';

import { ConfigError, defaultConfig, parseArgs, parseDuration } from '../../lib/config.js';

describe('parseDuration (Go duration syntax)', () => {
  const cases: [string, number][] = [
    ['0', 0],
    ['90s', 90_000],
    ['10m', 600_000],
    ['1h30m', 5_400_000],
    ['500ms', 500],
    ['1.5h', 5_400_000],
    ['12h0m0s', 43_200_000],
  ];
  for (const [text, ms] of cases) {
    it(`${text} = ${ms} ms`, () => {
      expect(parseDuration(text)).to.equal(ms);
    });
  }
  for (const bad of ['', '10', 'm', '10x', '1h 30m', '-5s']) {
    it(`rejects "${bad}"`, () => {
      expect(() => parseDuration(bad)).to.throw(ConfigError);
    });
  }
});

describe('parseArgs (gardener MCM flag names and defaults)', () => {
  it('uses MCM defaults when no flag is given', () => {
    const c = parseArgs([]);
    expect(c).to.deep.equal(defaultConfig);
    if (c === 'help') throw new Error('help');
    expect(c).to.deep.include({
      namespace: 'default',
      safetyUp: 2,
      safetyDown: 1,
      kubeApiQps: 20,
      kubeApiBurst: 30,
      port: 10258,
    });
    expect(c.leaderElectLeaseDurationMs).to.equal(15_000);
  });

  it('accepts --flag=value, --flag value and bare booleans', () => {
    const c = parseArgs([
      '--namespace=shoot--a',
      '--safety-up',
      '5',
      '--leader-elect=false',
      '--autoscaler-scaledown-annotation-during-rollout',
      '--machine-safety-overshooting-period=30s',
      '--controllers=machineset,safety',
      '--v=4',
    ]);
    if (c === 'help') throw new Error('help');
    expect(c).to.deep.include({
      namespace: 'shoot--a',
      safetyUp: 5,
      leaderElect: false,
      autoscalerScaleDownAnnotationDuringRollout: true,
      machineSafetyOvershootingPeriodMs: 30_000,
      controllers: ['machineset', 'safety'],
      verbosity: 4,
    });
  });

  it('collects --provider-module in order (repeatable) and refuses an empty one', () => {
    const c = parseArgs(['--provider-module=@acme/mcm-provider', '--provider-module', './providers/b.js']);
    if (c === 'help') throw new Error('help');
    expect(c.providerModules).to.deep.equal(['@acme/mcm-provider', './providers/b.js']);
    expect(() => parseArgs(['--provider-module='])).to.throw(
      ConfigError,
      '--provider-module needs a module name or path',
    );
  });

  it('reads the AWS interruption queue, its drain timeout and the rebalance opt-in (off by default)', () => {
    const off = parseArgs([]);
    if (off === 'help') throw new Error('help');
    expect(off).to.deep.include({
      awsInterruptionQueue: '',
      awsInterruptionDrainTimeoutMs: 90_000,
      awsRebalanceAsInterruption: false,
      awsUnavailableOfferingTtlMs: 180_000,
      awsUnavailableAfterInterruption: false,
    });
    const c = parseArgs([
      '--aws-interruption-queue=https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions',
      '--aws-interruption-drain-timeout=100s',
      '--aws-rebalance-as-interruption',
      '--aws-unavailable-offering-ttl=45s',
      '--aws-unavailable-after-interruption',
    ]);
    if (c === 'help') throw new Error('help');
    expect(c).to.deep.include({
      awsInterruptionQueue: 'https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions',
      awsInterruptionDrainTimeoutMs: 100_000,
      awsRebalanceAsInterruption: true,
      awsUnavailableOfferingTtlMs: 45_000,
      awsUnavailableAfterInterruption: true,
    });
  });

  it('reads the AWS instance status interval (60s, 0 turns it off) and the impaired timeout (5m)', () => {
    const d = parseArgs([]);
    if (d === 'help') throw new Error('help');
    expect(d).to.deep.include({ awsInstanceStatusIntervalMs: 60_000, awsImpairedTimeoutMs: 300_000 });
    const c = parseArgs(['--aws-instance-status-interval=0', '--aws-impaired-timeout=2m30s']);
    if (c === 'help') throw new Error('help');
    expect(c).to.deep.include({ awsInstanceStatusIntervalMs: 0, awsImpairedTimeoutMs: 150_000 });
  });

  it("reads the gRPC server's limits, with grpc-go's keepalive defaults and 100 streams per connection", () => {
    const d = parseArgs([]);
    if (d === 'help') throw new Error('help');
    expect(d).to.deep.include({
      grpcMaxConcurrentStreams: 100,
      grpcMaxPendingRequestBytes: 64 * 1024 * 1024,
      grpcRequestReadTimeoutMs: 30_000,
      grpcKeepaliveMinTimeMs: 300_000,
      grpcKeepalivePermitWithoutStream: false,
      grpcMaxConnectionIdleMs: 0,
      grpcMaxConnectionAgeMs: 0,
      grpcMaxConnectionAgeGraceMs: 30_000,
    });
    const c = parseArgs([
      '--grpc-max-concurrent-streams=8',
      '--grpc-max-pending-request-bytes=16777216',
      '--grpc-request-read-timeout=5s',
      '--grpc-keepalive-min-time=10s',
      '--grpc-keepalive-permit-without-stream',
      '--grpc-max-connection-idle=15m',
      '--grpc-max-connection-age=2h',
      '--grpc-max-connection-age-grace=1m',
    ]);
    if (c === 'help') throw new Error('help');
    expect(c).to.deep.include({
      grpcMaxConcurrentStreams: 8,
      grpcMaxPendingRequestBytes: 16 * 1024 * 1024,
      grpcRequestReadTimeoutMs: 5_000,
      grpcKeepaliveMinTimeMs: 10_000,
      grpcKeepalivePermitWithoutStream: true,
      grpcMaxConnectionIdleMs: 900_000,
      grpcMaxConnectionAgeMs: 7_200_000,
      grpcMaxConnectionAgeGraceMs: 60_000,
    });
  });

  it('accepts and ignores the MCM flags that have no meaning here', () => {
    expect(() =>
      parseArgs(['--kube-api-content-type=application/vnd.kubernetes.protobuf', '--profiling']),
    ).to.not.throw();
  });

  const errors: [string[], RegExp][] = [
    [['--no-such-flag=1'], /unknown flag --no-such-flag/],
    [['--safety-up=-1'], /--safety-up: must be >= 0/],
    [['--concurrent-syncs=0'], /--concurrent-syncs: must be >= 1/],
    [['--leader-elect=maybe'], /expected true or false/],
    [['--controllers=machineset,nope'], /unknown controller "nope"/],
    [['--target-kubeconfig=none'], /--control-kubeconfig is required/],
    [['--leader-elect-lease-duration=5s'], /lease-duration must be greater/],
    [['--port=70000'], /--port must be 0..65535/],
    [['--namespace'], /needs a value/],
    [['--leader-elect-resource-lock=configmaps'], /only "leases"/],
    [['--aws-interruption-queue=mcm-interruptions'], /--aws-interruption-queue: .*not a URL/],
    [['--aws-interruption-drain-timeout=2m'], /less than 2m/],
    [['--aws-interruption-drain-timeout=0s'], /more than 0/],
    [['--aws-unavailable-offering-ttl=-1s'], /invalid duration "-1s": must not be negative/],
    [['--aws-impaired-timeout=0s'], /--aws-impaired-timeout: must be more than 0/],
    [['--grpc-max-concurrent-streams=0'], /--grpc-max-concurrent-streams: must be >= 1/],
    [['--grpc-max-pending-request-bytes=1000'], /--grpc-max-pending-request-bytes: must be >= 4194309/],
    [['--grpc-request-read-timeout=0s'], /--grpc-request-read-timeout: must be above 0/],
  ];
  for (const [args, msg] of errors) {
    it(`rejects ${args.join(' ')} with a clear message`, () => {
      expect(() => parseArgs(args)).to.throw(ConfigError, msg);
    });
  }

  it('returns help for --help', () => {
    expect(parseArgs(['--help'])).to.equal('help');
  });
});

describe('--help', () => {
  it('lists every flag exactly once, in named groups, with its help', async () => {
    const { usage } = await import('../../lib/config.js');
    const text = usage();
    const names = [...text.matchAll(/^ {2}--([a-z0-9-]+)/gm)].map((m) => m[1]);
    expect(new Set(names).size, 'no flag listed twice').to.equal(names.length);
    for (const flag of ['grpc-address', 'nodes', 'machine-drain-timeout', 'leader-elect', 'namespace'])
      expect(names, flag).to.include(flag);
    expect(text).to.match(/^cluster-autoscaler externalgrpc server:$/m);
    expect(text).to.not.match(/^Other:$/m);
  });
});
