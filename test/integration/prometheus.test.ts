// The chart's dashboard and alerts against real data: a real Prometheus scrapes a real manager
// (virtual provider, real kube-apiserver) every second, evaluates the chart's rendered rules every
// second, and the test reads both back through Prometheus's HTTP API while the fleet goes through
// what the dashboard shows: a scale 0→3→0 with a drain held by a PodDisruptionBudget, machines
// whose node does not join in time or turns NotReady, a zone out of capacity, cluster-autoscaler's
// calls, and a MachineSet frozen for overshooting.

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { API_VERSION, MachineResource, MachineSetResource } from '../../lib/api/types.js';
import type { Machine, MachineSet } from '../../lib/api/types.js';
import { parseNodeGroupFlag } from '../../lib/autoscaler/groups.js';
import { isTerminating } from '../../lib/controllers/machines.js';
import { errorMessage } from '../../lib/kube/errors.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Manager } from '../../lib/manager.js';
import type { Pod } from '../../lib/kube/types.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { cloudProviderClient, type CloudProviderClient } from '../harness/grpcclient.js';
import { removeOnExit } from '../harness/process.js';
import { Helm } from './env/chart.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import {
  MCM_JOB,
  Prometheus,
  RELEASE_NAMESPACE,
  queryPanels,
  readDashboard,
  renderRuleGroups,
  type DashboardPanel,
  type PromAlert,
} from './env/prometheus.js';
import { until } from './env/until.js';

const SCRAPE_S = 1;
/** $__rate_interval as Grafana computes it for a 1 s step: max(step + scrape, 4 × scrape). */
const RATE_INTERVAL = `${Math.max(1 + SCRAPE_S, 4 * SCRAPE_S)}s`;
/** metrics.prometheusRule.frozenFor in the rendered rules (chart default 5m). */
const FROZEN_FOR_S = 3;
const FREEZE_ALERT = 'MCMMachineSetOvershootFrozen';

const PDBS = {
  group: 'policy',
  version: 'v1',
  plural: 'poddisruptionbudgets',
  kind: 'PodDisruptionBudget',
  namespaced: true,
} as const;

/**
 * Refuses to delete machines labelled `hold`, as a policy engine would: the MachineSet cannot
 * remove its surplus, so it stays overshooting (and frozen) until the label goes.
 */
const HOLD_POLICY = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: hold-machines
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [machine.sapcloud.io]
        apiVersions: ['*']
        operations: [DELETE]
        resources: [machines]
  validations:
    - expression: "!has(oldObject.metadata.labels) || !('hold' in oldObject.metadata.labels)"
      message: the machine is held
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: hold-machines
spec:
  policyName: hold-machines
  validationActions: [Deny]
