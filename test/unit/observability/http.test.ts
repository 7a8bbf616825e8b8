import { expect } from 'chai';

import { readiness, type ReplicaState } from '../../../lib/observability/http.js';

describe('readiness (/readyz)', () => {
  const base: ReplicaState = { stopping: false, synced: true, running: false, standby: false };
  const cases: { name: string; state: Partial<ReplicaState>; ready: boolean; reason: string }[] = [
    {
      name: 'a replica still listing is not ready',
      state: { synced: false, standby: true },
      ready: false,
      reason: 'caches not synced yet',
    },
    {
      name: 'the leader with synced caches is ready',
      state: { running: true },
      ready: true,
      reason: 'leading',
    },
    {
      name: 'a warm standby is ready',
      state: { standby: true },
      ready: true,
      reason: 'standing by for leadership',
    },
    {
      name: 'the leader before its controllers start is not ready',
      state: {},
      ready: false,
      reason: 'controllers not started yet',
    },
    {
      name: 'a replica shutting down is not ready',
      state: { running: true, stopping: true },
      ready: false,
      reason: 'shutting down',
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      expect(readiness({ ...base, ...tc.state })).to.deep.equal({ ready: tc.ready, reason: tc.reason });
    });
  }
});
