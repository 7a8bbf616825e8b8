import { gunzipSync, gzipSync } from 'node:zlib';

import { expect } from 'chai';

import {
  TOKEN_MACHINE_UID_LABEL,
  bootstrapTokenIds,
  bootstrapTokenSecretName,
  deleteBootstrapToken,
  ensureBootstrapToken,
  needsBootstrapToken,
  substituteUserData,
} from '../../../../lib/controllers/machine/bootstrap.js';
import { resolveBudget } from '../../../../lib/controllers/machine/settings.js';
import { AlreadyExistsError } from '../../../../lib/kube/errors.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Secret } from '../../../../lib/kube/types.js';
import { FakeKube } from '../../../fakes/kube.js';

describe('user data and bootstrap tokens', () => {
  it('gives every machine token ids of its own, from its UID: stable for one machine, distinct across 1,000', () => {
    const a = bootstrapTokenIds({ name: 'pool-xyz-abcde', uid: 'uid-a' });
    expect(a).to.have.length(3);
    for (const id of a) expect(id).to.match(/^[a-z0-9]{6}$/);
    expect(bootstrapTokenIds({ name: 'pool-xyz-abcde', uid: 'uid-a' }), 'stable').to.deep.equal(a);
    // MCM's ids come from the name's end: these two would share one.
    expect(bootstrapTokenIds({ name: 'other-abcde', uid: 'uid-b' })[0]).to.not.equal(a[0]);
    const firsts = new Set(
      Array.from({ length: 1000 }, (_, i) => bootstrapTokenIds({ name: 'pool-abcde', uid: `uid-${i}` })[0]),
    );
    expect(firsts.size).to.equal(1000);
    expect(bootstrapTokenSecretName('k3x9z0')).to.equal('bootstrap-token-k3x9z0');
  });

  it('fills plain and URL-encoded placeholders', () => {
    const ud = Buffer.from('name=<<MACHINE_NAME>> token=<<BOOTSTRAP_TOKEN>> url=%3C%3CBOOTSTRAP_TOKEN%3E%3E');
    expect(needsBootstrapToken(ud)).to.be.true;
    expect(substituteUserData(ud, 'm-1', 'abc.def').toString()).to.equal(
      'name=m-1 token=abc.def url=abc.def',
    );
    expect(needsBootstrapToken(Buffer.from('name=<<MACHINE_NAME>>'))).to.be.false;
  });

  it('keeps gzipped user data byte for byte (no placeholder can be seen in it)', () => {
    const gz = gzipSync(Buffer.from('#cloud-config\nruncmd: [join <<BOOTSTRAP_TOKEN>>]\n'.repeat(40)));
    // gzip output is not valid UTF-8: a text round trip would replace bytes with U+FFFD.
    expect(Buffer.from(gz.toString('utf8'), 'utf8').equals(gz), 'the bytes are not text').to.be.false;
    const out = substituteUserData(gz, 'm-1', 'abc.def');
    expect(out.equals(gz)).to.be.true;
    expect(gunzipSync(out).toString()).to.include('<<BOOTSTRAP_TOKEN>>');
  });

  it('replaces placeholders between bytes that are not UTF-8 and keeps those bytes', () => {
    const raw = Buffer.concat([
      Buffer.from([0xff, 0xfe, 0x80]),
      Buffer.from('<<BOOTSTRAP_TOKEN>>'),
      Buffer.from([0xc3]),
      Buffer.from('<<MACHINE_NAME>>'),
      Buffer.from([0x00, 0x9f]),
    ]);
    expect(needsBootstrapToken(raw)).to.be.true;
    const out = substituteUserData(raw, 'm-1', 'abc.def');
    expect([...out]).to.deep.equal([
      0xff,
      0xfe,
      0x80,
      ...Buffer.from('abc.def'),
      0xc3,
      ...Buffer.from('m-1'),
      0x00,
      0x9f,
    ]);
  });

  it('resolves replacement budgets given as counts or percentages of the replicas', () => {
    expect(resolveBudget('1', 10)).to.equal(1);
    expect(resolveBudget('25%', 10)).to.equal(2);
    expect(resolveBudget('0', 10)).to.equal(0);
    expect(resolveBudget('lots', 10)).to.equal(undefined);
  });

  it('creates the token again when its Secret is deleted between AlreadyExists and the read', async () => {
    const api = new FakeKube();
    const owner = { name: 'pool-xyz-abcde', uid: 'uid-a' };
    const [id] = bootstrapTokenIds(owner);
    let creates = 0;
    api.react((a) => {
      if (a.verb === 'create' && a.resource === 'secrets' && ++creates === 1)
        return new AlreadyExistsError(
          `secrets "bootstrap-token-${id ?? ''}" already exists`,
          409,
          'AlreadyExists',
        );
      return undefined;
    });
    const { token } = await ensureBootstrapToken(api, owner, Date.UTC(2026, 10, 23), '');
    expect(token).to.match(new RegExp(`^${id ?? ''}\\.[a-z0-9]{16}$`));
    expect(api.actions.map((x) => `${x.verb} ${x.resource}`)).to.deep.equal([
      'create secrets',
      'get secrets',
      'create secrets',
    ]);
    const stored = api.peek<Secret>(CoreResources.secrets, `bootstrap-token-${id ?? ''}`, 'kube-system');
    expect(Buffer.from(stored?.data?.['token-id'] ?? '', 'base64').toString()).to.equal(id);
    expect(stored?.metadata.labels?.[TOKEN_MACHINE_UID_LABEL]).to.equal('uid-a');
  });

  it('reuses its own token on a retried creation, skips an id another machine holds, and deletes only its own', async () => {
    const api = new FakeKube();
    const mine = { name: 'm1', uid: 'uid-m1' };
    const [first, second] = bootstrapTokenIds(mine);
    // Another machine's token sits on m1's first id (a collision).
    const other: Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: `bootstrap-token-${first ?? ''}`,
        namespace: 'kube-system',
        uid: 'secret-other',
        labels: { [TOKEN_MACHINE_UID_LABEL]: 'uid-other' },
      },
      type: 'bootstrap.kubernetes.io/token',
      data: { 'token-secret': Buffer.from('othersecret00000').toString('base64') },
    };
    api.seed(CoreResources.secrets, other);
    const { token } = await ensureBootstrapToken(api, mine, Date.UTC(2026, 10, 23), '');
    expect(token.startsWith(`${second ?? ''}.`), 'the second candidate').to.equal(true);
    expect(
      (await ensureBootstrapToken(api, mine, Date.UTC(2026, 10, 23), '')).token,
      'a retry: the same token',
    ).to.equal(token);
    await deleteBootstrapToken(api, mine);
    expect(
      api.peek<Secret>(CoreResources.secrets, `bootstrap-token-${second ?? ''}`, 'kube-system'),
    ).to.equal(undefined);
    expect(
      api.peek<Secret>(CoreResources.secrets, `bootstrap-token-${first ?? ''}`, 'kube-system'),
      "the other machine's token stays",
    ).to.not.equal(undefined);
  });

  it('deletes the token Secret it created by that Secret’s UID, without reading it first', async () => {
    const api = new FakeKube();
    const owner = { name: 'm1', uid: 'uid-m1' };
    const made = await ensureBootstrapToken(api, owner, Date.UTC(2026, 10, 23), '');
    api.clearActions();
    await deleteBootstrapToken(api, owner, made.secret);
    expect(api.actions.map((x) => `${x.verb} ${x.resource}`)).to.deep.equal(['delete secrets']);
    expect(api.peek<Secret>(CoreResources.secrets, made.secret.name, 'kube-system')).to.equal(undefined);
  });

  it('leaves alone a Secret that replaced the remembered one under the same name, and deletes none of another machine', async () => {
    const api = new FakeKube();
    const owner = { name: 'm1', uid: 'uid-m1' };
    const made = await ensureBootstrapToken(api, owner, Date.UTC(2026, 10, 23), '');
    // The token expired and went; another machine's token now holds the name.
    await api.delete(CoreResources.secrets, made.secret.name, { namespace: 'kube-system' });
    api.seed(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: made.secret.name,
        namespace: 'kube-system',
        uid: 'secret-other',
        labels: { [TOKEN_MACHINE_UID_LABEL]: 'uid-other' },
      },
      type: 'bootstrap.kubernetes.io/token',
    } as Secret);
    await deleteBootstrapToken(api, owner, made.secret);
    expect(
      api.peek<Secret>(CoreResources.secrets, made.secret.name, 'kube-system')?.metadata.uid,
      "the other machine's token stays",
    ).to.equal('secret-other');
  });
});
