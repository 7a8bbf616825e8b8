// Leader fencing with real processes: two `node dist/cmd/manager.js` replicas, each talking to the
// kube-apiserver through its own recording proxy, so the test sees exactly which requests of the
// old leader reached the API server after it lost the Lease.

import { writeFileSync } from 'node:fs';
import path from 'node:path';

import { expect } from 'chai';

import type { Lease } from '../../lib/kube/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { metricsText } from '../harness/http.js';
import { ManagedProcess, freePort } from '../harness/process.js';
import { HttpFaultProxy, type ProxiedRequest } from '../harness/proxy.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const LEASE = 'mcm-fencing';
const LEADING = `leader_election_master_status{name="${LEASE}"} 1`;

/** A manager process whose every API request goes through its own proxy. */
class Replica {
  readonly proc: ManagedProcess;
  exitedAt: number | undefined;

  constructor(
    readonly name: string,
    readonly proxy: HttpFaultProxy,
    readonly port: number,
    kubeconfig: string,
    logFile: string,
  ) {
    this.proc = new ManagedProcess({
      name,
      command: process.execPath,
      args: [
        path.join(repoRoot, 'dist', 'cmd', 'manager.js'),
        `--control-kubeconfig=${kubeconfig}`,
        `--target-kubeconfig=${kubeconfig}`,
        `--namespace=${NS}`,
        '--leader-elect=true',
        `--leader-elect-resource-name=${LEASE}`,
        '--leader-elect-lease-duration=6s',
        '--leader-elect-renew-deadline=4s',
        '--leader-elect-retry-period=1s',
        '--address=127.0.0.1',
        `--port=${port}`,
        '--v=2',
        '--log-format=json',
      ],
      logFile,
    });
  }

  start(): void {
    this.proc.start();
    void this.proc.waitExit().then(() => {
      this.exitedAt = Date.now();
    });
  }

  async leading(): Promise<boolean> {
    return this.proc.running && (await metricsText(this.port)).includes(LEADING);
  }

  /** Sync'd and standing by: it answers /metrics and does not lead. */
  async standingBy(): Promise<boolean> {
    const text = this.proc.running ? await metricsText(this.port) : '';
    return text.includes(`leader_election_master_status{name="${LEASE}"} 0`);
  }

  signal(sig: NodeJS.Signals): void {
    const pid = this.proc.pid;
    if (pid !== undefined && this.proc.running) process.kill(pid, sig);
  }

  async stop(): Promise<void> {
    this.signal('SIGCONT');
    await this.proc.stop(5000);
  }
}

/**
 * Writes (anything but GET) other than to the Lease that the API server received from a proxy's
 * client and that were sent from `since` on: held back by a stall, or reaching the proxy after
 * `since`. (A write that reached the proxy in the same millisecond but before a stall began was
 * sent on at once, before it: it is not one of them.)
 */
function writesSince(proxy: HttpFaultProxy, since: number): ProxiedRequest[] {
  return proxy.requests.filter(
    (r) =>
      r.method !== 'GET' &&
      r.forwardedAt !== undefined &&
      (r.held === true || r.at > since) &&
      !r.path.includes('/leases/'),
  );
}

/** A write, with when it reached the proxy and was sent on relative to `since` (for a failure's message). */
const describeWrite = (r: ProxiedRequest, since: number): string =>
  `${r.method} ${r.path} (reached the proxy at +${String(r.at - since)} ms, sent on at +${String((r.forwardedAt ?? 0) - since)} ms${r.held === true ? ', held by the stall' : ''})`;

