import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';

import type { Lease } from '../../lib/kube/types.js';
import { DEFAULT_LEASE_DURATION_MS, DEFAULT_RETRY_PERIOD_MS } from '../../lib/kube/leaderelection.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';

const candidateScript = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  'fixtures',
  'leader-candidate.js',
);

interface Transition {
  event: string;
  identity: string;
  at: number;
  /** On "leader": the holder this candidate observed. */
  leader?: string;
}

/** A candidate process and the transitions it printed. */
class Candidate {
  readonly transitions: Transition[] = [];
  readonly child: ChildProcess;
  private listeners: (() => void)[] = [];
  exited = false;

  constructor(
    cp: ControlPlane,
    lease: string,
    readonly identity: string,
  ) {
    this.child = spawn(process.execPath, [candidateScript, cp.kubeconfigPath, 'default', lease, identity], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let buf = '';
    this.child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        this.transitions.push(JSON.parse(line) as Transition);
        for (const l of this.listeners) l();
        nl = buf.indexOf('\n');
      }
    });
    this.child.on('exit', () => {
      this.exited = true;
      for (const l of this.listeners) l();
    });
  }

  leading(): boolean {
    let leading = false;
    for (const t of this.transitions) {
      if (t.event === 'started') leading = true;
      if (t.event === 'stopped') leading = false;
    }
    return leading && !this.exited;
  }

  /** Resolves with the time of the first transition of this kind after `after` (that `match`es). */
  waitFor(
    event: string,
    timeoutMs: number,
    after = 0,
    match: (t: Transition) => boolean = () => true,
  ): Promise<number> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const t = this.transitions.find((x) => x.event === event && x.at >= after && match(x));
        if (t !== undefined) {
          resolve(t.at);
          return true;
        }
        return false;
      };
      if (check()) return;
      const timer = setTimeout(() => {
        reject(new Error(`${this.identity}: no '${event}' within ${timeoutMs} ms`));
      }, timeoutMs);
      this.listeners.push(() => {
        if (check()) clearTimeout(timer);
      });
    });
  }

  kill(signal: NodeJS.Signals): void {
    if (!this.exited) this.child.kill(signal);
  }
}

describe('leader election on a real Lease (two processes)', function () {
  this.timeout(180_000);
  let cp: ControlPlane;
  const candidates: Candidate[] = [];

  before(async function () {
    this.timeout(180_000);
    cp = await startControlPlane();
  });

  afterEach(() => {
    for (const c of candidates.splice(0)) c.kill('SIGKILL');
  });

  after(async () => {
    await (cp as ControlPlane | undefined)?.stop();
  });

  async function leaseHolder(name: string): Promise<string> {
    const r = await cp.request('GET', `/apis/coordination.k8s.io/v1/namespaces/default/leases/${name}`);
    return (r.body as Lease).spec?.holderIdentity ?? '';
  }

  /** Samples who leads every 100 ms and fails if two candidates ever lead at once. */
  function watchExclusive(list: Candidate[]): { stop: () => void; violations: string[] } {
    const violations: string[] = [];
    const timer = setInterval(() => {
      const leaders = list.filter((c) => c.leading()).map((c) => c.identity);
      if (leaders.length > 1) violations.push(`${new Date().toISOString()}: ${leaders.join(', ')}`);
    }, 100);
    return {
      stop: () => {
        clearInterval(timer);
      },
      violations,
    };
  }

  /**
   * The candidate that won the first election, once the other has observed it as the holder: from
   * then on the follower tracks the Lease's renewals and a handover can be timed.
   */
  async function electedPair(
    a: Candidate,
    b: Candidate,
  ): Promise<{ leader: Candidate; follower: Candidate }> {
    await Promise.race([a.waitFor('started', 30_000), b.waitFor('started', 30_000)]);
    const leader = leaderOf([a, b]);
    const follower = leader === a ? b : a;
    await follower.waitFor('leader', 30_000, 0, (t) => t.leader === leader.identity);
    return { leader, follower };
  }

  function leaderOf(list: Candidate[]): Candidate {
    const leaders = list.filter((c) => c.leading());
    expect(leaders, 'exactly one leader').to.have.length(1);
    const leader = leaders[0];
    if (leader === undefined) throw new Error('no leader');
    return leader;
  }

  it('elects exactly one leader and, after SIGKILL of the leader, hands over within the lease duration plus one jittered retry period (and 1 s for the new leader to report)', async () => {
    const a = new Candidate(cp, 'kill-test', 'candidate-a');
    const b = new Candidate(cp, 'kill-test', 'candidate-b');
    candidates.push(a, b);
    const exclusive = watchExclusive([a, b]);
    const { leader, follower } = await electedPair(a, b);
    expect(leaderOf([a, b])).to.equal(leader);
    expect(await leaseHolder('kill-test')).to.equal(leader.identity);

    const killedAt = Date.now();
    leader.kill('SIGKILL');
    const takeoverAt = await follower.waitFor('started', 40_000, killedAt);
    const handover = takeoverAt - killedAt;
    // The follower may have observed the last renewal up to one jittered retry period late.
    expect(handover).to.be.at.most(DEFAULT_LEASE_DURATION_MS + DEFAULT_RETRY_PERIOD_MS * 1.2 + 1000);
    expect(await leaseHolder('kill-test')).to.equal(follower.identity);
    exclusive.stop();
    expect(exclusive.violations).to.deep.equal([]);
  });

  it('hands over within one jittered retry period (and 1.5 s for the exit and the report) when the leader stops gracefully and releases the Lease', async () => {
    const a = new Candidate(cp, 'release-test', 'candidate-c');
    const b = new Candidate(cp, 'release-test', 'candidate-d');
    candidates.push(a, b);
    const exclusive = watchExclusive([a, b]);
    const { leader, follower } = await electedPair(a, b);

    const stoppedAt = Date.now();
    leader.kill('SIGTERM');
    await leader.waitFor('exit', 10_000, stoppedAt);
    const takeoverAt = await follower.waitFor('started', 20_000, stoppedAt);
    expect(takeoverAt - stoppedAt).to.be.at.most(DEFAULT_RETRY_PERIOD_MS * 1.2 + 1500);
    expect(await leaseHolder('release-test')).to.equal(follower.identity);
    exclusive.stop();
    expect(exclusive.violations).to.deep.equal([]);
  });
});
