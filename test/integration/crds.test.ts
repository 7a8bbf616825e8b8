// The machine.sapcloud.io CRDs against a real kube-apiserver: gardener-format manifests apply
// unchanged, kubectl shows the printer columns and short names, the scale subresource works, and
// invalid objects are rejected with messages a user can act on.

import { expect } from 'chai';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { CustomObjectsApi, loadAllYaml } from '@kubernetes/client-node';

import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import {
  BOTH_ZERO_MESSAGE,
  DURATION_MESSAGE,
  INT_OR_PERCENT_MESSAGE,
  ROLLING_UPDATE_REQUIRED_MESSAGE,
  SELECTOR_VALUES_REQUIRED_MESSAGE,
} from '../../lib/api/validation.js';
import { GROUP, VERSION } from '../../lib/api/types.js';

// Compiled to dist/test/integration/, three levels below the repository root.
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const fixtureDir = path.join(repoRoot, 'test', 'fixtures', 'gardener');
const NAMESPACE = 'fixtures';

interface Fixture {
  file: string;
  text: string;
  object: Record<string, unknown>;
}

function loadFixtures(): Fixture[] {
  return readdirSync(fixtureDir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((file) => {
      const text = readFileSync(path.join(fixtureDir, file), 'utf8');
      const docs = loadAllYaml(text) as unknown[];
      const object: unknown = JSON.parse(JSON.stringify(docs[0]));
      if (docs.length !== 1 || typeof object !== 'object' || object === null) {
        throw new Error(`${file} must hold exactly one object`);
      }
      return { file, text, object: object as Record<string, unknown> };
    });
}

const PLURALS: Record<string, string> = {
  MachineClass: 'machineclasses',
  Machine: 'machines',
  MachineSet: 'machinesets',
  MachineDeployment: 'machinedeployments',
};

function pluralOf(obj: Record<string, unknown>): string {
  const plural = PLURALS[String(obj.kind)];
  if (plural === undefined) throw new Error(`unexpected kind ${String(obj.kind)}`);
  return plural;
}

function nameOf(obj: Record<string, unknown>): string {
  const metadata = obj.metadata as { name?: unknown } | undefined;
  if (typeof metadata?.name !== 'string') throw new Error('object has no name');
  return metadata.name;
}

/** Paths where `actual` lacks a value of `expected` or holds a different one. */
function differences(expected: unknown, actual: unknown, at = ''): string[] {
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) return [at];
    return expected.flatMap((item, i) => differences(item, actual[i], `${at}[${i}]`));
  }
  if (typeof expected === 'object' && expected !== null) {
    if (typeof actual !== 'object' || actual === null) return [at];
    const actualRecord = actual as Record<string, unknown>;
    return Object.entries(expected).flatMap(([key, value]) =>
      differences(value, actualRecord[key], `${at}.${key}`),
    );
  }
  return Object.is(expected, actual) ? [] : [at];
}

/** A valid MachineDeployment to derive invalid ones from. */
function validDeployment(name: string): Record<string, unknown> {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NAMESPACE },
    spec: {
      replicas: 1,
      selector: { matchLabels: { name } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels: { name } },
        spec: { class: { kind: 'MachineClass', name: 'some-class' } },
      },
    },
  };
}

function withSpec(obj: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  return { ...obj, spec: { ...(obj.spec as Record<string, unknown>), ...patch } };
}

function validMachineSet(name: string): Record<string, unknown> {
  const md = validDeployment(name);
  const { strategy: _strategy, ...spec } = md.spec as Record<string, unknown>;
  return { ...md, kind: 'MachineSet', spec };
}

function validMachine(name: string): Record<string, unknown> {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'Machine',
    metadata: { name, namespace: NAMESPACE },
    spec: { class: { kind: 'MachineClass', name: 'some-class' } },
  };
}