`;

/**
 * Panel queries (panel: legend) this run need not fill: a Failed machine is replaced at once, so
 * its phase is scraped only by chance. Every other query of the dashboard must return data.
 */
const MAY_BE_EMPTY = ['Machines by phase: Failed'];

const now = (): number => Date.now() / 1000;
const escapeRegex = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('the chart’s dashboard and alerts on a real Prometheus scraping a real manager (real kube-apiserver)', function () {
  this.timeout(120_000);
  let env: LifecycleEnv;
  let manager: Manager;
  let prom: Prometheus;
  let autoscaler: CloudProviderClient | undefined;
  let calls: ReturnType<typeof callingLoop> | undefined;
  let startedAt = 0;

  before(async function () {
    this.timeout(120_000);
    const work = mkdtempSync(path.join(tmpdir(), 'mcm-prometheus-'));
    removeOnExit(work);
    const rules = await renderRuleGroups(new Helm(), [`metrics.prometheusRule.frozenFor=${FROZEN_FOR_S}s`]);
    env = await LifecycleEnv.start();
    await env.cp.applyYaml(HOLD_POLICY);
    await holdPolicyInEffect(env);
    manager = await env.startManager(
      {
        leaderElect: true,
        grpcAddress: '127.0.0.1:0',
        grpcInsecure: true,
        nodeGroups: [parseNodeGroupFlag(`0:5:${NS}.fleet`)],
        machineSafetyOvershootingPeriodMs: 1_000,
      },
      // The Node.js process metrics too, as the manager's command registers them.
      { registry: newRegistry(true) },
    );
    startedAt = now();
    prom = await Prometheus.start({
      dir: work,
      targets: [`127.0.0.1:${manager.port}`],
      // What a ServiceMonitor's target carries (the machine metrics keep their own namespace).
      targetLabels: { namespace: RELEASE_NAMESPACE, pod: 'mcm-0', service: MCM_JOB, endpoint: 'metrics' },
      rules,
      scrapeIntervalS: SCRAPE_S,
      evaluationIntervalS: 1,
    });
    await until('Prometheus scrapes the manager', async () => {
      const up = await prom.query(`up{job="${MCM_JOB}"}`);
      return up[0]?.value?.[1] === '1';
    });
    // cluster-autoscaler's loop, once a second: the leader serves gRPC once it leads.
    const port = await until('the gRPC server', () => (manager.grpcPort > 0 ? manager.grpcPort : undefined));
    const client = cloudProviderClient(`127.0.0.1:${port}`);
    autoscaler = client;
    // Refresh is UNAVAILABLE until the caches are synced: the loop starts once it answers.
    await until('Refresh answered', () => client.call('Refresh', {}, { deadlineMs: 2_000 }).then(() => true));
    calls = callingLoop(client);
  });

  after(async () => {
    await calls?.stop();
    autoscaler?.close();
    await (prom as Prometheus | undefined)?.stop();
    await (env as LifecycleEnv | undefined)?.stop();
  });

  it('a MachineDeployment scales 0→3→0 with a drain held by a PodDisruptionBudget, beside machines that do not join, go Unknown or find their zone full; Prometheus sees each', async () => {
    await env.createClass('fleet');
    await env.createClass('slow', { bootDelay: '1h' });
    await env.createClass('flaky', { failure: { notReadyAfter: '1s' } });
    await env.createClass('full', { zoneCapacity: { 'virtual-zone-a': 0 } });
    // Nodes that do not join within the creation timeout, one that turns NotReady, a full zone.
    await env.createDeployment('slow', 1, 'slow', {}, { creationTimeout: '2s' });
    await env.createDeployment('flaky', 1, 'flaky');
    await env.createDeployment('full', 1, 'full');
    await env.createDeployment('fleet', 0, 'fleet');
    const seen = async (what: string, expr: string): Promise<void> => {
      await until(`Prometheus sees ${what}`, async () => (await prom.query(expr)).length > 0);
    };

    await env.scale('fleet', 3);
    const running = await until('3 machines of fleet Running', async () => {
      const ms = (await env.machines('fleet')).filter((m) => phaseOf(m) === 'Running');
      return ms.length === 3 ? ms : undefined;
    });
    await until('Prometheus sees 3 Running machines of fleet', async () => {
      const r = await prom.query(
        `count(mcm_machine_current_status_phase{job="${MCM_JOB}", namespace="${NS}", name=~"fleet-.*"} == 1)`,
      );
      return r[0]?.value?.[1] === '3';
    });

    // A pod on one node whose budget allows no eviction (no disruption controller computes it).
    // A virtual VM's node has its machine's name.
    const node = running[0]?.metadata.name ?? '';
    const pod = await env.client.create<Pod>(CoreResources.pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web-0', namespace: NS, labels: { app: 'web' } },
      spec: { nodeName: node, containers: [{ name: 'app', image: 'registry.invalid/app:1' }] },
    });
    // No kubelet here: the pod is reported Running and Ready by hand (a Pending pod ignores budgets).
    await env.client.patch(
      CoreResources.pods,
      'web-0',
      {
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: new Date().toISOString() }],
        },
      },
      { type: 'merge', namespace: NS, subresource: 'status' },
    );
    await env.client.create(PDBS, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'web', namespace: NS },
      spec: { minAvailable: 1, selector: { matchLabels: { app: 'web' } } },
    });

    await env.scale('fleet', 0);
    const blocking = await until('Prometheus sees the pod blocking the drain', async () => {
      const r = await prom.query(`mcm_machine_drain_blocking_pods{job="${MCM_JOB}", reason="pdb"}`);
      return r.length > 0 ? r : undefined;
    });
    expect(blocking[0]?.metric).to.include({ namespace: NS, pod: `${NS}/web-0`, pdb: `${NS}/web` });
    await seen('Terminating machines', `mcm_machine_current_status_phase{job="${MCM_JOB}"} == -4`);
    const phase = (set: string, value: number): string =>
      `mcm_machine_current_status_phase{job="${MCM_JOB}", name=~"${set}-.*"} == ${value}`;
    await seen('a Pending machine waiting for its node', phase('slow', 0));
    await seen('a machine whose node did not join', `mcm_machine_num_failed_join{job="${MCM_JOB}"}`);
    await seen('an Unknown machine (its node NotReady)', phase('flaky', -1));
    await seen('a machine in CrashLoopBackOff (its zone full)', phase('full', -2));
    await seen(
      'CreateMachine refused for the full zone',
      `mcm_cloud_api_driver_requests_failed_total{job="${MCM_JOB}", operation="create_machine", error_code="ResourceExhausted"}`,
    );
    // The pod goes (its workload moved elsewhere): the drain finishes.
    await env.client.delete(CoreResources.pods, 'web-0', {
      namespace: NS,
      gracePeriodSeconds: 0,
      preconditions: { uid: pod.metadata.uid ?? '' },
    });
    await until('no machine of fleet left', async () => (await env.machines('fleet')).length === 0);
    await until('Prometheus sees no machine of fleet', async () => {
      const r = await prom.query(`mcm_machine_current_status_phase{job="${MCM_JOB}", name=~"fleet-.*"}`);
      return r.length === 0;
    });
  });

  it('a MachineSet frozen for overshooting fires MCMMachineSetOvershootFrozen, which resolves once it unfreezes', async () => {
    const labels = { app: 'held' };
    const ms = await env.client.create<MachineSet>(MachineSetResource, {
      apiVersion: API_VERSION,
      kind: 'MachineSet',
      metadata: { name: 'held', namespace: NS },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: { metadata: { labels }, spec: { class: { kind: 'MachineClass', name: 'fleet' } } },
      },
    });
    await until('the machine of the set', async () => (await env.machines('held')).length === 1);
    // Four more machines appear under the set (it freezes above 2 × 1 + --safety-up 2 = 4) and
    // cannot be deleted.
    for (let i = 0; i < 4; i++) {
      await env.client.create<Machine>(MachineResource, {
        apiVersion: API_VERSION,
        kind: 'Machine',
        metadata: {
          name: `held-extra-${i}`,
          namespace: NS,
          labels: { ...labels, hold: 'true' },
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind: 'MachineSet',
              name: 'held',
              uid: ms.metadata.uid ?? '',
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        },
        spec: { class: { kind: 'MachineClass', name: 'fleet' } },
      });
    }
    const states = new Set<string>();
    const firing = await until(
      `${FREEZE_ALERT} firing for ${NS}/held`,
      async () => {
        const a = freezeAlert(await prom.alerts());
        if (a !== undefined) states.add(a.state);
        return a?.state === 'firing' ? a : undefined;
      },
      30_000,
    );
    expect(firing.labels).to.include({
      alertname: FREEZE_ALERT,
      namespace: NS,
      name: 'held',
      severity: 'critical',
    });
    expect(firing.annotations.summary).to.equal(`MachineSet ${NS}/held is frozen for overshooting`);
    expect([...states], 'pending for frozenFor before firing').to.include('pending');
    const frozenFor = now() - Date.parse(firing.activeAt) / 1000;
    expect(frozenFor, 'seconds since the alert became active').to.be.at.least(FROZEN_FOR_S);

    // The hold goes: the set deletes its surplus and unfreezes, and the alert resolves.
    for (let i = 0; i < 4; i++) {
      await env.client.patch(
        MachineResource,
        `held-extra-${i}`,
        { metadata: { labels: { hold: null } } },
        { type: 'merge', namespace: NS },
      );
    }
    await until('the set unfrozen', async () => {
      const got = await env.client.get<MachineSet>(MachineSetResource, 'held', NS);
      return !(got.status?.machineSetCondition ?? []).some((c) => c.type === 'Frozen' && c.status === 'True');
    });
    await until(
      `${FREEZE_ALERT} resolved`,
      async () => freezeAlert(await prom.alerts()) === undefined,
      30_000,
    );
    await until('one machine of the set staying', async () => {
      const ms = await env.machines('held');
      return ms.filter((m) => !isTerminating(m)).length === 1;
    });
  });

  it('every panel of the dashboard has data over the run (Grafana’s variables filled as "All")', async () => {
    // The gRPC panels show the stand-in autoscaler's calls: they must have been answered.
    expect(calls?.record.failures, 'gRPC calls that failed').to.deep.equal([]);
    expect(calls?.record.ok.get('Refresh') ?? 0, 'Refresh calls answered').to.be.greaterThan(0);
    expect(calls?.record.ok.get('NodeGroups') ?? 0, 'NodeGroups calls answered').to.be.greaterThan(0);
    // Two more scrapes and evaluations, so the last steps are in the TSDB.
    const until2 = now() + 2 * SCRAPE_S + 0.5;
    await until('two more scrapes', () => now() > until2);
    const end = now();
    const dashboard = readDashboard();
    const vars = new Map<string, string>();
    for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) {
      const m = /^label_values\((.+),\s*(\w+)\)$/.exec(v.definition ?? '');
      expect(m, `variable $${v.name}: ${v.definition ?? ''}`).to.not.equal(null);
      const selector = fill(m?.[1] ?? '', vars);
      const values = await prom.labelValues(m?.[2] ?? '', selector, startedAt, end);
      expect(values, `values of $${v.name} (${selector})`).to.not.deep.equal([]);
      // A multi-value variable set to All: a regex alternation of every value.
      vars.set(v.name, `(${values.map(escapeRegex).join('|')})`);
    }
    expect(vars.get('job')).to.contain(MCM_JOB);

    const empty: string[] = [];
    const panels = queryPanels(dashboard);
    expect(panels.length).to.be.greaterThan(20);
    for (const panel of panels) {
      for (const t of await panelData(panel, vars, end)) {
        if (t.samples > 0 || MAY_BE_EMPTY.includes(`${panel.title}: ${t.legend}`)) continue;
        empty.push(`${panel.title}: ${t.legend}: ${t.expr} (${t.error ?? 'no data'})`);
      }
    }
    expect(empty, 'panel queries without data').to.deep.equal([]);
  });

  /** Each target's query over the run as Grafana sends it; `or vector(0)` fallbacks left off. */
  async function panelData(
    panel: DashboardPanel,
    vars: Map<string, string>,
    end: number,
  ): Promise<{ legend: string; expr: string; samples: number; error?: string }[]> {
    const out: { legend: string; expr: string; samples: number; error?: string }[] = [];
    for (const t of panel.targets ?? []) {
      const expr = fill(t.expr, vars).replace(/\s+or\s+vector\(0\)\s*$/, '');
      const legend = t.legendFormat ?? '';
      try {
        const series = await prom.queryRange(expr, startedAt, end, 1);
        // What Grafana draws: NaN (a histogram without observations in the window) is a gap.
        const samples = series.flatMap((x) => x.values ?? []).filter(([, v]) => v !== 'NaN').length;
        out.push({ legend, expr, samples });
      } catch (err) {
        out.push({ legend, expr, samples: 0, error: errorMessage(err) });
      }
    }
    return out;
  }

  function fill(expr: string, vars: Map<string, string>): string {
    return expr
      .replaceAll('$__rate_interval', RATE_INTERVAL)
      .replace(/\$\{?(\w+)\}?/g, (whole, name: string) => vars.get(name) ?? whole);
  }

  const freezeAlert = (alerts: PromAlert[]): PromAlert | undefined =>
    alerts.find((a) => a.labels.alertname === FREEZE_ALERT && a.labels.name === 'held');
});

/** Waits until the hold policy refuses a delete (the API server loads policies asynchronously). */
async function holdPolicyInEffect(env: LifecycleEnv): Promise<void> {
  await env.client.create(CoreResources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: 'probe' },
  });
  await env.client.create<Machine>(MachineResource, {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: { name: 'probe', namespace: 'probe', labels: { hold: 'true' } },
    spec: { class: { kind: 'MachineClass', name: 'none' } },
  });
  await until('the hold policy refusing a delete', async () => {
    try {
      await env.client.delete(MachineResource, 'probe', { namespace: 'probe', dryRun: true });
      return false;
    } catch (err) {
      return errorMessage(err).includes('the machine is held');
    }
  });
}

/** What the stand-in autoscaler's calls answered: successes by method, and every failure. */
interface CallRecord {
  ok: Map<string, number>;
  failures: string[];
}

/**
 * cluster-autoscaler's calls, once a second, until stop() is called. Every answer is recorded (the
 * loop goes on after a failure, as the autoscaler's does), so the test can assert that the calls
 * the panels show succeeded.
 */
function callingLoop(client: CloudProviderClient): { record: CallRecord; stop: () => Promise<void> } {
  const state = { stopped: false };
  const record: CallRecord = { ok: new Map(), failures: [] };
  const loop = (async (): Promise<void> => {
    while (!state.stopped) {
      for (const method of ['Refresh', 'NodeGroups']) {
        try {
          await client.call(method, {}, { deadlineMs: 2_000 });
          record.ok.set(method, (record.ok.get(method) ?? 0) + 1);
        } catch (err) {
          record.failures.push(`${method}: ${errorMessage(err)}`);
        }
      }
      await new Promise((r) => setTimeout(r, 1_000));
    }
  })();
  return {
    record,
    stop: async () => {
      state.stopped = true;
      await loop;
    },
  };
}
