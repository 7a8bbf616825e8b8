import { expect } from 'chai';

import { planRecreate } from '../../../../lib/controllers/machinedeployment/recreate.js';

describe('planRecreate', () => {
  const set = (name: string, replicas: number, statusReplicas: number, machines: number) => ({
    name,
    replicas,
    statusReplicas,
    machines,
  });

  it('scales every old set with replicas to zero first', () => {
    expect(planRecreate([set('a', 2, 2, 2), set('b', 0, 0, 0), set('c', 1, 1, 1)])).to.deep.equal({
      scaleDown: ['a', 'c'],
      waitForOldMachines: true,
    });
  });

  it('waits while old machines exist, by cache or by set status', () => {
    expect(planRecreate([set('a', 0, 0, 1)]).waitForOldMachines).to.equal(true);
    expect(planRecreate([set('a', 0, 1, 0)]).waitForOldMachines).to.equal(true);
  });

  it('proceeds once no old machine is left', () => {
    expect(planRecreate([set('a', 0, 0, 0)])).to.deep.equal({ scaleDown: [], waitForOldMachines: false });
    expect(planRecreate([])).to.deep.equal({ scaleDown: [], waitForOldMachines: false });
  });
});