describe('machine.sapcloud.io CRDs on a real kube-apiserver', () => {
  let cp: ControlPlane;
  // Set only once startup succeeded, so after() does not stop a plane that never started.
  let started: ControlPlane | undefined;
  let customObjects: CustomObjectsApi;
  const fixtures = loadFixtures();

  before(async function () {
    this.timeout(180_000);
    started = await startControlPlane({ installCRDs: true });
    cp = started;
    customObjects = cp.kubeConfig.makeApiClient(CustomObjectsApi);
    const ns = await cp.kubectl(['create', 'namespace', NAMESPACE]);
    expect(ns.code, ns.stderr).to.equal(0);
  });

  after(async () => {
    await started?.stop();
  });

  async function readBack(obj: Record<string, unknown>): Promise<Record<string, unknown>> {
    return (await customObjects.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NAMESPACE,
      plural: pluralOf(obj),
      name: nameOf(obj),
    })) as Record<string, unknown>;
  }

  async function resourceVersion(obj: Record<string, unknown>): Promise<string> {
    const live = await readBack(obj);
    return String((live.metadata as { resourceVersion?: unknown }).resourceVersion);
  }

  describe('gardener-format manifests', () => {
    it('apply unchanged with client-side kubectl apply, and a second apply is unchanged', async () => {
      for (const f of fixtures) {
        const first = await cp.kubectl(['apply', '-f', '-'], { stdin: f.text });
        expect(first.code, `${f.file}: ${first.stderr}`).to.equal(0);
        expect(first.stdout, f.file).to.contain('created');
        const second = await cp.kubectl(['apply', '-f', '-'], { stdin: f.text });
        expect(second.code, `${f.file}: ${second.stderr}`).to.equal(0);
        expect(second.stdout, f.file).to.contain('unchanged');
      }
    });

    it('keep every field of the manifest when read back through the API', async () => {
      for (const f of fixtures) {
        const live = await readBack(f.object);
        expect(differences(f.object, live), f.file).to.deep.equal([]);
      }
    });

    it('show no difference in kubectl diff', async () => {
      for (const f of fixtures) {
        const diff = await cp.kubectl(['diff', '-f', '-'], { stdin: f.text });
        expect(diff.code, `${f.file}: ${diff.stdout}${diff.stderr}`).to.equal(0);
      }
    });

    it('apply with server-side apply too, and a second server-side apply writes nothing', async () => {
      for (const f of fixtures) {
        const first = await cp.kubectl(['apply', '--server-side', '-f', '-'], { stdin: f.text });
        expect(first.code, `${f.file}: ${first.stderr}`).to.equal(0);
        const before = await resourceVersion(f.object);
        const second = await cp.kubectl(['apply', '--server-side', '-f', '-'], { stdin: f.text });
        expect(second.code, `${f.file}: ${second.stderr}`).to.equal(0);
        expect(await resourceVersion(f.object), `${f.file} was rewritten`).to.equal(before);
        expect(differences(f.object, await readBack(f.object)), f.file).to.deep.equal([]);
      }
    });

    it('apply server-side into a fresh namespace as well', async () => {
      const ns = await cp.kubectl(['create', 'namespace', 'fixtures-ssa']);
      expect(ns.code, ns.stderr).to.equal(0);
      for (const f of fixtures) {
        const text = f.text.replaceAll(`namespace: ${NAMESPACE}\n`, 'namespace: fixtures-ssa\n');
        const r = await cp.kubectl(['apply', '--server-side', '-f', '-'], { stdin: text });
        expect(r.code, `${f.file}: ${r.stderr}`).to.equal(0);
        expect(r.stdout, f.file).to.contain('serverside-applied');
      }
    });
  });

  describe('kubectl presentation', () => {
    function header(stdout: string): string {
      return (stdout.split('\n')[0] ?? '').replace(/\s+/g, ' ').trim();
    }

    it('kubectl get mcd prints READY DESIRED UP-TO-DATE AVAILABLE AGE', async () => {
      const r = await cp.kubectl(['get', 'mcd', '-n', NAMESPACE]);
      expect(r.code, r.stderr).to.equal(0);
      expect(header(r.stdout)).to.equal('NAME READY DESIRED UP-TO-DATE AVAILABLE AGE');
      // READY is empty until a controller writes status; DESIRED comes from the spec.
      expect(r.stdout).to.match(/\nshoot--dev--demo-worker-a-z1\s+3\s+\S+\n/);
    });

    it('kubectl get mcd -o wide adds strategy, paused and class', async () => {
      const r = await cp.kubectl(['get', 'mcd', '-n', NAMESPACE, '-o', 'wide']);
      expect(r.code, r.stderr).to.equal(0);
      expect(header(r.stdout)).to.equal('NAME READY DESIRED UP-TO-DATE AVAILABLE AGE STRATEGY PAUSED CLASS');
      expect(r.stdout).to.match(/demo-recreate\s.*Recreate\s+true\s+test-aws/);
    });

    it('kubectl get mcs prints DESIRED CURRENT READY AVAILABLE AGE', async () => {
      const r = await cp.kubectl(['get', 'mcs', '-n', NAMESPACE, '-o', 'wide']);
      expect(r.code, r.stderr).to.equal(0);
      expect(header(r.stdout)).to.equal('NAME DESIRED CURRENT READY AVAILABLE AGE CLASS FROZEN');
    });

    it('kubectl get mc prints STATUS AGE NODE, and -o wide the provider ID and class', async () => {
      const narrow = await cp.kubectl(['get', 'mc', '-n', NAMESPACE]);
      expect(narrow.code, narrow.stderr).to.equal(0);
      expect(header(narrow.stdout)).to.equal('NAME STATUS AGE NODE');
      const wide = await cp.kubectl(['get', 'mc', '-n', NAMESPACE, '-o', 'wide']);
      expect(header(wide.stdout)).to.equal('NAME STATUS AGE NODE PROVIDERID CLASS LAST-OP OP-STATE');
    });

    it('kubectl get mcc prints the provider, and -o wide the node template placement', async () => {
      const r = await cp.kubectl(['get', 'mcc', '-n', NAMESPACE, '-o', 'wide']);
      expect(r.code, r.stderr).to.equal(0);
      expect(header(r.stdout)).to.equal('NAME PROVIDER AGE INSTANCETYPE REGION ZONE');
      expect(r.stdout).to.match(
        /shoot--dev--demo-worker-a-z1-6d2f1\s+local\s+\S+\s+local\.large\s+local\s+local-1/,
      );
    });

    it('short names mc, mcs, mcd and mcc resolve together', async () => {
      const r = await cp.kubectl(['get', 'mc,mcs,mcd,mcc', '-n', NAMESPACE, '-o', 'name']);
      expect(r.code, r.stderr).to.equal(0);
      const names = r.stdout.trim().split('\n').sort();
      expect(names).to.include.members([
        'machine.machine.sapcloud.io/demo-machine',
        'machineset.machine.sapcloud.io/demo-set',
        'machinedeployment.machine.sapcloud.io/shoot--dev--demo-worker-a-z1',
        'machineclass.machine.sapcloud.io/shoot--dev--demo-worker-a-z1-6d2f1',
      ]);
    });

    it('kubectl get all does not list machine objects', async () => {
      const r = await cp.kubectl(['get', 'all', '-n', NAMESPACE, '-o', 'name']);
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout).to.not.contain('machine.sapcloud.io');
    });
  });

  describe('scale subresource', () => {
    const mcdName = 'shoot--dev--demo-worker-a-z1';

    async function readScale(
      plural: string,
      name: string,
    ): Promise<{ spec?: { replicas?: number }; status?: { replicas?: number; selector?: string } }> {
      return (await customObjects.getNamespacedCustomObjectScale({
        group: GROUP,
        version: VERSION,
        namespace: NAMESPACE,
        plural,
        name,
      })) as { spec?: { replicas?: number }; status?: { replicas?: number; selector?: string } };
    }

    it('kubectl scale machinedeployment changes spec.replicas through /scale', async () => {
      const r = await cp.kubectl(['scale', 'machinedeployment', mcdName, '--replicas=5', '-n', NAMESPACE]);
      expect(r.code, r.stderr).to.equal(0);
      expect((await readScale('machinedeployments', mcdName)).spec?.replicas).to.equal(5);
      const live = await readBack({ kind: 'MachineDeployment', metadata: { name: mcdName } });
      expect((live.spec as { replicas?: unknown }).replicas).to.equal(5);
    });

    it('kubectl scale mcs changes a MachineSet’s spec.replicas', async () => {
      const r = await cp.kubectl(['scale', 'mcs', 'demo-set', '--replicas=4', '-n', NAMESPACE]);
      expect(r.code, r.stderr).to.equal(0);
      expect((await readScale('machinesets', 'demo-set')).spec?.replicas).to.equal(4);
    });

    it('serves status.selector from status.labelSelector once the controller has written it', async () => {
      const before = await readScale('machinedeployments', mcdName);
      expect(before.status?.selector ?? '').to.equal('');
      const selector = `name=${mcdName}`;
      const patch = JSON.stringify({ status: { replicas: 3, labelSelector: selector } });
      const r = await cp.kubectl([
        'patch',
        'machinedeployment',
        mcdName,
        '-n',
        NAMESPACE,
        '--subresource=status',
        '--type=merge',
        '-p',
        patch,
      ]);
      expect(r.code, r.stderr).to.equal(0);
      const after = await readScale('machinedeployments', mcdName);
      expect(after.status).to.deep.equal({ replicas: 3, selector });
    });

    it('rejects scaling to a negative replica count', async () => {
      const r = await cp.request(
        'PATCH',
        `/apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/machinesets/demo-set/scale`,
        { spec: { replicas: -1 } },
      );
      expect(r.status).to.equal(422);
      expect(JSON.stringify(r.body)).to.contain('greater than or equal to 0');
    });
  });

  describe('admission', () => {
    async function expectRejected(obj: Record<string, unknown>, fragment: string): Promise<void> {
      const r = await cp.kubectl(['apply', '-f', '-'], { stdin: JSON.stringify(obj) });
      expect(r.code, `accepted ${JSON.stringify(obj)}`).to.not.equal(0);
      expect(r.stderr).to.contain(fragment);
    }

    async function expectAccepted(obj: Record<string, unknown>): Promise<void> {
      const r = await cp.kubectl(['apply', '-f', '-'], { stdin: JSON.stringify(obj) });
      expect(r.code, r.stderr).to.equal(0);
    }

    const rolling = (surge: unknown, unavailable: unknown): Record<string, unknown> => ({
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: surge, maxUnavailable: unavailable } },
    });

    const rejections: [string, () => Record<string, unknown>, string][] = [
      [
        'a MachineDeployment with negative replicas',
        () => withSpec(validDeployment('neg-replicas'), { replicas: -1 }),
        'spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0',
      ],
      [
        'a MachineSet with negative replicas',
        () => withSpec(validMachineSet('neg-replicas-set'), { replicas: -2 }),
        'spec.replicas in body should be greater than or equal to 0',
      ],
      [
        'a MachineDeployment whose selector does not match the template labels',
        () => withSpec(validDeployment('mismatch'), { selector: { matchLabels: { name: 'other' } } }),
        'spec.selector does not match spec.template.metadata.labels: the template lacks name=other',
      ],
      [
        'a MachineSet whose selector label is missing from the template',
        () =>
          withSpec(validMachineSet('mismatch-set'), {
            selector: { matchLabels: { name: 'mismatch-set', 'machine-template-hash': 'abc' } },
          }),
        'spec.selector does not match spec.template.metadata.labels: the template lacks machine-template-hash=abc',
      ],
      [
        'an unknown strategy type',
        () => withSpec(validDeployment('blue-green'), { strategy: { type: 'BlueGreen' } }),
        'spec.strategy.type: Unsupported value: "BlueGreen": supported values: "Recreate", "RollingUpdate", "InPlaceUpdate"',
      ],
      [
        'maxSurge 0 and maxUnavailable "0%"',
        () => withSpec(validDeployment('both-zero'), rolling(0, '0%')),
        BOTH_ZERO_MESSAGE,
      ],
      [
        'maxSurge and maxUnavailable both 0 in an in-place update',
        () =>
          withSpec(validDeployment('both-zero-inplace'), {
            strategy: {
              type: 'InPlaceUpdate',
              inPlaceUpdate: { maxSurge: '0%', maxUnavailable: 0, orchestrationType: 'Auto' },
            },
          }),
        BOTH_ZERO_MESSAGE,
      ],
      [
        'a percentage without percent sign',
        () => withSpec(validDeployment('no-percent'), rolling('5', 0)),
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'a malformed percentage',
        () => withSpec(validDeployment('bad-percent'), rolling('12.5%', 0)),
        INT_OR_PERCENT_MESSAGE,
      ],
      [
        'RollingUpdate without a rollingUpdate block',
        () => withSpec(validDeployment('no-block'), { strategy: { type: 'RollingUpdate' } }),
        ROLLING_UPDATE_REQUIRED_MESSAGE,
      ],
      [
        'an unknown orchestrationType',
        () =>
          withSpec(validDeployment('orchestration'), {
            strategy: {
              type: 'InPlaceUpdate',
              inPlaceUpdate: { maxSurge: 1, maxUnavailable: 0, orchestrationType: 'Sometimes' },
            },
          }),
        'spec.strategy.inPlaceUpdate.orchestrationType: Unsupported value: "Sometimes": supported values: "Auto", "Manual"',
      ],
      [
        'a negative minReadySeconds',
        () => withSpec(validDeployment('min-ready'), { minReadySeconds: -1 }),
        'spec.minReadySeconds in body should be greater than or equal to 0',
      ],
      [
        'a negative revisionHistoryLimit',
        () => withSpec(validDeployment('history'), { revisionHistoryLimit: -1 }),
        'spec.revisionHistoryLimit in body should be greater than or equal to 0',
      ],
      [
        'a negative progressDeadlineSeconds',
        () => withSpec(validDeployment('deadline'), { progressDeadlineSeconds: -10 }),
        'spec.progressDeadlineSeconds in body should be greater than or equal to 0',
      ],
      [
        'a malformed duration',
        () =>
          withSpec(validDeployment('duration'), {
            template: {
              metadata: { labels: { name: 'duration' } },
              spec: { class: { kind: 'MachineClass', name: 'c' }, drainTimeout: '2 hours' },
            },
          }),
        DURATION_MESSAGE,
      ],
      [
        'an In selector requirement without values',
        () =>
          withSpec(validDeployment('in-values'), {
            selector: {
              matchLabels: { name: 'in-values' },
              matchExpressions: [{ key: 'zone', operator: 'In' }],
            },
          }),
        SELECTOR_VALUES_REQUIRED_MESSAGE,
      ],
      [
        'a Machine without spec.class.name',
        () => ({ ...validMachine('no-class-name'), spec: { class: { kind: 'MachineClass' } } }),
        'spec.class.name: Required value',
      ],
      [
        'a MachineClass without providerSpec',
        () => ({
          apiVersion: `${GROUP}/${VERSION}`,
          kind: 'MachineClass',
          metadata: { name: 'no-provider-spec', namespace: NAMESPACE },
          provider: 'local',
        }),
        'providerSpec: Required value',
      ],
      [
        'a MachineClass node template without zone',
        () => ({
          apiVersion: `${GROUP}/${VERSION}`,
          kind: 'MachineClass',
          metadata: { name: 'no-zone', namespace: NAMESPACE },
          providerSpec: {},
          nodeTemplate: { capacity: { cpu: 2 }, instanceType: 'x', region: 'r' },
        }),
        'nodeTemplate.zone: Required value',
      ],
    ];

    for (const [name, build, fragment] of rejections) {
      it(`rejects ${name}`, async () => {
        await expectRejected(build(), fragment);
      });
    }

    it('accepts an empty selector, which MCM only warns about', async () => {
      await expectAccepted(withSpec(validDeployment('select-all'), { selector: {} }));
    });

    it('defaults a deployment without strategy or replicas to RollingUpdate 1/0 and 0 replicas, as gardener reads them', async () => {
      const {
        strategy: _strategy,
        replicas: _replicas,
        ...spec
      } = validDeployment('bare-gardener').spec as Record<string, unknown>;
      const bare = { ...validDeployment('bare-gardener'), spec };
      await expectAccepted(bare);
      const live = (await readBack(bare)).spec as Record<string, unknown>;
      expect(live.strategy).to.deep.equal({
        type: 'RollingUpdate',
        rollingUpdate: { maxSurge: 1, maxUnavailable: 0 },
      });
      expect(live.replicas).to.equal(0);
      // A second apply of the same manifest keeps the defaults and changes nothing.
      const again = await cp.kubectl(['apply', '-f', '-'], { stdin: JSON.stringify(bare) });
      expect(again.code, again.stderr).to.equal(0);
      expect(again.stdout).to.contain('unchanged');
    });

    it('defaults a MachineSet without replicas to 0', async () => {
      const { replicas: _replicas, ...spec } = validMachineSet('bare-set').spec as Record<string, unknown>;
      const bare = { ...validMachineSet('bare-set'), spec };
      await expectAccepted(bare);
      expect(((await readBack(bare)).spec as Record<string, unknown>).replicas).to.equal(0);
    });

    it('accepts Recreate without a rollingUpdate block', async () => {
      await expectAccepted(withSpec(validDeployment('recreate-bare'), { strategy: { type: 'Recreate' } }));
    });

    it('accepts percentages, and 0 with a non-zero partner', async () => {
      await expectAccepted(withSpec(validDeployment('percentages'), rolling('25%', '0%')));
    });

    it('accepts a status update on an object through the status subresource', async () => {
      await expectAccepted(validMachine('status-machine'));
      const r = await cp.kubectl([
        'patch',
        'machine',
        'status-machine',
        '-n',
        NAMESPACE,
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({
          status: {
            currentStatus: { phase: 'Pending', timeoutActive: true, lastUpdateTime: '2026-01-02T03:04:05Z' },
            lastOperation: {
              type: 'Create',
              state: 'Processing',
              description: 'Creating machine on cloud provider',
            },
          },
        }),
      ]);
      expect(r.code, r.stderr).to.equal(0);
      const get = await cp.kubectl(['get', 'mc', 'status-machine', '-n', NAMESPACE, '--no-headers']);
      expect(get.stdout).to.match(/^status-machine\s+Pending\s/);
    });
  });
});
