import type { PeerCertificate } from 'node:tls';

import { expect } from 'chai';

import {
  RefusalLog,
  clientIdentity,
  describeClient,
  isAllowedClient,
  parseSubjectAltNames,
  type ClientIdentity,
} from '../../../lib/autoscaler/authz.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { CapturingLogger } from '../../../lib/observability/logger.js';

/** The fields of a peer certificate the rule reads, as Node presents them. */
const peer = (subject: Record<string, string | string[]>, subjectaltname?: string): PeerCertificate =>
  ({ subject, ...(subjectaltname === undefined ? {} : { subjectaltname }) }) as unknown as PeerCertificate;

describe('client allowlist (--grpc-client-allowed-names)', () => {
  describe('parseSubjectAltNames reads Node’s subjectaltname string', () => {
    const cases: [string | undefined, { type: string; value: string }[]][] = [
      [undefined, []],
      ['', []],
      ['DNS:a', [{ type: 'DNS', value: 'a' }]],
      [
        'DNS:a.example, DNS:b, IP Address:10.0.0.1, URI:spiffe://x/y',
        [
          { type: 'DNS', value: 'a.example' },
          { type: 'DNS', value: 'b' },
          { type: 'IP Address', value: '10.0.0.1' },
          { type: 'URI', value: 'spiffe://x/y' },
        ],
      ],
      // Node quotes values that hold a separator: one entry, not two.
      [
        'DNS:"cluster-autoscaler\\u002c DNS:admin", DNS:ok',
        [
          { type: 'DNS', value: 'cluster-autoscaler, DNS:admin' },
          { type: 'DNS', value: 'ok' },
        ],
      ],
      ['DNS:"q\\"uote"', [{ type: 'DNS', value: 'q"uote' }]],
      ['DNS:DNS:x', [{ type: 'DNS', value: 'DNS:x' }]],
    ];
    for (const [input, want] of cases) {
      it(input === undefined ? 'no subjectaltname' : JSON.stringify(input), () => {
        expect(parseSubjectAltNames(input)).to.deep.equal(want);
      });
    }
  });

  describe('isAllowedClient matches the subject CN or a DNS SAN exactly', () => {
    const allowed = new Set(['cluster-autoscaler', 'ca.kube-system.svc']);
    const cases: [string, PeerCertificate | undefined, boolean][] = [
      ['the CN listed', peer({ CN: 'cluster-autoscaler' }), true],
      ['a DNS SAN listed', peer({ CN: 'other' }, 'DNS:x, DNS:ca.kube-system.svc'), true],
      ['neither', peer({ CN: 'intruder', O: 'cluster-autoscaler' }, 'DNS:intruder'), false],
      ['another case', peer({ CN: 'Cluster-Autoscaler' }), false],
      ['a suffix', peer({ CN: 'x.cluster-autoscaler' }, 'DNS:x.ca.kube-system.svc'), false],
      ['a prefix', peer({ CN: 'cluster-autoscaler-2' }), false],
      [
        'a listed name as an IP or URI SAN',
        peer({ CN: 'x' }, 'URI:cluster-autoscaler, IP Address:1.2.3.4'),
        false,
      ],
      [
        'a quoted DNS SAN smuggling a listed name',
        peer({ CN: 'x' }, 'DNS:"evil\\u002c DNS:cluster-autoscaler"'),
        false,
      ],
      ['one of repeated CNs', peer({ CN: ['x', 'cluster-autoscaler'] }), true],
      ['no common name and no SAN', peer({ O: 'org' }), false],
      ['no verified certificate', undefined, false],
    ];
    for (const [what, cert, want] of cases) {
      it(`${want ? 'allows' : 'refuses'} ${what}`, () => {
        expect(isAllowedClient(clientIdentity(cert), allowed)).to.equal(want);
      });
    }
    it('allows every client when the list is empty (the default: any certificate the client CA signed)', () => {
      expect(isAllowedClient(clientIdentity(peer({ CN: 'anyone' })), new Set())).to.equal(true);
      expect(isAllowedClient(undefined, new Set())).to.equal(true);
    });
  });

  it('describeClient names the presented identity only', () => {
    const id: ClientIdentity = { commonNames: ['intruder'], dnsNames: ['a', 'b"c'] };
    expect(describeClient(id)).to.equal('CN="intruder", DNS:"a", DNS:"b\\"c"');
    expect(describeClient(undefined)).to.equal('no verified client certificate');
    expect(describeClient({ commonNames: [], dnsNames: [] })).to.contain('without a common name');
  });

  it('RefusalLog writes one info line per identity a minute, then counts the calls refused meanwhile', async () => {
    const clock = new FakeClock();
    const logger = new CapturingLogger();
    const log = new RefusalLog(clock, logger);
    for (let i = 0; i < 1000; i++) log.refused('CN="intruder"', 'NodeGroupForNode');
    log.refused('CN="other"', 'NodeGroups');
    expect(logger.lines.map((l) => [l.level, l.fields.client])).to.deep.equal([
      ['info', 'CN="intruder"'],
      ['info', 'CN="other"'],
    ]);
    await clock.advance(59_000);
    log.refused('CN="intruder"', 'NodeGroupForNode');
    expect(logger.lines).to.have.length(2);
    await clock.advance(1_000);
    log.refused('CN="intruder"', 'NodeGroupDeleteNodes');
    expect(logger.lines).to.have.length(3);
    expect(logger.lines[2]?.fields).to.include({
      client: 'CN="intruder"',
      method: 'NodeGroupDeleteNodes',
      refusedSinceLastLine: 1001,
    });
  });
});
