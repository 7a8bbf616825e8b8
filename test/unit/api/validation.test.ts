import { expect } from 'chai';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { loadAllYaml } from '@kubernetes/client-node';

import type {
  Machine,
  MachineClass,
  MachineDeployment,
  MachineSet,
  MachineTemplateSpec,
} from '../../../lib/api/types.js';
import {
  BOTH_ZERO_MESSAGE,
  DURATION_MESSAGE,
  INT_OR_PERCENT_MESSAGE,
  IN_PLACE_UPDATE_REQUIRED_MESSAGE,
  NON_NEGATIVE_MESSAGE,
  ORCHESTRATION_TYPE_REQUIRED_MESSAGE,
  QUANTITY_MESSAGE,
  ROLLING_UPDATE_REQUIRED_MESSAGE,
  SELECTOR_VALUES_FORBIDDEN_MESSAGE,
  SELECTOR_VALUES_REQUIRED_MESSAGE,
  formatValidationErrors,
  isGoDuration,
  selectorMismatchMessage,
  type FieldError,
  unmatchedSelectorLabels,
  validateMachine,
  validateMachineClass,
  validateMachineDeployment,
  validateMachineSet,
} from '../../../lib/api/validation.js';

function template(): MachineTemplateSpec {
  return {
    metadata: { labels: { name: 'pool-a', extra: 'x' } },
    spec: {
      class: { kind: 'MachineClass', name: 'class-a' },
      drainTimeout: '2h0m0s',
      healthTimeout: '10m',
      nodeTemplate: { spec: { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] } },
    },
  };
}

function machineDeployment(): MachineDeployment {
  return {
    metadata: { name: 'pool-a', namespace: 'default' },
    spec: {
      replicas: 3,
      selector: { matchLabels: { name: 'pool-a' } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: template(),
    },
  };
}

function machineSet(): MachineSet {
  return {
    metadata: { name: 'pool-a-abcde', namespace: 'default' },
    spec: { replicas: 2, selector: { matchLabels: { name: 'pool-a' } }, template: template() },
  };
}

function machine(): Machine {
  return { metadata: { name: 'm-1', namespace: 'default' }, spec: template().spec ?? {} };
}

function machineClass(): MachineClass {
  return {
    metadata: { name: 'class-a', namespace: 'default' },
    provider: 'local',
    providerSpec: { image: 'registry/node:1' },
    secretRef: { name: 'class-a', namespace: 'default' },
    nodeTemplate: {
      capacity: { cpu: '2', memory: '8Gi', gpu: 0 },
      instanceType: 'local',
      region: 'local',
      zone: 'local-1',
    },
  };
}

/** Applies `mutate` to a fresh valid object and returns the validation result. */
function mutated<T>(
  factory: () => T,
  mutate: (obj: T) => void,
  validate: (obj: T) => FieldError[],
): FieldError[] {
  const obj = factory();
  mutate(obj);
  return validate(obj);
}

function expectError(errs: FieldError[], field: string, messageFragment: string): void {
  const match = errs.find((e) => e.field === field && e.message.includes(messageFragment));
  expect(match, `expected ${field}: …${messageFragment}… in ${JSON.stringify(errs)}`).to.not.equal(undefined);
}

function spec(md: MachineDeployment): NonNullable<MachineDeployment['spec']> {
  if (md.spec === undefined) throw new Error('fixture has no spec');
  return md.spec;
}

function msSpec(ms: MachineSet): NonNullable<MachineSet['spec']> {
  if (ms.spec === undefined) throw new Error('fixture has no spec');
  return ms.spec;
}

// Compiled to dist/test/unit/api/, four levels below the repository root.
const fixtureDir = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  '..',
  'test',
  'fixtures',
  'gardener',
);

function validateAny(obj: { kind?: unknown }): FieldError[] {
  switch (obj.kind) {
    case 'MachineClass':
      return validateMachineClass(obj as MachineClass);
    case 'Machine':
      return validateMachine(obj as Machine);
    case 'MachineSet':
      return validateMachineSet(obj as MachineSet);
    case 'MachineDeployment':
      return validateMachineDeployment(obj as MachineDeployment);
    default:
      throw new Error(`unexpected kind ${String(obj.kind)}`);
  }
}

