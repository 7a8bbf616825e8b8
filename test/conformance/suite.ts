// The provider conformance suite: what the controllers rely on from every driver, checked through
// the six calls only. Any provider can run it (docs/writing-a-provider.md): give it a driver, a
// class it can create VMs with, a class it must refuse, and the secret values that must never
// surface. Clouds are eventually consistent, so what a call shows after a write is awaited for a
// short while rather than expected at once.

import { randomUUID } from 'node:crypto';

import { expect } from 'chai';

import { API_VERSION, type Machine, type MachineClass } from '../../lib/api/types.js';
import { decodeMachineError } from '../../lib/driver/codes.js';
import type { Driver, MachineRequest } from '../../lib/driver/driver.js';
import type { PersistentVolumeSpec, Secret } from '../../lib/kube/types.js';

export interface ConformanceTarget {
  driver: Driver;
  /** A class the driver creates VMs with, and the (merged) secret it is called with. */
  machineClass: MachineClass;
  secret: Secret;
  /** A class of the same provider whose providerSpec the driver must refuse. */
  invalidClass: MachineClass;
  /** Values of the secret that must never appear in an error message. */
  secretValues: string[];
  /** A volume of this provider and the id GetVolumeIDs must return for it, when it has volumes. */
  ownVolume?: { spec: PersistentVolumeSpec; id: string };
  /** How long a write may take to show in the driver's reads (default 15 s). */
  settleMs?: number;
  cleanup(): Promise<void>;
}

/** A VM-less machine as the controllers hand it to a driver. */
function machineFor(cls: MachineClass, name: string): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: { name, namespace: cls.metadata.namespace ?? 'default', uid: randomUUID() },
    spec: { class: { kind: 'MachineClass', name: cls.metadata.name ?? '' } },
  };
}

