import http from 'node:http';
import net from 'node:net';

import { expect } from 'chai';

import {
  API_VERSION,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineSet,
} from '../../lib/api/types.js';
import { defaultConfig, type ManagerConfig } from '../../lib/config.js';
import { KubeClient } from '../../lib/kube/client.js';
import { Manager } from '../../lib/manager.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { cloudProviderClient } from '../harness/grpcclient.js';
import { freePort } from '../harness/process.js';
import { StandInMachineController } from './env/standin.js';
import { until } from './env/until.js';

const NS = 'default';

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(`http://127.0.0.1:${port}${path}`, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, body });
        });
      })
      .on('error', reject);
  });
}

/** Sum of a metric's samples whose labels include all of `labels` (0 when there is none). */
function metricSum(body: string, name: string, labels: Record<string, string>): number {
  let total = 0;
  for (const line of body.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m?.[1] !== name || m[3] === undefined) continue;
    const have = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => have.includes(`${k}="${v}"`))) total += Number(m[3]);
  }
  return total;
}

describe('manager: two replicas with leader election against a real kube-apiserver', function () {
  this.timeout(240_000);
  let cp: ControlPlane;
  let client: KubeClient;
  let standIn: StandInMachineController;
  const managers: Manager[] = [];

  before(async function () {
    this.timeout(240_000);
    cp = await startControlPlane({ installCRDs: true });
    client = new KubeClient({ kubeConfig: cp.kubeConfig, qps: 200, burst: 200 });
    standIn = new StandInMachineController(
      client,
      NS,
      { runningAfterMs: 100, terminateAfterMs: 100 },
      nullLogger,
    );
    await standIn.start();
  });

  after(async () => {
    for (const m of managers) await m.stop();
    await (standIn as StandInMachineController | undefined)?.stop();
    (client as KubeClient | undefined)?.close();
    await (cp as ControlPlane | undefined)?.stop();
  });

  function newManager(overrides: Partial<ManagerConfig> = {}): Manager {
    const config: ManagerConfig = {
      ...defaultConfig,
      namespace: NS,
      address: '127.0.0.1',
      port: 0,
      leaderElect: true,
      leaderElectLeaseDurationMs: 6_000,
      leaderElectRenewDeadlineMs: 4_000,
      leaderElectRetryPeriodMs: 1_000,
      ...overrides,
    };
    const m = new Manager(config, { logger: nullLogger, controlKubeConfig: cp.kubeConfig });
    managers.push(m);
    return m;
  }

  async function machines(): Promise<Machine[]> {
    return (await client.list<Machine>(MachineResource, { namespace: NS, labelSelector: 'set=ha' })).items;
  }

  it('runs the controllers in exactly one replica, serves health and metrics, and hands over on graceful stop', async () => {
    const a = newManager();
    const b = newManager();
    await a.start();
    await b.start();
    await until('one leader', () => a.isLeading() !== b.isLeading());
    const leader = a.isLeading() ? a : b;
    const standby = leader === a ? b : a;

    const labels = { set: 'ha' };
    const ms: MachineSet = {
      apiVersion: API_VERSION,
      kind: 'MachineSet',
      metadata: { name: 'ha', namespace: NS },
      spec: {
        replicas: 2,
        selector: { matchLabels: labels },
        template: { metadata: { labels }, spec: { class: { kind: 'MachineClass', name: 'c' } } },
      },
    };
    await client.create(MachineSetResource, ms);
    await until('2 machines', async () => (await machines()).length === 2);

    for (const m of [leader, standby]) {
      expect((await get(m.port, '/healthz')).status).to.equal(200);
      expect((await get(m.port, '/readyz')).status).to.equal(200);
    }
    const leaderMetrics = (await get(leader.port, '/metrics')).body;
    expect(leaderMetrics).to.match(/leader_election_master_status\{name="machine-controller-manager"\} 1/);
    // The series exist at 0 from the moment a controller is built; only reconciles count up.
    const reconciles = (body: string): number =>
      metricSum(body, 'controller_runtime_reconcile_total', { controller: 'machineset' });
    expect(reconciles(leaderMetrics), 'machineset reconciles on the leader').to.be.greaterThan(0);
    const standbyMetrics = (await get(standby.port, '/metrics')).body;
    expect(standbyMetrics).to.match(/leader_election_master_status\{name="machine-controller-manager"\} 0/);
    expect(reconciles(standbyMetrics), 'machineset reconciles on the standby').to.equal(0);

    const stoppedAt = Date.now();
    await leader.stop();
    await until('standby leads', () => standby.isLeading(), 10_000);
    expect(Date.now() - stoppedAt, 'handover after a graceful stop').to.be.below(1_000 * 1.2 + 2_000);
    await client.scale(MachineSetResource, 'ha', NS, 3);
    await until('3 machines from the new leader', async () => (await machines()).length === 3);
    expect((await machines()).length).to.equal(3);
  });

  it('serves the autoscaler from the leader only: a standby refuses connections, and the new leader serves after a handover', async () => {
    const ports = [await freePort(), await freePort()];
    const [a, b] = ports.map((port) =>
      newManager({
        // Leases of their own: the first test's replicas still run (and hold theirs).
        leaderElectResourceName: 'mcm-grpc-leader',
        machineControllerLeaseName: 'mcm-grpc-machine-controller',
        grpcAddress: `127.0.0.1:${port}`,
        grpcInsecure: true,
      }),
    ) as [Manager, Manager];
    await a.start();
    await b.start();
    await until('one leader', () => a.isLeading() !== b.isLeading());
    const [leader, standby] = a.isLeading() ? [a, b] : [b, a];
    const portOf = (m: Manager): number => ports[m === a ? 0 : 1] ?? 0;
    const accepts = (port: number): Promise<boolean> =>
      new Promise((resolve) => {
        const socket = net.connect(port, '127.0.0.1');
        socket.once('connect', () => {
          socket.destroy();
          resolve(true);
        });
        socket.once('error', () => {
          resolve(false);
        });
      });
    await until('the leader serves gRPC', () => accepts(portOf(leader)));
    const client = cloudProviderClient(`127.0.0.1:${portOf(leader)}`);
    try {
      expect(await client.call('NodeGroups')).to.have.property('nodeGroups');
    } finally {
      client.close();
    }
    expect(await accepts(portOf(standby)), 'the standby does not listen').to.equal(false);

    await leader.stop();
    await until('the standby leads', () => standby.isLeading(), 15_000);
    await until('the new leader serves gRPC', () => accepts(portOf(standby)), 15_000);
    const next = cloudProviderClient(`127.0.0.1:${portOf(standby)}`);
    try {
      expect(await next.call('NodeGroups')).to.have.property('nodeGroups');
    } finally {
      next.close();
    }
    expect(await accepts(portOf(leader)), 'the stopped replica no longer listens').to.equal(false);
  });
});
