import { expect } from 'chai';

import {
  bootstrapTokenId,
  bootstrapTokenSecretName,
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
  it('derives MCM’s token id from the last five bytes of the machine name', () => {
    // "abcde" = 61 62 63 64 65 → hex "6162636465" → first six "616263".
    expect(bootstrapTokenId('pool-xyz-abcde')).to.equal('616263');
    expect(bootstrapTokenSecretName('pool-xyz-abcde')).to.equal('bootstrap-token-616263');
    expect(bootstrapTokenId('ab')).to.equal('616200');
  });

  it('fills plain and URL-encoded placeholders', () => {
    const ud = 'name=<<MACHINE_NAME>> token=<<BOOTSTRAP_TOKEN>> url=%3C%3CBOOTSTRAP_TOKEN%3E%3E';
    expect(needsBootstrapToken(ud)).to.be.true;
    expect(substituteUserData(ud, 'm-1', 'abc.def')).to.equal('name=m-1 token=abc.def url=abc.def');
    expect(needsBootstrapToken('name=<<MACHINE_NAME>>')).to.be.false;
  });

  it('resolves replacement budgets given as counts or percentages of the replicas', () => {
    expect(resolveBudget('1', 10)).to.equal(1);
    expect(resolveBudget('25%', 10)).to.equal(2);
    expect(resolveBudget('0', 10)).to.equal(0);
    expect(resolveBudget('lots', 10)).to.equal(undefined);
  });

  it('creates the token again when the Secret it collided with is deleted before it is read', async () => {
    // Two machines whose names end alike share a token id; the other one may delete the shared
    // Secret (after joining) between our AlreadyExists and our read.
    const api = new FakeKube();
    let creates = 0;
    api.react((a) => {
      if (a.verb === 'create' && a.resource === 'secrets' && ++creates === 1)
        return new AlreadyExistsError(
          'secrets "bootstrap-token-616263" already exists',
          409,
          'AlreadyExists',
        );
      return undefined;
    });
    const token = await ensureBootstrapToken(api, 'pool-xyz-abcde', Date.UTC(2026, 10, 23), '');
    expect(token).to.match(/^616263\.[a-z0-9]{16}$/);
    expect(api.actions.map((x) => `${x.verb} ${x.resource}`)).to.deep.equal([
      'create secrets',
      'get secrets',
      'create secrets',
    ]);
    const stored = api.peek<Secret>(CoreResources.secrets, 'bootstrap-token-616263', 'kube-system');
    expect(Buffer.from(stored?.data?.['token-id'] ?? '', 'base64').toString()).to.equal('616263');
  });
});
