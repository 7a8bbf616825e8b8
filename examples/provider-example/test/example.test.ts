// The example provider's own tests: its spec checks, its cloud, and what it registers. The driver
// contract itself is checked by the conformance suite (test/conformance/), like any provider's.

import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import {
  MachineError,
  PROVIDER_API_VERSION,
  type ProviderApi,
  type ProviderFactory,
} from '../../../lib/driver/index.js';
import { FileCloud, vmIdFor } from '../src/cloud.js';
import { nodeOf } from '../src/kubelet.js';
import { parseSpec } from '../src/spec.js';
import * as entry from '../src/index.js';

const api: ProviderApi = { apiVersion: PROVIDER_API_VERSION, MachineError, register: () => undefined };

const cls = (providerSpec: Record<string, unknown>) =>
  ({
    apiVersion: 'machine.sapcloud.io/v1alpha1',
    kind: 'MachineClass',
    metadata: { name: 'c' },
    providerSpec,
  }) as const;

describe('example provider', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'example-cloud-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('rejects a class without directory or machineType, naming the field, as InvalidArgument', () => {
    for (const [spec, field] of [
      [{ machineType: 'm' }, 'providerSpec.directory'],
      [{ directory: 'relative/dir', machineType: 'm' }, 'providerSpec.directory must be an absolute path'],
      [{ directory: '/x' }, 'providerSpec.machineType'],
    ] as const) {
      let err: unknown;
      try {
        parseSpec(api, cls(spec));
      } catch (e) {
        err = e;
      }
      expect(err).to.be.instanceOf(MachineError);
      expect((err as MachineError).code).to.equal('InvalidArgument');
      expect((err as MachineError).detail).to.contain(field);
    }
  });

  it('keeps one record per VM: a second create of the same id returns the first', async () => {
    const cloud = new FileCloud(dir);
    const id = vmIdFor('ns', 'm1', 'uid-1');
    const base = { id, machine: 'ns/m1', machineClass: 'c', machineType: 't', zone: 'z' };
    const first = await cloud.create({ ...base, createdAt: '2026-01-01T00:00:00Z' });
    const again = await cloud.create({ ...base, createdAt: '2026-02-02T00:00:00Z' });
    expect(again).to.deep.equal(first);
    expect(await readdir(dir)).to.deep.equal([`${id}.json`]);
    expect(await cloud.delete(id)).to.equal(true);
    expect(await cloud.delete(id)).to.equal(false);
    expect(await cloud.list()).to.deep.equal([]);
  });

  it('gives a recreated machine (same name, new uid) a new VM id', () => {
    expect(vmIdFor('ns', 'm1', 'uid-1')).to.not.equal(vmIdFor('ns', 'm1', 'uid-2'));
  });

  it('registers the Node a kubelet would: the VM’s providerID, kwok-managed, Ready', () => {
    const spec = parseSpec(api, cls({ directory: dir, machineType: 'small', cpu: '4' }));
    const node = nodeOf(
      {
        id: 'ex-0123456789abcdef',
        machine: 'ns/m1',
        machineClass: 'c',
        machineType: 'small',
        zone: 'zone-a',
        createdAt: '',
      },
      spec,
    );
    expect(node.spec?.providerID).to.equal('example:///zone-a/ex-0123456789abcdef');
    expect(node.metadata.annotations?.['kwok.x-k8s.io/node']).to.equal('fake');
    expect(node.status?.capacity?.cpu).to.equal('4');
  });

  it('declares provider API version 1 and registers the provider `example` with its providerID prefix', () => {
    const registered: { name: string; factory: ProviderFactory; prefix: string | undefined }[] = [];
    entry.registerProviders({
      ...api,
      register: (name, factory, opts) => registered.push({ name, factory, prefix: opts?.providerIDPrefix }),
    });
    expect(entry.providerApiVersion).to.equal(1);
    expect(registered.map((r) => [r.name, r.prefix])).to.deep.equal([['example', 'example://']]);
  });
});
