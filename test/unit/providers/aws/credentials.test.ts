import { gzipSync } from 'node:zlib';

import { expect } from 'chai';

import {
  credentialsFingerprint,
  readCredentials,
  readUserData,
  secretValues,
} from '../../../../lib/providers/aws/credentials.js';
import type { Secret } from '../../../../lib/kube/types.js';
import { b64 } from './fixtures.js';

const secret = (data: Record<string, string>): Secret => ({
  metadata: { name: 's' },
  data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, b64(v)])),
});

describe('AWS provider: credentials and user data from the class Secret', () => {
  const accepted: [string, Record<string, string>, unknown][] = [
    [
      "gardener's keys",
      { providerAccessKeyId: 'AKID1', providerSecretAccessKey: 'SECRET1', userData: 'x' },
      { kind: 'static', accessKeyId: 'AKID1', secretAccessKey: 'SECRET1' },
    ],
    [
      'the alternative keys',
      { accessKeyID: 'AKID2', secretAccessKey: 'SECRET2' },
      { kind: 'static', accessKeyId: 'AKID2', secretAccessKey: 'SECRET2' },
    ],
    [
      "gardener's keys before the alternative ones",
      { providerAccessKeyId: 'A', accessKeyID: 'B', providerSecretAccessKey: 'C', secretAccessKey: 'D' },
      { kind: 'static', accessKeyId: 'A', secretAccessKey: 'C' },
    ],
    [
      'a web identity (token file and role)',
      {
        workloadIdentityTokenFile: '/var/run/token',
        roleARN: 'arn:aws:iam::1:role/r',
        providerAccessKeyId: 'A',
      },
      { kind: 'webIdentity', tokenFile: '/var/run/token', roleARN: 'arn:aws:iam::1:role/r' },
    ],
  ];
  for (const [what, data, want] of accepted) {
    it(`reads ${what}`, () => {
      expect(readCredentials(secret(data))).to.deep.equal({ ok: true, credentials: want });
    });
  }

  const refused: [string, Record<string, string>, RegExp][] = [
    [
      'no access key id',
      { providerSecretAccessKey: 'TOPSECRET' },
      /secretRef\.providerAccessKeyId: Required value/,
    ],
    [
      'no secret key',
      { providerAccessKeyId: 'AKIDVISIBLE' },
      /secretRef\.providerSecretAccessKey: Required value/,
    ],
    ['a token file without role', { workloadIdentityTokenFile: '/t' }, /secretRef\.roleARN: Required value/],
    [
      'an empty token file',
      { workloadIdentityTokenFile: '', roleARN: 'r' },
      /secretRef\.workloadIdentityTokenFile/,
    ],
  ];
  for (const [what, data, problem] of refused) {
    it(`refuses ${what}, naming the key and never a value`, () => {
      const r = readCredentials(secret(data));
      expect(r.ok).to.be.false;
      if (r.ok) return;
      const text = r.problems.join('; ');
      expect(text).to.match(problem);
      for (const v of Object.values(data)) if (v.length > 2) expect(text).not.to.include(v);
    });
  }

  it('reads user data as its bytes, and undefined when it is missing or empty', () => {
    expect(readUserData(secret({ userData: '#cloud-config\n' }))?.toString()).to.equal('#cloud-config\n');
    expect(readUserData(secret({}))).to.be.undefined;
    expect(readUserData(secret({ userData: '' }))).to.be.undefined;
    const gz = gzipSync(Buffer.from('#cloud-config\n'.repeat(30)));
    const s: Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {},
      data: { userData: gz.toString('base64') },
    };
    expect(readUserData(s)?.equals(gz), 'gzipped user data, byte for byte').to.be.true;
  });

  it('fingerprints credentials per region without containing them', () => {
    const c = { kind: 'static' as const, accessKeyId: 'AKIDXYZ', secretAccessKey: 'SECRETXYZ' };
    const f = credentialsFingerprint('eu-west-1', c);
    expect(f).to.match(/^[0-9a-f]{64}$/);
    expect(f).to.equal(credentialsFingerprint('eu-west-1', { ...c }));
    expect(f).not.to.equal(credentialsFingerprint('us-east-1', c));
    expect(f).not.to.equal(credentialsFingerprint('eu-west-1', { ...c, secretAccessKey: 'OTHER' }));
  });

  it('lists the secret values to redact: keys and user data', () => {
    const values = secretValues(
      secret({
        providerAccessKeyId: 'AKID1',
        secretAccessKey: 'SECRET1',
        userData: 'bootstrap-token',
        other: 'x',
      }),
    );
    expect(values.sort()).to.deep.equal(['AKID1', 'SECRET1', 'bootstrap-token']);
  });
});