describe('lib/api/validation', () => {
  describe('gardener-format fixtures', () => {
    const files = readdirSync(fixtureDir).filter((f) => f.endsWith('.yaml'));

    it('exist for every kind', () => {
      const kinds = files.flatMap((f) =>
        (loadAllYaml(readFileSync(path.join(fixtureDir, f), 'utf8')) as { kind?: string }[]).map(
          (o) => o.kind,
        ),
      );
      expect(new Set(kinds)).to.deep.equal(
        new Set(['MachineClass', 'Machine', 'MachineSet', 'MachineDeployment']),
      );
    });

    for (const file of files) {
      it(`${file} is valid`, () => {
        for (const obj of loadAllYaml(readFileSync(path.join(fixtureDir, file), 'utf8')) as {
          kind?: unknown;
        }[]) {
          expect(validateAny(obj)).to.deep.equal([]);
        }
      });
    }
  });

  describe('valid objects', () => {
    it('accepts a well-formed MachineDeployment', () => {
      expect(validateMachineDeployment(machineDeployment())).to.deep.equal([]);
    });
    it('accepts a well-formed MachineSet', () => {
      expect(validateMachineSet(machineSet())).to.deep.equal([]);
    });
    it('accepts a well-formed Machine', () => {
      expect(validateMachine(machine())).to.deep.equal([]);
    });
    it('accepts a well-formed MachineClass', () => {
      expect(validateMachineClass(machineClass())).to.deep.equal([]);
    });
    it('accepts an empty selector (MCM only warns about it)', () => {
      const errs = mutated(machineDeployment, (md) => (spec(md).selector = {}), validateMachineDeployment);
      expect(errs).to.deep.equal([]);
    });
    it('accepts a Recreate deployment without rollingUpdate block', () => {
      const errs = mutated(
        machineDeployment,
        (md) => (spec(md).strategy = { type: 'Recreate' }),
        validateMachineDeployment,
      );
      expect(errs).to.deep.equal([]);
    });
    it('accepts a Recreate deployment with a partial, inactive rollingUpdate block', () => {
      const errs = mutated(
        machineDeployment,
        (md) => (spec(md).strategy = { type: 'Recreate', rollingUpdate: { maxSurge: 1 } }),
        validateMachineDeployment,
      );
      expect(errs).to.deep.equal([]);
    });
    it('accepts an InPlaceUpdate deployment with Manual orchestration', () => {
      const errs = mutated(
        machineDeployment,
        (md) =>
          (spec(md).strategy = {
            type: 'InPlaceUpdate',
            inPlaceUpdate: { maxSurge: 0, maxUnavailable: '50%', orchestrationType: 'Manual' },
          }),
        validateMachineDeployment,
      );
      expect(errs).to.deep.equal([]);
    });
    it('accepts percentages and zero replicas', () => {
      const errs = mutated(
        machineDeployment,
        (md) => {
          spec(md).replicas = 0;
          spec(md).strategy = {
            type: 'RollingUpdate',
            rollingUpdate: { maxSurge: '25%', maxUnavailable: '0%' },
          };
        },
        validateMachineDeployment,
      );
      expect(errs).to.deep.equal([]);
    });
  });

  describe('MachineDeployment rules', () => {
    const cases: [string, (md: MachineDeployment) => void, string, string][] = [
      ['negative replicas', (md) => (spec(md).replicas = -1), 'spec.replicas', NON_NEGATIVE_MESSAGE],
      [
        'negative minReadySeconds',
        (md) => (spec(md).minReadySeconds = -5),
        'spec.minReadySeconds',
        NON_NEGATIVE_MESSAGE,
      ],
      [
        'negative revisionHistoryLimit',
        (md) => (spec(md).revisionHistoryLimit = -1),
        'spec.revisionHistoryLimit',
        NON_NEGATIVE_MESSAGE,
      ],
      [
        'negative progressDeadlineSeconds',
        (md) => (spec(md).progressDeadlineSeconds = -1),
        'spec.progressDeadlineSeconds',
        NON_NEGATIVE_MESSAGE,
      ],
      ['missing strategy', (md) => delete spec(md).strategy, 'spec.strategy', 'Required value'],
      ['missing strategy type', (md) => (spec(md).strategy = {}), 'spec.strategy.type', 'Required value'],
      [
        'unknown strategy type',
        (md) => (spec(md).strategy = { type: 'BlueGreen' as 'Recreate' }),
        'spec.strategy.type',
        'Unsupported value: "BlueGreen": supported values: "Recreate", "RollingUpdate", "InPlaceUpdate"',
      ],
      [
        'RollingUpdate without rollingUpdate block',
        (md) => (spec(md).strategy = { type: 'RollingUpdate' }),
        'spec.strategy.rollingUpdate',
        ROLLING_UPDATE_REQUIRED_MESSAGE,
      ],
      [
        'RollingUpdate without maxSurge',
        (md) => (spec(md).strategy = { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } }),
        'spec.strategy.rollingUpdate.maxSurge',
        'spec.strategy.rollingUpdate.maxSurge is required when spec.strategy.type is RollingUpdate',
      ],
      [
        'RollingUpdate without maxUnavailable',
        (md) => (spec(md).strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1 } }),
        'spec.strategy.rollingUpdate.maxUnavailable',
        'is required when spec.strategy.type is RollingUpdate',
      ],
      [
        'maxSurge and maxUnavailable both 0',
        (md) =>
          (spec(md).strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: 0 } }),
        'spec.strategy.rollingUpdate',
        BOTH_ZERO_MESSAGE,
      ],
      [
        'maxSurge "0%" and maxUnavailable 0',
        (md) =>
          (spec(md).strategy = {
            type: 'RollingUpdate',
            rollingUpdate: { maxSurge: '0%', maxUnavailable: 0 },
          }),
        'spec.strategy.rollingUpdate',
        BOTH_ZERO_MESSAGE,
      ],
      [
        'both zero in an inPlaceUpdate block',
        (md) =>
          (spec(md).strategy = {
            type: 'InPlaceUpdate',
            inPlaceUpdate: { maxSurge: '0%', maxUnavailable: '0%', orchestrationType: 'Auto' },
          }),
        'spec.strategy.inPlaceUpdate',
        BOTH_ZERO_MESSAGE,
      ],
      [
        'integer string without percent sign',
        (md) =>
          (spec(md).strategy = {
            type: 'RollingUpdate',
            rollingUpdate: { maxSurge: '1', maxUnavailable: 0 },
          }),
        'spec.strategy.rollingUpdate.maxSurge',
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'negative maxUnavailable',
        (md) =>
          (spec(md).strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: -1 } }),
        'spec.strategy.rollingUpdate.maxUnavailable',
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'signed percentage',
        (md) =>
          (spec(md).strategy = {
            type: 'RollingUpdate',
            rollingUpdate: { maxSurge: '+5%', maxUnavailable: 0 },
          }),
        'spec.strategy.rollingUpdate.maxSurge',
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'percentage that overflows int32 once scaled (MCM rule)',
        (md) => {
          spec(md).replicas = 1000;
          spec(md).strategy = {
            type: 'RollingUpdate',
            rollingUpdate: { maxSurge: '9999999999%', maxUnavailable: 0 },
          };
        },
        'spec.strategy.rollingUpdate.maxSurge',
        'unable to convert maxSurge to int32',
      ],
      [
        'malformed value in an inactive block',
        (md) =>
          (spec(md).strategy = { type: 'Recreate', rollingUpdate: { maxSurge: 'lots', maxUnavailable: 0 } }),
        'spec.strategy.rollingUpdate.maxSurge',
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'InPlaceUpdate without inPlaceUpdate block',
        (md) => (spec(md).strategy = { type: 'InPlaceUpdate' }),
        'spec.strategy.inPlaceUpdate',
        IN_PLACE_UPDATE_REQUIRED_MESSAGE,
      ],
      [
        'InPlaceUpdate without orchestrationType',
        (md) =>
          (spec(md).strategy = { type: 'InPlaceUpdate', inPlaceUpdate: { maxSurge: 1, maxUnavailable: 1 } }),
        'spec.strategy.inPlaceUpdate.orchestrationType',
        ORCHESTRATION_TYPE_REQUIRED_MESSAGE,
      ],
      [
        'unknown orchestrationType',
        (md) =>
          (spec(md).strategy = {
            type: 'InPlaceUpdate',
            inPlaceUpdate: { maxSurge: 1, maxUnavailable: 1, orchestrationType: 'Sometimes' as 'Auto' },
          }),
        'spec.strategy.inPlaceUpdate.orchestrationType',
        'Unsupported value: "Sometimes": supported values: "Auto", "Manual"',
      ],
      [
        'selector label missing from the template',
        (md) => (spec(md).selector = { matchLabels: { name: 'pool-a', role: 'gpu' } }),
        'spec.selector.matchLabels',
        'spec.selector does not match spec.template.metadata.labels: the template lacks role=gpu',
      ],
      [
        'selector label with a different value in the template',
        (md) => (spec(md).selector = { matchLabels: { name: 'pool-b' } }),
        'spec.selector.matchLabels',
        'the template lacks name=pool-b',
      ],
      [
        'template without labels but a selector with matchLabels',
        (md) => delete spec(md).template.metadata,
        'spec.selector.matchLabels',
        'the template lacks name=pool-a',
      ],
      ['missing selector', (md) => delete spec(md).selector, 'spec.selector', 'Required value'],
      [
        'In requirement without values',
        (md) => (spec(md).selector = { matchExpressions: [{ key: 'zone', operator: 'In', values: [] }] }),
        'spec.selector.matchExpressions[0].values',
        SELECTOR_VALUES_REQUIRED_MESSAGE,
      ],
      [
        'Exists requirement with values',
        (md) =>
          (spec(md).selector = { matchExpressions: [{ key: 'zone', operator: 'Exists', values: ['a'] }] }),
        'spec.selector.matchExpressions[0].values',
        SELECTOR_VALUES_FORBIDDEN_MESSAGE,
      ],
      [
        'unknown selector operator',
        (md) => (spec(md).selector = { matchExpressions: [{ key: 'zone', operator: 'Near' as 'In' }] }),
        'spec.selector.matchExpressions[0].operator',
        'Unsupported value: "Near"',
      ],
      [
        'template without class name',
        (md) => (spec(md).template.spec = { class: { kind: 'MachineClass' } }),
        'spec.template.spec.class.name',
        'name of the referenced class is required',
      ],
      [
        'template without class kind (MCM rule)',
        (md) => (spec(md).template.spec = { class: { name: 'class-a' } }),
        'spec.template.spec.class.kind',
        'kind of the referenced class is required',
      ],
      [
        'template without spec',
        (md) => delete spec(md).template.spec,
        'spec.template.spec',
        'Required value',
      ],
      [
        'malformed duration in the template',
        (md) => {
          const s = spec(md).template.spec;
          if (s !== undefined) s.drainTimeout = '2 hours';
        },
        'spec.template.spec.drainTimeout',
        DURATION_MESSAGE,
      ],
      [
        'template label value longer than 63 characters',
        (md) => {
          const labels = { name: 'pool-a', long: 'x'.repeat(64) };
          spec(md).template.metadata = { labels };
        },
        'spec.template.metadata.labels.long',
        'no more than 63 characters',
      ],
      [
        'taint with an unknown effect',
        (md) => {
          const s = spec(md).template.spec;
          if (s !== undefined)
            s.nodeTemplate = { spec: { taints: [{ key: 'k', effect: 'NoWay' as 'NoSchedule' }] } };
        },
        'spec.template.spec.nodeTemplate.spec.taints[0].effect',
        'Unsupported value: "NoWay"',
      ],
    ];
    for (const [name, mutate, field, message] of cases) {
      it(`rejects ${name} at ${field}`, () => {
        expectError(mutated(machineDeployment, mutate, validateMachineDeployment), field, message);
      });
    }

    it('rejects a MachineDeployment without spec', () => {
      expect(validateMachineDeployment({ metadata: { name: 'x' } })).to.deep.equal([
        { field: 'spec', message: 'Required value' },
      ]);
    });
  });

  describe('MachineSet rules', () => {
    const cases: [string, (ms: MachineSet) => void, string, string][] = [
      ['negative replicas', (ms) => (msSpec(ms).replicas = -3), 'spec.replicas', NON_NEGATIVE_MESSAGE],
      [
        'negative minReadySeconds',
        (ms) => (msSpec(ms).minReadySeconds = -1),
        'spec.minReadySeconds',
        NON_NEGATIVE_MESSAGE,
      ],
      [
        'selector not matching template labels',
        (ms) => (msSpec(ms).selector = { matchLabels: { 'machine-template-hash': '123' } }),
        'spec.selector.matchLabels',
        'spec.selector does not match spec.template.metadata.labels: the template lacks machine-template-hash=123',
      ],
      ['missing selector', (ms) => delete msSpec(ms).selector, 'spec.selector', 'Required value'],
      ['missing template', (ms) => delete msSpec(ms).template, 'spec.template', 'Required value'],
      [
        'template class without name',
        (ms) =>
          (msSpec(ms).template = { ...template(), spec: { class: { kind: 'MachineClass', name: '' } } }),
        'spec.template.spec.class.name',
        'is required',
      ],
    ];
    for (const [name, mutate, field, message] of cases) {
      it(`rejects ${name} at ${field}`, () => {
        expectError(mutated(machineSet, mutate, validateMachineSet), field, message);
      });
    }

    it('does not validate the legacy spec.machineClass reference', () => {
      const errs = mutated(machineSet, (ms) => (msSpec(ms).machineClass = {}), validateMachineSet);
      expect(errs).to.deep.equal([]);
    });
  });

  describe('Machine rules', () => {
    const cases: [string, (m: Machine) => void, string, string][] = [
      ['missing spec', (m) => delete m.spec, 'spec', 'Required value'],
      ['missing class', (m) => (m.spec = {}), 'spec.class', 'Required value'],
      [
        'missing class name',
        (m) => (m.spec = { class: { kind: 'MachineClass' } }),
        'spec.class.name',
        'is required',
      ],
      ['missing class kind', (m) => (m.spec = { class: { name: 'a' } }), 'spec.class.kind', 'is required'],
      [
        'malformed creationTimeout',
        (m) => (m.spec = { class: { kind: 'MachineClass', name: 'a' }, creationTimeout: '10' }),
        'spec.creationTimeout',
        DURATION_MESSAGE,
      ],
      [
        'taint without key',
        (m) =>
          (m.spec = {
            class: { kind: 'MachineClass', name: 'a' },
            nodeTemplate: { spec: { taints: [{ key: '', effect: 'NoSchedule' }] } },
          }),
        'spec.nodeTemplate.spec.taints[0].key',
        'Required value',
      ],
    ];
    for (const [name, mutate, field, message] of cases) {
      it(`rejects ${name} at ${field}`, () => {
        expectError(mutated(machine, mutate, validateMachine), field, message);
      });
    }
  });

  describe('MachineClass rules', () => {
    it('rejects a class without providerSpec', () => {
      const mc = machineClass() as Partial<MachineClass> & { metadata: MachineClass['metadata'] };
      delete mc.providerSpec;
      expectError(validateMachineClass(mc as MachineClass), 'providerSpec', 'Required value');
    });

    it('rejects a providerSpec that is not an object', () => {
      const mc = { ...machineClass(), providerSpec: 'ami-1' as unknown as Record<string, unknown> };
      expectError(validateMachineClass(mc), 'providerSpec', 'must be an object');
    });

    it('rejects a node template without zone and instance type', () => {
      const mc = machineClass();
      mc.nodeTemplate = { capacity: { cpu: '1' } } as unknown as NonNullable<MachineClass['nodeTemplate']>;
      const errs = validateMachineClass(mc);
      expectError(errs, 'nodeTemplate.zone', 'Required value');
      expectError(errs, 'nodeTemplate.instanceType', 'Required value');
    });

    it('rejects a capacity that is not a quantity', () => {
      const mc = machineClass();
      if (mc.nodeTemplate !== undefined) mc.nodeTemplate.capacity = { memory: '8 gigs' };
      expectError(validateMachineClass(mc), 'nodeTemplate.capacity.memory', QUANTITY_MESSAGE);
    });

    it('rejects an allocatable above the capacity or of a resource the node lacks, per resource', () => {
      const mc = machineClass();
      if (mc.nodeTemplate !== undefined) {
        mc.nodeTemplate.capacity = { cpu: '2', memory: '4Gi' };
        mc.nodeTemplate.virtualCapacity = { 'example.com/dongle': 1 };
        mc.nodeTemplate.allocatable = {
          cpu: '2001m',
          memory: '3Gi',
          pods: '111',
          'example.com/dongle': '1',
          'nvidia.com/gpu': '1',
        };
      }
      const errs = validateMachineClass(mc);
      expectError(errs, 'nodeTemplate.allocatable.cpu', 'must not exceed the capacity (2)');
      expectError(errs, 'nodeTemplate.allocatable.pods', 'must not exceed the capacity (110)');
      expectError(errs, 'nodeTemplate.allocatable.nvidia.com/gpu', 'must name a resource');
      expect(errs.map((e) => e.field)).to.have.members([
        'nodeTemplate.allocatable.cpu',
        'nodeTemplate.allocatable.pods',
        'nodeTemplate.allocatable.nvidia.com/gpu',
      ]);
    });

    it('rejects an allocatable that is not a quantity', () => {
      const mc = machineClass();
      if (mc.nodeTemplate !== undefined) mc.nodeTemplate.allocatable = { cpu: 'most' };
      expectError(validateMachineClass(mc), 'nodeTemplate.allocatable.cpu', QUANTITY_MESSAGE);
    });

    it('accepts a class without node template', () => {
      const mc = machineClass();
      delete mc.nodeTemplate;
      expect(validateMachineClass(mc)).to.deep.equal([]);
    });
  });

  describe('helpers', () => {
    const durations: [string, boolean][] = [
      ['10m0s', true],
      ['2h0m0s', true],
      ['1.5h', true],
      ['.5s', true],
      ['300ms', true],
      ['1µs', true],
      ['0', true],
      ['-5m', true],
      ['', false],
      ['10', false],
      ['5 m', false],
      ['1d', false],
      ['m', false],
    ];
    for (const [value, ok] of durations) {
      it(`${ok ? 'accepts' : 'rejects'} duration ${JSON.stringify(value)}`, () => {
        expect(isGoDuration(value)).to.equal(ok);
      });
    }

    it('lists unmatched selector labels sorted by key', () => {
      expect(unmatchedSelectorLabels({ matchLabels: { b: '2', a: '1', c: '3' } }, { c: '3' })).to.deep.equal([
        'a=1',
        'b=2',
      ]);
      expect(selectorMismatchMessage(['a=1'])).to.equal(
        'spec.selector does not match spec.template.metadata.labels: the template lacks a=1',
      );
    });

    it('formats errors as field: message pairs', () => {
      expect(
        formatValidationErrors([
          { field: 'spec.replicas', message: 'must be greater than or equal to 0' },
          { field: 'spec.strategy', message: 'Required value' },
        ]),
      ).to.equal('spec.replicas: must be greater than or equal to 0; spec.strategy: Required value');
    });
  });
});
