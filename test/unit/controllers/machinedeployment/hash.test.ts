import { expect } from 'chai';

import type { MachineTemplateSpec } from '../../../../lib/api/types.js';
import {
  encodeHash,
  fnv32a,
  machineSetName,
  stableStringify,
  templateHash,
  templatesEqualIgnoringHash,
} from '../../../../lib/api/template.js';

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

const base = (): MachineTemplateSpec => ({
  metadata: { labels: { app: 'worker', name: 'md' }, annotations: { team: 'a' } },
  spec: {
    class: { kind: 'MachineClass', name: 'small' },
    nodeTemplate: { metadata: { labels: { role: 'worker' } } },
    drainTimeout: '10m',
  },
});

const change = (fn: (t: MachineTemplateSpec) => void): MachineTemplateSpec => {
  const t = base();
  fn(t);
  return t;
};

describe('machinedeployment hash', () => {
  it('computes 32-bit FNV-1a', () => {
    // Reference values of the FNV-1a specification.
    expect(fnv32a('')).to.equal(0x811c9dc5);
    expect(fnv32a('a')).to.equal(0xe40c292c);
    expect(fnv32a('foobar')).to.equal(0xbf9cf968);
  });

  describe('templatesEqualIgnoringHash decides whether a template change rolls machines', () => {
    const cases: { name: string; other: MachineTemplateSpec; equal: boolean }[] = [
      { name: 'identical templates', other: base(), equal: true },
      {
        name: 'template-hash label differs',
        other: change(
          (t) =>
            ((t.metadata ??= {}).labels = { ...(t.metadata.labels ?? {}), 'machine-template-hash': '123' }),
        ),
        equal: true,
      },
      {
        name: 'node template differs',
        other: change((t) => ((t.spec ??= {}).nodeTemplate = { metadata: { labels: { role: 'gpu' } } })),
        equal: true,
      },
      {
        name: 'machine configuration differs',
        other: change((t) => ((t.spec ??= {}).drainTimeout = '1h')),
        equal: true,
      },
      {
        name: 'health timeout added',
        other: change((t) => ((t.spec ??= {}).healthTimeout = '5m')),
        equal: true,
      },
      {
        name: 'class kind differs',
        other: change((t) => ((t.spec ??= {}).class = { kind: 'OtherClass', name: 'small' })),
        equal: true,
      },
      {
        name: 'class name differs',
        other: change((t) => ((t.spec ??= {}).class = { kind: 'MachineClass', name: 'large' })),
        equal: false,
      },
      {
        name: 'template label differs',
        other: change((t) => ((t.metadata ??= {}).labels = { app: 'worker', name: 'md', tier: 'x' })),
        equal: false,
      },
      {
        name: 'template annotation differs',
        other: change((t) => ((t.metadata ??= {}).annotations = { team: 'b' })),
        equal: false,
      },
      {
        name: 'a label with an empty value is still a label',
        other: change((t) => ((t.metadata ??= {}).labels = { app: 'worker', name: 'md', empty: '' })),
        equal: false,
      },
      {
        name: 'every template annotation removed',
        other: change((t) => ((t.metadata ??= {}).annotations = {})),
        equal: false,
      },
    ];
    for (const c of cases) {
      it(`${c.name}: ${c.equal ? 'same' : 'different'} machines`, () => {
        expect(templatesEqualIgnoringHash(base(), c.other)).to.equal(c.equal);
        expect(templatesEqualIgnoringHash(c.other, base())).to.equal(c.equal);
      });
    }

    it('gives the same answers for frozen templates (as the informers cache them), asked again and again', () => {
      const frozenBase = deepFreeze(base());
      const frozen = cases.map((c) => ({ ...c, other: deepFreeze(structuredClone(c.other)) }));
      for (let round = 0; round < 2; round++) {
        for (const c of frozen) {
          expect(templatesEqualIgnoringHash(frozenBase, c.other), `${c.name}, round ${round}`).to.equal(
            c.equal,
          );
          expect(templatesEqualIgnoringHash(c.other, frozenBase), `${c.name}, round ${round}`).to.equal(
            c.equal,
          );
          expect(templateHash(c.other), `${c.name}: the hash of the frozen copy`).to.equal(
            templateHash(structuredClone(c.other)),
          );
        }
      }
    });

    it('treats missing and empty fields alike', () => {
      const a: MachineTemplateSpec = { metadata: { labels: { a: 'b' } }, spec: { class: { name: 'x' } } };
      const b: MachineTemplateSpec = {
        metadata: { labels: { a: 'b' }, annotations: {} },
        spec: { class: { name: 'x', apiGroup: '' } },
      };
      expect(templatesEqualIgnoringHash(a, b)).to.equal(true);
    });
  });

  describe('templateHash', () => {
    it('is stable across key order and ignores fields that change in place', () => {
      const reordered: MachineTemplateSpec = {
        spec: { drainTimeout: '2h', class: { name: 'small', kind: 'X' } },
        metadata: {
          annotations: { team: 'a' },
          labels: { name: 'md', app: 'worker', 'machine-template-hash': '1' },
        },
      };
      expect(templateHash(reordered)).to.equal(templateHash(base()));
    });

    it('changes with the rollout-relevant template and with the collision count', () => {
      const h = templateHash(base());
      expect(
        templateHash(change((t) => ((t.spec ??= {}).class = { kind: 'MachineClass', name: 'large' }))),
      ).to.not.equal(h);
      expect(templateHash(base(), 1)).to.not.equal(h);
      expect(templateHash(base(), 1)).to.not.equal(templateHash(base(), 2));
      expect(h).to.match(/^\d+$/);
    });
  });

  it('names a machine set <deployment>-<5 name-safe characters>', () => {
    const name = machineSetName('workers', templateHash(base()));
    expect(name).to.match(/^workers-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    expect(machineSetName('workers', '4294967295')).to.equal(
      `workers-${encodeHash('4294967295').slice(0, 5)}`,
    );
  });

  it('serialises values stably (the input of the hash)', () => {
    expect(stableStringify({ b: 1, a: { d: 1, c: 2 } })).to.equal('{"a":{"c":2,"d":1},"b":1}');
  });
});
