// The overshoot safety against a real kube-apiserver while a MachineSet scales down for several
// overshooting periods. The manager's API budget (--kube-api-qps / --kube-api-burst) is small, so
// the set's DELETEs wait for it and trickle out over several short periods, as hibernating hundreds
// of machines does with the defaults.

import { expect } from 'chai';

import { EventReason, Label, LabelValue, MachineSetConditionType } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineSet,
} from '../../lib/api/types.js';
import { isTerminating } from '../../lib/controllers/machines.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent } from '../../lib/kube/types.js';
import { startMachineEnv, type MachineEnv } from './env/machineenv.js';
import { until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const NS = 'default';
const PERIOD_MS = 2_000;
const MACHINES = 36;

describe('overshoot safety during a scale-down slowed by the API budget (real kube-apiserver)', function () {
  this.timeout(120_000);
  let env: MachineEnv;

  before(async function () {
    this.timeout(120_000);
    env = await startMachineEnv({
      standIn: { runningAfterMs: 100, terminateAfterMs: 100 },
      config: { kubeApiQps: 4, kubeApiBurst: 4, machineSafetyOvershootingPeriodMs: PERIOD_MS },
    });
  });

  after(async () => {
    await (env as MachineEnv | undefined)?.stop();
  });

  const staying = async (name: string): Promise<number> =>
    (
      await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: `set=${name}` })
    ).items.filter((m) => !isTerminating(m)).length;

  /** Finished passes of the overshoot check over MachineSets. */
  const checks = async (): Promise<number> => {
    const m = await env.manager.registry.getSingleMetric('controller_runtime_reconcile_total')?.get();
    return (m?.values ?? [])
      .filter((v) => v.labels.controller === 'safety-overshoot-machineset' && v.labels.result !== 'error')
      .reduce((sum, v) => sum + v.value, 0);
  };

  it('a MachineSet whose scale-down takes several overshooting periods is never frozen', async () => {
    const labels = { app: 'it', set: 'hibernated' };
    await env.client.create<MachineSet>(MachineSetResource, {
      apiVersion: API_VERSION,
      kind: 'MachineSet',
      metadata: { name: 'hibernated', namespace: NS },
      spec: {
        replicas: MACHINES,
        selector: { matchLabels: labels },
        template: { metadata: { labels }, spec: { class: { kind: 'MachineClass', name: 'small' } } },
      },
    });
    await until(`${MACHINES} machines`, async () => (await staying('hibernated')) === MACHINES);

    // Every state of the set from here on: any freeze label or Frozen condition it ever carries.
    const freezes: string[] = [];
    const stopWatch = await watchEvents<MachineSet>(
      env.client,
      NS,
      MachineSetResource,
      { fieldSelector: 'metadata.name=hibernated' },
      (ev) => {
        const ms = ev.object;
        const frozen = (ms.status?.machineSetCondition ?? []).find(
          (c) => c.type === MachineSetConditionType.Frozen,
        );
        if (ms.metadata.labels?.[Label.Freeze] === LabelValue.True || frozen !== undefined)
          freezes.push(`${ev.type} rv ${ms.metadata.resourceVersion ?? ''}: ${frozen?.message ?? 'label'}`);
      },
    );
    try {
      const scaledAt = Date.now();
      await env.client.scale(MachineSetResource, 'hibernated', NS, 0);
      await until('no machine of the set staying', async () => (await staying('hibernated')) === 0);
      const tookMs = Date.now() - scaledAt;
      expect(tookMs, 'the scale-down lasted three overshooting periods or more').to.be.at.least(
        3 * PERIOD_MS,
      );
      // The set is looked at after the scale-down is done (the periodic check at the latest).
      const before = await checks();
      await until('an overshoot check after the scale-down', async () => (await checks()) > before);
      await until('the machines gone', async () => {
        const list = await env.client.list<Machine>(MachineResource, {
          namespace: NS,
          labelSelector: 'set=hibernated',
        });
        return list.items.length === 0;
      });
    } finally {
      await stopWatch();
    }
    expect(freezes, 'freeze label or Frozen condition seen on the set').to.deep.equal([]);
    const events = await env.client.list<CoreEvent>(CoreResources.events, {
      namespace: NS,
      fieldSelector: 'involvedObject.name=hibernated',
    });
    expect(events.items.map((e) => e.reason)).to.not.include(EventReason.FrozeMachineSet);
  });
});
