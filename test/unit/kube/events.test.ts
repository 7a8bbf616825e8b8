import { expect } from 'chai';

import type { CoreEvent, KubeObject } from '../../../lib/kube/types.js';
import { FakeClock } from '../../../lib/kube/clock.js';
import { KubeEventRecorder } from '../../../lib/kube/events.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import { nullLogger } from '../../../lib/observability/logger.js';
import { newRegistry } from '../../../lib/observability/metrics.js';
import { FakeKube } from '../../fakes/kube.js';

const machineSet: KubeObject = {
  apiVersion: 'machine.sapcloud.io/v1alpha1',
  kind: 'MachineSet',
  metadata: { name: 'ms-1', namespace: 'shoot', uid: 'uid-1' },
};

describe('KubeEventRecorder', () => {
  let api: FakeKube;
  let clock: FakeClock;

  beforeEach(() => {
    api = new FakeKube();
    clock = new FakeClock();
  });

  it('creates a core/v1 Event about the object with source, type, reason and message', async () => {
    const rec = new KubeEventRecorder({
      client: api,
      component: 'machineset-controller',
      logger: nullLogger,
      clock,
      host: 'h',
    });
    rec.event(machineSet, 'Normal', 'SuccessfulCreate', 'Created machine ms-1-abcde');
    await rec.flush();
    const events = api.all<CoreEvent>(CoreResources.events, 'shoot');
    expect(events).to.have.length(1);
    const ev = events[0];
    expect(ev?.involvedObject).to.deep.include({
      kind: 'MachineSet',
      name: 'ms-1',
      namespace: 'shoot',
      uid: 'uid-1',
    });
    expect(ev).to.deep.include({
      type: 'Normal',
      reason: 'SuccessfulCreate',
      message: 'Created machine ms-1-abcde',
      count: 1,
    });
    expect(ev?.source).to.deep.equal({ component: 'machineset-controller', host: 'h' });
  });

  it('aggregates a repeated event into one Event with a growing count', async () => {
    const rec = new KubeEventRecorder({ client: api, component: 'c', logger: nullLogger, clock });
    for (let i = 0; i < 3; i++) {
      rec.event(machineSet, 'Warning', 'FailedCreate', 'quota exceeded');
      await clock.advance(1000);
    }
    await rec.flush();
    const events = api.all<CoreEvent>(CoreResources.events, 'shoot');
    expect(events).to.have.length(1);
    expect(events[0]?.count).to.equal(3);
    expect(Date.parse(events[0]?.lastTimestamp ?? '') - Date.parse(events[0]?.firstTimestamp ?? '')).to.equal(
      2000,
    );
    expect(api.writes().map((w) => w.verb)).to.deep.equal(['create', 'patch', 'patch']);
  });

  it('starts a new Event when the aggregated one was deleted meanwhile', async () => {
    const rec = new KubeEventRecorder({ client: api, component: 'c', logger: nullLogger, clock });
    rec.event(machineSet, 'Warning', 'FailedCreate', 'x');
    await rec.flush();
    const name = api.all<CoreEvent>(CoreResources.events, 'shoot')[0]?.metadata.name ?? '';
    await api.delete(CoreResources.events, name, { namespace: 'shoot' });
    await clock.advance(1);
    rec.event(machineSet, 'Warning', 'FailedCreate', 'x');
    await rec.flush();
    const events = api.all<CoreEvent>(CoreResources.events, 'shoot');
    expect(events).to.have.length(1);
    expect(events[0]?.count).to.equal(1);
  });

  it('drops events beyond the per-object burst and counts them', async () => {
    const registry = newRegistry();
    const rec = new KubeEventRecorder({
      client: api,
      component: 'c',
      logger: nullLogger,
      clock,
      registry,
      burstPerObject: 3,
    });
    for (let i = 0; i < 5; i++) rec.event(machineSet, 'Normal', 'Scaled', `scaled to ${i}`);
    await rec.flush();
    expect(api.all<CoreEvent>(CoreResources.events, 'shoot')).to.have.length(3);
    expect(await registry.getSingleMetricAsString('events_dropped_total')).to.contain(
      'reason="rate_limited"} 2',
    );
  });

  it('never throws to the caller when the API fails', async () => {
    api.react(() => new Error('apiserver down'));
    const rec = new KubeEventRecorder({ client: api, component: 'c', logger: nullLogger, clock });
    expect(() => {
      rec.event(machineSet, 'Normal', 'X', 'y');
    }).to.not.throw();
    await rec.flush();
  });
});
