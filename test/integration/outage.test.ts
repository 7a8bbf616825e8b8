import { expect } from 'chai';

import { defaultConfig, type ManagerConfig } from '../../lib/config.js';
import { Manager } from '../../lib/manager.js';
import { CapturingLogger, type CapturedLine } from '../../lib/observability/logger.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { until } from './env/until.js';

/** Which informer, or which client and API, a line is about. */
function source(l: CapturedLine): string {
  const { informer, client, api } = l.fields;
  if (typeof informer === 'string') return `informer ${informer}`;
  expect(client, `client of "${l.msg}"`).to.be.oneOf(['control', 'target', 'cloud-control', 'cloud-target']);
  expect(api, `API of "${l.msg}"`).to.be.oneOf(['machine.sapcloud.io API', 'other APIs']);
  return `client ${String(client)} ${String(api)}`;
}

describe('manager: a kube-apiserver outage in the log', function () {
  this.timeout(240_000);
  let cp: ControlPlane;

  before(async function () {
    this.timeout(240_000);
    cp = await startControlPlane({ installCRDs: true });
  });

  after(async () => {
    await (cp as ControlPlane | undefined)?.stop();
  });

  it('warns while the API server is down and ends each warned outage of an informer or client with one recovery line once it is back', async () => {
    const logger = new CapturingLogger();
    const config: ManagerConfig = {
      ...defaultConfig,
      namespace: 'default',
      address: '127.0.0.1',
      port: 0,
      leaderElect: false,
      controllers: ['machineset', 'machinedeployment', 'safety'],
    };
    const m = new Manager(config, { logger, controlKubeConfig: cp.kubeConfig });
    await m.start();
    try {
      await cp.stopApiServer();
      try {
        await until(
          'a warning about the outage',
          () => logger.lines.some((l) => l.level === 'warn' && l.msg.endsWith('failing repeatedly')),
          60_000,
        );
      } finally {
        await cp.startApiServer();
      }
      const warned = (): Set<string> =>
        new Set(
          logger.lines.filter((l) => l.level === 'warn' && l.msg.endsWith('failing repeatedly')).map(source),
        );
      const recoveries = (): CapturedLine[] =>
        logger.lines.filter((l) => l.level === 'info' && l.msg.endsWith('recovered'));
      await until(
        'every source that warned reports its recovery',
        () => [...warned()].every((s) => recoveries().some((l) => source(l) === s)),
        90_000,
      );
      // Per source, warnings and recoveries alternate: a recovery line only ever ends an outage that
      // was warned about, and the last line of each source is its recovery. (A client whose
      // requests run concurrently may see a request succeed between failures while the API server
      // starts, which ends one outage and begins another: that is two outages, each reported.)
      const bySource = new Map<string, string[]>();
      for (const l of logger.lines) {
        const kind =
          l.level === 'warn' && l.msg.endsWith('failing repeatedly')
            ? 'warn'
            : l.level === 'info' && l.msg.endsWith('recovered')
              ? 'recovered'
              : undefined;
        if (kind === undefined) continue;
        const seq = bySource.get(source(l)) ?? [];
        if (seq[seq.length - 1] !== kind) seq.push(kind);
        else if (kind === 'recovered') seq.push('recovered twice');
        bySource.set(source(l), seq);
      }
      // An informer's list/watch requests go through a client, so a client reports the outage too
      // (which clients depends on which informers failed twice before the API server came back).
      expect(
        [...bySource.keys()].filter((src) => src.startsWith('client ')),
        'clients that reported the outage',
      ).to.not.be.empty;
      for (const [src, seq] of bySource) {
        expect(seq[0], `${src}: ${seq.join(' ')}`).to.equal('warn');
        expect(seq[seq.length - 1], `${src}: ${seq.join(' ')}`).to.equal('recovered');
        expect(seq, `${src}: ${seq.join(' ')}`).to.not.include('recovered twice');
      }
      expect(
        logger.lines.filter((l) => l.level === 'error'),
        'an outage of the API is no error of the manager',
      ).to.deep.equal([]);
    } finally {
      await m.stop();
    }
  });
});