describe('leader fencing: the old leader sends no write once another may lead (real processes)', function () {
  this.timeout(300_000);
  let lc: LifecycleEnv;
  const replicas: Replica[] = [];
  const proxies: HttpFaultProxy[] = [];

  before(async function () {
    this.timeout(240_000);
    lc = await LifecycleEnv.start();
    await lc.createClass('virtual', {});
  });

  afterEach(async () => {
    await Promise.all(replicas.splice(0).map((r) => r.stop()));
    await Promise.all(proxies.splice(0).map((p) => p.stop()));
    // The next test's replicas start from a free Lease.
    await lc.client.delete(CoreResources.leases, LEASE, { namespace: NS }).catch(() => undefined);
  });

  after(async () => {
    await (lc as LifecycleEnv | undefined)?.stop();
  });

  async function replica(name: string): Promise<Replica> {
    const caData = lc.cp.kubeConfig.getCurrentCluster()?.caData;
    if (caData === undefined) throw new Error('the harness kubeconfig has no CA data');
    const proxy = new HttpFaultProxy(new URL(lc.cp.server), Buffer.from(caData, 'base64'));
    proxies.push(proxy);
    const proxyPort = await proxy.start();
    const kubeconfig = path.join(lc.cp.workDir, `fencing-${name}.kubeconfig`);
    writeFileSync(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        `- name: proxy\n  cluster:\n    server: http://127.0.0.1:${proxyPort}`,
        'users:',
        `- name: admin\n  user:\n    token: ${lc.cp.token}`,
        'contexts:',
        '- name: proxy\n  context:\n    cluster: proxy\n    user: admin',
        'current-context: proxy',
        '',
      ].join('\n'),
      { mode: 0o600 },
    );
    const r = new Replica(
      name,
      proxy,
      await freePort(),
      kubeconfig,
      path.join(lc.cp.workDir, `fencing-${name}.log`),
    );
    replicas.push(r);
    r.start();
    return r;
  }

  /** A leads, B stands by, and `app` has `replicas` Running machines. */
  async function setUp(app: string, count: number): Promise<{ a: Replica; b: Replica }> {
    const a = await replica(`${app}-a`);
    await until('replica a leads', () => a.leading(), 90_000);
    const b = await replica(`${app}-b`);
    await until('replica b stands by', () => b.standingBy(), 90_000);
    await lc.createDeployment(app, count, 'virtual');
    await until(`${count} Running machines of ${app}`, async () => {
      const ms = await lc.machines(app);
      return ms.length === count && ms.every((m) => phaseOf(m) === 'Running');
    });
    return { a, b };
  }

  const holder = async (): Promise<string> =>
    (await lc.client.get<Lease>(CoreResources.leases, LEASE, NS)).spec?.holderIdentity ?? '';

  it('a leader frozen (SIGSTOP) while the standby takes over and scales 3→6 sends no write after it resumes, and exits at once', async () => {
    const { a, b } = await setUp('frozen', 3);
    const leaderBefore = await holder();
    a.signal('SIGSTOP');
    await until('replica b leads', () => b.leading(), 60_000);
    expect(await holder()).to.not.equal(leaderBefore);
    await lc.scale('frozen', 6);
    await until('6 machines of frozen exist', async () => (await lc.machines('frozen')).length === 6);
    // The frozen leader's watches now hold the scale-up and its queues are full of due work.
    const resumedAt = Date.now();
    a.signal('SIGCONT');
    await until('the old leader exits', () => a.exitedAt !== undefined, 30_000);
    await new Promise((r) => setTimeout(r, 2000));
    expect(
      writesSince(a.proxy, resumedAt).map((r) => describeWrite(r, resumedAt)),
      'writes of the old leader after it resumed',
    ).to.deep.equal([]);
    // It notices at its first Lease renewal after the resume (the timer is overdue) and exits
    // within the half second it gives its controllers.
    expect((a.exitedAt ?? 0) - resumedAt, 'resume → exit (ms)').to.be.below(3000);
    expect(await b.leading(), 'the new leader keeps leading').to.equal(true);
    const ms = await lc.machines('frozen');
    expect(ms.filter((m) => m.metadata.deletionTimestamp === undefined)).to.have.length(6);
  });

  it('a leader whose connection to the API server stalls sends no write after the stall, and exits', async () => {
    const { a, b } = await setUp('stalled', 3);
    const stalledAt = Date.now();
    a.proxy.stall();
    await until('replica b leads', () => b.leading(), 60_000);
    await lc.scale('stalled', 6);
    await until('6 machines of stalled exist', async () => (await lc.machines('stalled')).length === 6);
    // Whatever the old leader sent or sends into the stalled connection must never land.
    a.proxy.unstall();
    await until('the old leader exits', () => a.exitedAt !== undefined, 30_000);
    await new Promise((r) => setTimeout(r, 2000));
    expect(
      writesSince(a.proxy, stalledAt).map((r) => describeWrite(r, stalledAt)),
      'writes of the old leader that reached the API server after the stall began',
    ).to.deep.equal([]);
    expect(await b.leading()).to.equal(true);
  });
});