async function settle<T>(what: string, ms: number, fn: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `${what} did not hold within ${ms} ms${last instanceof Error ? `: ${last.message}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Registers the conformance tests of one provider under a describe block of its name. */
export function describeConformance(name: string, setUp: () => Promise<ConformanceTarget>): void {
  describe(`provider conformance: ${name}`, function () {
    this.timeout(120_000);
    let t: ConformanceTarget;
    /** Every error message a call of the suite produced (checked for secrets at the end). */
    const messages: string[] = [];
    const run = (suffix: string): string => `conf-${suffix}-${randomUUID().slice(0, 8)}`;

    const req = (m: Machine, cls: MachineClass = t.machineClass): MachineRequest => ({
      machine: m,
      machineClass: cls,
      secret: t.secret,
    });
    /** The code of the error a call threw, or 'OK'; the message is kept for the secret check. */
    async function codeOf(call: Promise<unknown>): Promise<string> {
      try {
        await call;
        return 'OK';
      } catch (err) {
        const decoded = decodeMachineError(err);
        messages.push(err instanceof Error ? err.message : String(err), decoded.message);
        return decoded.code;
      }
    }
    const listed = async (): Promise<Record<string, string>> =>
      (await t.driver.listMachines({ machineClass: t.machineClass, secret: t.secret })).machineList;
    const settleMs = (): number => t.settleMs ?? 15_000;

    before(async () => {
      t = await setUp();
    });
    after(async () => {
      await t.cleanup();
    });

    it('CreateMachine is idempotent: a retry for the same machine returns the same VM', async () => {
      const m = machineFor(t.machineClass, run('idem'));
      const first = await t.driver.createMachine(req(m));
      const again = await t.driver.createMachine(req(m));
      expect(again.providerID).to.equal(first.providerID);
      expect(again.nodeName).to.equal(first.nodeName);
      const vms = await settle('the VM in ListMachines', settleMs(), async () => {
        const list = await listed();
        return list[first.providerID] === m.metadata.name ? list : undefined;
      });
      expect(Object.values(vms).filter((n) => n === m.metadata.name)).to.have.length(1);
      m.spec = { ...m.spec, providerID: first.providerID };
      await t.driver.deleteMachine(req(m)).catch(() => undefined);
    });

    it('GetMachineStatus finds a created VM and answers NotFound for a machine that has none', async () => {
      const m = machineFor(t.machineClass, run('status'));
      const created = await t.driver.createMachine(req(m));
      const seen = await settle('the VM in GetMachineStatus', settleMs(), async () => {
        const s = await t.driver.getMachineStatus(req(m));
        return s.providerID === created.providerID ? s : undefined;
      });
      expect(seen.nodeName).to.equal(created.nodeName);
      m.spec = { ...m.spec, providerID: created.providerID };
      await t.driver.deleteMachine(req(m));
      expect(await codeOf(t.driver.getMachineStatus(req(machineFor(t.machineClass, run('none')))))).to.equal(
        'NotFound',
      );
    });

    it('ListMachines returns exactly the VMs of the class, by providerID, with their machine names', async () => {
      const before = await listed();
      const ms = [machineFor(t.machineClass, run('list-a')), machineFor(t.machineClass, run('list-b'))];
      const ids: Record<string, string> = {};
      for (const m of ms) ids[(await t.driver.createMachine(req(m))).providerID] = m.metadata.name ?? '';
      const after = await settle('both VMs in ListMachines', settleMs(), async () => {
        const list = await listed();
        return Object.keys(ids).every((id) => list[id] !== undefined) ? list : undefined;
      });
      expect(after).to.deep.equal({ ...before, ...ids });
      for (const [providerID, name] of Object.entries(ids)) {
        const m = ms.find((x) => x.metadata.name === name) as Machine;
        m.spec = { ...m.spec, providerID };
        await t.driver.deleteMachine(req(m));
      }
      await settle('the deleted VMs gone from ListMachines', settleMs(), async () => {
        const list = await listed();
        return Object.keys(ids).some((id) => list[id] !== undefined) ? undefined : list;
      });
    });

    it('DeleteMachine of a VM that is already gone succeeds (or answers NotFound, which the controllers take as gone)', async () => {
      const m = machineFor(t.machineClass, run('gone'));
      const created = await t.driver.createMachine(req(m));
      m.spec = { ...m.spec, providerID: created.providerID };
      expect(await codeOf(t.driver.deleteMachine(req(m)))).to.equal('OK');
      await settle('the VM gone from GetMachineStatus', settleMs(), async () =>
        (await codeOf(t.driver.getMachineStatus(req(m)))) === 'NotFound' ? true : undefined,
      );
      expect(await codeOf(t.driver.deleteMachine(req(m)))).to.be.oneOf(['OK', 'NotFound']);
      const never = machineFor(t.machineClass, run('never'));
      expect(await codeOf(t.driver.deleteMachine(req(never)))).to.be.oneOf(['OK', 'NotFound']);
    });

    it('refuses a class with an invalid providerSpec with InvalidArgument and creates no VM', async () => {
      const before = await listed();
      const m = machineFor(t.invalidClass, run('invalid'));
      expect(await codeOf(t.driver.createMachine(req(m, t.invalidClass)))).to.equal('InvalidArgument');
      expect(await listed()).to.deep.equal(before);
    });

    it('GetVolumeIDs returns the ids of its own volumes and leaves foreign ones out', async () => {
      const foreign: PersistentVolumeSpec[] = [
        { csi: { driver: 'foreign.csi.example.org', volumeHandle: 'vol-foreign' } },
        { hostPath: { path: '/data' } },
      ];
      const own = t.ownVolume;
      const got = await t.driver.getVolumeIDs({
        pvSpecs: own === undefined ? foreign : [...foreign, own.spec],
      });
      expect(got.volumeIDs).to.deep.equal(own === undefined ? [] : [own.id]);
    });

    it('puts no secret value in any error message', () => {
      expect(messages, 'the suite saw errors to check').to.not.deep.equal([]);
      for (const value of t.secretValues) {
        for (const text of messages) expect(text, 'an error message').to.not.contain(value);
      }
    });
  });
}
