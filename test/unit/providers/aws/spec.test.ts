import { expect } from 'chai';

import { parseAwsProviderSpec } from '../../../../lib/providers/aws/spec.js';
import { sampleSpec } from './fixtures.js';

/** The sample spec with one change at a path of keys (undefined: the field is left out). */
function changed(path: (string | number)[], value: unknown): Record<string, unknown> {
  const spec = sampleSpec();
  let at: Record<string | number, unknown> = spec;
  for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
  const last = path[path.length - 1] ?? '';
  const rest = Object.fromEntries(Object.entries(at).filter(([k]) => k !== String(last)));
  for (const k of Object.keys(at)) Reflect.deleteProperty(at, k);
  Object.assign(at, rest, value === undefined ? {} : { [last]: value });
  return spec;
}

describe('AWS provider: providerSpec (gardener schema and validation)', () => {
  it("accepts gardener's sample class unchanged, with its cluster and role tag keys", () => {
    const r = parseAwsProviderSpec(sampleSpec());
    if (!r.ok) expect.fail(r.problems.join('; '));
    expect(r.spec.ami).to.equal('ami-123456');
    expect(r.spec.region).to.equal('eu-east-1');
    expect(r.spec.machineType).to.equal('t2.large');
    expect(r.spec.iam).to.deep.equal({ name: 'iam-name' });
    expect(r.spec.keyName).to.equal('key-value-pair-name');
    expect(r.spec.spotPrice).to.equal('');
    expect(r.spec.clusterTag).to.equal('kubernetes.io/cluster/YOUR_CLUSTER_NAME');
    expect(r.spec.roleTag).to.equal('kubernetes.io/role/YOUR_ROLE_NAME');
    expect(r.spec.blockDevices).to.have.length(2);
    expect(r.spec.blockDevices[1]).to.deep.equal({
      deviceName: '/dev/sdb',
      ebs: { volumeSize: 50, volumeType: 'gp2', encrypted: true, deleteOnTermination: true },
    });
    expect(r.spec.networkInterfaces).to.deep.equal([
      { subnetID: 'subnet-acbd1234', securityGroupIDs: ['sg-xyz12345'] },
    ]);
    expect(r.spec.instanceMetadataOptions).to.deep.equal({
      httpEndpoint: 'enabled',
      httpPutResponseHopLimit: 1,
      httpTokens: 'optional',
      httpProtocolIpv6: 'disabled',
    });
  });

  it('ignores fields outside the schema, as gardener does', () => {
    const r = parseAwsProviderSpec({ ...sampleSpec(), apiVersion: 'mcm.gardener.cloud/v1alpha1', extra: 1 });
    expect(r.ok).to.be.true;
  });

  it('accepts the optional sections: iam.arn, placement, cpuOptions, market options, capacity reservation', () => {
    const spec = {
      ...sampleSpec(),
      iam: { arn: 'arn:aws:iam::123:instance-profile/x' },
      placement: { tenancy: 'host', hostId: 'h-1', affinity: 'host' },
      cpuOptions: { coreCount: 2, threadsPerCore: 1 },
      instanceMarketOptions: { marketType: 'spot' },
      capacityReservation: { capacityReservationId: 'cr-1' },
      srcAndDstChecksEnabled: false,
      ebsOptimized: true,
      monitoring: true,
    };
    const r = parseAwsProviderSpec(spec);
    if (!r.ok) expect.fail(r.problems.join('; '));
    expect(r.spec.iam).to.deep.equal({ arn: 'arn:aws:iam::123:instance-profile/x' });
    expect(r.spec.placement).to.deep.equal({ tenancy: 'host', hostId: 'h-1', affinity: 'host' });
    expect(r.spec.srcAndDstChecksEnabled).to.be.false;
  });

  const invalid: [string, Record<string, unknown>, RegExp][] = [
    ['no ami', changed(['ami'], undefined), /providerSpec\.ami: Required value/],
    ['an empty ami', changed(['ami'], ''), /providerSpec\.ami: Required value/],
    ['no region', changed(['region'], undefined), /providerSpec\.region: Required value/],
    ['no machineType', changed(['machineType'], undefined), /providerSpec\.machineType: Required value/],
    [
      'neither iam.name nor iam.arn',
      changed(['iam'], {}),
      /providerSpec\.iam: Required value: exactly one of/,
    ],
    [
      'both iam.name and iam.arn',
      changed(['iam'], { name: 'a', arn: 'b' }),
      /providerSpec\.iam: Invalid value: exactly one of iam\.name and iam\.arn/,
    ],
    [
      'no network interface',
      changed(['networkInterfaces'], []),
      /providerSpec\.networkInterfaces: Required value/,
    ],
    [
      'a network interface without subnet',
      changed(['networkInterfaces', 0, 'subnetID'], undefined),
      /providerSpec\.networkInterfaces\[0\]\.subnetID: Required value/,
    ],
    [
      'a network interface without security group',
      changed(['networkInterfaces', 0, 'securityGroupIDs'], []),
      /providerSpec\.networkInterfaces\[0\]\.securityGroupIDs: Required value/,
    ],
    [
      'an empty security group id',
      changed(['networkInterfaces', 0, 'securityGroupIDs'], ['sg-1', '']),
      /providerSpec\.networkInterfaces\[0\]\.securityGroupIDs\[1\]: Required value/,
    ],
    [
      'no cluster tag',
      changed(['tags', 'kubernetes.io/cluster/YOUR_CLUSTER_NAME'], undefined),
      /providerSpec\.tags: Required value: a tag of the form kubernetes\.io\/cluster\/<cluster>/,
    ],
    [
      'no role tag',
      changed(['tags', 'kubernetes.io/role/YOUR_ROLE_NAME'], undefined),
      /providerSpec\.tags: Required value: a tag of the form kubernetes\.io\/role\/<role>/,
    ],
    [
      'a volume type EBS does not have',
      changed(['blockDevices', 0, 'ebs', 'volumeType'], 'ssd'),
      /providerSpec\.blockDevices\[0\]\.ebs\.volumeType: Required value: one of gp2, gp3/,
    ],
    [
      'a volume without size',
      changed(['blockDevices', 1, 'ebs', 'volumeSize'], 0),
      /providerSpec\.blockDevices\[1\]\.ebs\.volumeSize: Required value/,
    ],
    [
      'io1 without iops',
      changed(['blockDevices', 1, 'ebs', 'volumeType'], 'io1'),
      /providerSpec\.blockDevices\[1\]\.ebs\.iops: Required value/,
    ],
    [
      'two devices and no /root',
      changed(['blockDevices', 0, 'deviceName'], '/dev/sdc'),
      /exactly one device of providerSpec\.blockDevices must be "\/root"/,
    ],
    [
      'a data device name AWS does not accept',
      changed(['blockDevices', 1, 'deviceName'], '/dev/nvme1'),
      /providerSpec\.blockDevices\[1\]\.deviceName: Invalid value: "\/dev\/nvme1" does not match/,
    ],
    [
      'a hop limit above 64',
      changed(['instanceMetadataOptions', 'httpPutResponseHopLimit'], 65),
      /providerSpec\.instanceMetadataOptions\.httpPutResponseHopLimit: Invalid value: 65/,
    ],
    [
      'httpTokens not required/optional',
      changed(['instanceMetadataOptions', 'httpTokens'], 'always'),
      /providerSpec\.instanceMetadataOptions\.httpTokens: Unsupported value: "always"/,
    ],
    [
      'a wrongly typed field',
      changed(['machineType'], 5),
      /providerSpec\.machineType: Invalid value: must be a string, got 5/,
    ],
    [
      'tags that are not strings',
      changed(['tags', 'tag1'], 1),
      /providerSpec\.tags: Invalid value: must be a map of strings/,
    ],
    [
      'a hostId without host tenancy',
      changed(['placement'], { hostId: 'h-1' }),
      /providerSpec\.placement\.hostId: Invalid value/,
    ],
    [
      'an unknown market type',
      changed(['instanceMarketOptions'], { marketType: 'cheap' }),
      /providerSpec\.instanceMarketOptions\.marketType: Invalid value: "cheap"/,
    ],
  ];
  for (const [what, spec, problem] of invalid) {
    it(`refuses ${what}, naming the field`, () => {
      const r = parseAwsProviderSpec(spec);
      expect(r.ok).to.be.false;
      if (r.ok) return;
      expect(r.problems.join('\n')).to.match(problem);
    });
  }

  it('reports every problem at once', () => {
    const r = parseAwsProviderSpec({ tags: {} });
    expect(r.ok).to.be.false;
    if (r.ok) return;
    const all = r.problems.join('\n');
    for (const field of ['ami', 'region', 'machineType', 'iam', 'networkInterfaces', 'tags']) {
      expect(all).to.include(`providerSpec.${field}:`);
    }
  });

  it('refuses a providerSpec that is not an object', () => {
    expect(parseAwsProviderSpec('ami-1')).to.deep.equal({
      ok: false,
      problems: ['providerSpec: Invalid value: must be an object'],
    });
  });
});
