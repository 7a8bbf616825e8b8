// An expiry running beside a fault scenario: a second MachineDeployment whose machines expire
// after 1 s, so the manager replaces them one after the other (budget 1, maxSurge 1) for as long as
// the scenario's faults last. Once the scenario's own deployment converged, the expiry is switched
// off and must settle, and its timeline must hold the same bounds as any rollout: never more than
// replicas + maxSurge machines, no machine deleted before the machines that stay are Running, one
// VM per machine.

import { expect } from 'chai';

import { MachineDeploymentResource } from '../../lib/api/types.js';
import { NS } from '../integration/env/lifecycle.js';
import { analyze } from './analysis.js';
import type { ChaosEnv } from './env.js';

const EXPIRE_AFTER = 'machine.mcm-ts.io/expire-after';
const BUDGET = 'machine.mcm-ts.io/disruption-budget';

export class ExpiryBeside {
  private fromRev = 0;
  private originals: string[] = [];

  constructor(
    private readonly e: ChaosEnv,
    readonly name: string,
    readonly replicas: number,
  ) {}

  /** Creates the deployment, waits for it, and starts the expiry. */
  async start(className: string): Promise<void> {
    await this.e.lc.createDeployment(this.name, this.replicas, className, {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
    });
    await this.e.waitConverged(this.name, 120_000);
    this.originals = this.e.machines(this.name).map((m) => (m.metadata as { name: string }).name);
    this.fromRev = this.e.recorder.lastEventRev();
    await this.annotate({ [EXPIRE_AFTER]: '1s', [BUDGET]: '1' });
  }

  private async annotate(annotations: Record<string, string | null>): Promise<void> {
    await this.e.client.patch(
      MachineDeploymentResource,
      this.name,
      { metadata: { annotations } },
      { type: 'merge', namespace: NS },
    );
  }

  /** Switches the expiry off once every original machine was replaced, and waits until it settled. */
  async settle(): Promise<string> {
    const live = (): Set<string> =>
      new Set(this.e.machines(this.name).map((m) => (m.metadata as { name: string }).name));
    const deadline = Date.now() + 180_000;
    while (this.originals.some((n) => live().has(n))) {
      if (Date.now() > deadline)
        throw new Error(`expiry beside: ${this.name}'s original machines not all replaced`);
      await new Promise((r) => setTimeout(r, 500));
    }
    await this.annotate({ [EXPIRE_AFTER]: null, [BUDGET]: null });
    await this.e.waitConverged(this.name, 120_000);
    const a = this.analysis();
    return `expiry beside (${this.name}, ${this.replicas} machines, expire-after 1s, budget 1): ${a.deletions.length} replaced, peak ${a.peakActive} machines`;
  }

  private analysis(): ReturnType<typeof analyze> {
    return analyze(this.e.recorder.timeline(), {
      namespace: NS,
      deployment: this.name,
      fromRev: this.fromRev,
      toRev: this.e.recorder.lastEventRev(),
    });
  }

  /** The expiry's bounds held through the faults. */
  async check(): Promise<void> {
    const a = this.analysis();
    expect(
      a.beyondLimit,
      `${this.name}: machines beyond replicas + maxSurge (${a.firstBeyond ?? ''})`,
    ).to.equal(0);
    expect(
      a.wronglyDeleted.map((d) => `${d.machine}: ${d.why}`),
      `${this.name}: machines deleted before the machines that stay were Running`,
    ).to.deep.equal([]);
    expect(a.deletions.length, `${this.name}: every original machine replaced`).to.be.at.least(this.replicas);
    const vms = await this.e.vmsPerMachine(this.name);
    expect(vms.length, `${this.name}: live machines`).to.equal(this.replicas);
    expect(
      vms.filter(([, n]) => n !== 1),
      `${this.name}: machines without exactly one VM`,
    ).to.deep.equal([]);
  }
}
