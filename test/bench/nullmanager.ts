// The "null manager" of the scale bench's floor: the fewest API requests per machine our design
// makes, with no controller logic and no cache beyond one watch, so that a run measures what the
// control plane itself (kube-apiserver and etcd on this machine) takes for our request mix.
//
// It watches the bench's MachineDeployment and follows its spec.replicas. Each new machine:
// create the bootstrap-token Secret, create the Machine (with its finalizer), create the VM (the
// virtual cloud's Node), patch the Machine with providerID and node label, patch its status to
// Pending and then to Running, delete the token: 7 requests. Each machine going: delete the
// Machine, patch its status to Terminating, delete the VM, remove the finalizer: 4 requests.
// With --node-writes (the default), also the Node requests MCM's behaviour asks of a controller:
// the node finalizer on the new Node (1 more, 8 in all), and when the machine goes the Node's
// Terminating condition, its cordon and the removal of its finalizer (3 more, 7 in all).
// Requests with no order between them go out together. Not a product: no retries beyond the
// client's, no ownership, no events.
//
// With --bodies=mcm (the default) the requests carry what gardener MCM's API puts in a Machine,
// so the API server handles objects of the size every compatible implementation writes: the
// owner reference (to the deployment; the null manager has no MachineSet), the template-hash
// label and the deletion-priority annotation, and in the status patches the lastOperation, the
// timeoutActive flag and, once Running, the Node's conditions. --bodies=minimal sends only the
// phase (the floor of the earlier runs).
//
// node dist/test/bench/nullmanager.js --kubeconfig=F --namespace=NS --deployment=NAME
//   --kube-api-qps=Q --kube-api-burst=B --port=P [--workers=50] [--node-writes=false]
//   [--bodies=mcm|minimal] [--watches=true]
//
// With --watches=true it also keeps a cache of its namespace's Machines and of all Nodes (our
// informers, no handlers): what any watch-based controller of these objects holds, to tell the
// cost of those watches (kube-apiserver sending each event, the process decoding it) from the rest.

import http from 'node:http';

import { MachineOperationType, MachinePhase, MachineState } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  type LastOperation,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { Informer, type DeepReadonly } from '../../lib/kube/informer.js';
import { KubeConfig } from '../../lib/kube/kubeconfig.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { DEFAULT_SHAPE } from '../../lib/providers/virtual/spec.js';
import { buildVmNode } from '../../lib/providers/virtual/vm.js';

const FINALIZER = 'machine.sapcloud.io/machine-controller-manager';
const NODE_FINALIZER = 'node.machine.sapcloud.io/machine-controller';

function flag(name: string, fallback?: string): string {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  const v = arg === undefined ? fallback : arg.slice(name.length + 3);
  if (v === undefined) throw new Error(`null manager: --${name} is required`);
  return v;
}

const namespace = flag('namespace');
const deployment = flag('deployment');
const workers = Number(flag('workers', '50'));
const nodeWrites = flag('node-writes', 'true') !== 'false';
const bodies = flag('bodies', 'mcm');
if (bodies !== 'mcm' && bodies !== 'minimal')
  throw new Error(`null manager: --bodies=${bodies}: mcm or minimal`);
const mcmBodies = bodies === 'mcm';
const watches = flag('watches', 'false') === 'true';
const client = new KubeClient({
  kubeConfig: KubeConfig.fromFile(flag('kubeconfig')),
  qps: Number(flag('kube-api-qps')),
  burst: Number(flag('kube-api-burst')),
  userAgent: 'mcm-null-manager',
});

/** Machines that exist (created and not yet deleted), by name, in creation order. */
const live = new Set<string>();
let wanted = 0;
let serial = 0;
let running = 0;
const queue: (() => Promise<void>)[] = [];

function now(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** The deployment the machines belong to (their owner reference under --bodies=mcm). */
let owner: { name: string; uid: string } | undefined;

function lastOperation(type: MachineOperationType, state: MachineState, description: string): LastOperation {
  return { type, state, description, lastUpdateTime: now() };
}

/** The status patch of a phase: the phase alone, or with what MCM writes beside it. */
function statusOf(name: string, phase: MachinePhase, node?: Node): Record<string, unknown> {
  const currentStatus = { phase, lastUpdateTime: now() };
  if (!mcmBodies) return { currentStatus };
  if (phase === MachinePhase.Pending) {
    return {
      currentStatus: { ...currentStatus, timeoutActive: true },
      lastOperation: lastOperation(
        MachineOperationType.Create,
        MachineState.Processing,
        'Creating machine on cloud provider',
      ),
    };
  }
  if (phase === MachinePhase.Running) {
    return {
      currentStatus: { ...currentStatus, timeoutActive: false },
      lastOperation: lastOperation(
        MachineOperationType.Create,
        MachineState.Successful,
        `Machine ${name} successfully joined the cluster in 1.5s`,
      ),
      conditions: node?.status?.conditions ?? [],
    };
  }
  return {
    currentStatus,
    lastOperation: lastOperation(
      MachineOperationType.Delete,
      MachineState.Processing,
      'Deleting machine from cloud provider',
    ),
  };
}

async function statusPhase(name: string, phase: MachinePhase, node?: Node): Promise<void> {
  await client.patch(
    MachineResource,
    name,
    { status: statusOf(name, phase, node) },
    { type: 'merge', namespace, subresource: 'status' },
  );
}

/** Labels, annotation and owner of a new Machine as MCM's MachineSet writes them. */
function machineMetadata(): Partial<Machine['metadata']> {
  const labels = { 'test-label': 'test-label' };
  if (!mcmBodies) return { labels };
  return {
    // A fixed value of a template hash's length: the null manager hashes nothing.
    labels: { ...labels, 'machine-template-hash': '3189508691' },
    annotations: { 'machinepriority.machine.sapcloud.io': '3' },
    ...(owner === undefined
      ? {}
      : {
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind: MachineDeploymentResource.kind,
              name: owner.name,
              uid: owner.uid,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        }),
  };
}

async function createOne(name: string): Promise<void> {
  const token = `bootstrap-token-${name}`;
  await client.create(CoreResources.secrets, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: token, namespace: 'default' },
    type: 'bootstrap.kubernetes.io/token',
    stringData: { 'token-id': name.slice(-6), 'token-secret': 'x'.repeat(16) },
  });
  const machine: Machine = {
    apiVersion: API_VERSION,
    kind: MachineResource.kind,
    metadata: { name, namespace, finalizers: [FINALIZER], ...machineMetadata() },
    spec: { class: { kind: 'MachineClass', name: 'bench' } },
  };
  await client.create(MachineResource, machine);
  const node = buildVmNode(
    {
      name,
      machine: name,
      machineClass: 'bench',
      shape: DEFAULT_SHAPE,
      bootAt: Date.now(),
      notReadyAt: undefined,
      bootNeverCompletes: false,
    },
    Date.now(),
  );
  await client.create(CoreResources.nodes, node);
  await Promise.all([
    client.patch(
      MachineResource,
      name,
      { metadata: { labels: { node: name } }, spec: { providerID: node.spec?.providerID } },
      { type: 'merge', namespace },
    ),
    nodeWrites
      ? client.patch(
          CoreResources.nodes,
          name,
          { metadata: { finalizers: [NODE_FINALIZER] } },
          { type: 'merge' },
        )
      : undefined,
  ]);
  await statusPhase(name, MachinePhase.Pending);
  await statusPhase(name, MachinePhase.Running, node);
  await client.delete(CoreResources.secrets, token, { namespace: 'default' });
}

async function deleteOne(name: string): Promise<void> {
  await client.delete(MachineResource, name, { namespace });
  if (!nodeWrites) {
    await statusPhase(name, MachinePhase.Terminating);
    await client.delete(CoreResources.nodes, name);
  } else {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    await Promise.all([
      statusPhase(name, MachinePhase.Terminating),
      client.patch(
        CoreResources.nodes,
        name,
        {
          status: {
            conditions: [
              {
                type: 'Terminating',
                status: 'True',
                reason: 'ScaleDown',
                message: 'Machine Controller is scaling down machine',
                lastHeartbeatTime: now,
                lastTransitionTime: now,
              },
            ],
          },
        },
        { type: 'strategic', subresource: 'status' },
      ),
      client.patch(CoreResources.nodes, name, { spec: { unschedulable: true } }, { type: 'merge' }),
    ]);
    await client.delete(CoreResources.nodes, name);
    await client.patch(CoreResources.nodes, name, { metadata: { finalizers: null } }, { type: 'merge' });
  }
  await client.patch(MachineResource, name, { metadata: { finalizers: null } }, { type: 'merge', namespace });
}

function pump(): void {
  while (running < workers) {
    const job = queue.shift();
    if (job === undefined) return;
    running++;
    void job()
      .catch((err: unknown) => {
        console.error('null manager:', err);
      })
      .finally(() => {
        running--;
        pump();
      });
  }
}

/** Queues creations or deletions so that `live` goes to `wanted`. */
function follow(): void {
  while (live.size < wanted) {
    const name = `${deployment}-${(serial++).toString(36).padStart(6, '0')}`;
    live.add(name);
    queue.push(() => createOne(name));
  }
  for (const name of live) {
    if (live.size <= wanted) break;
    live.delete(name);
    queue.push(() => deleteOne(name));
  }
  pump();
}

async function observe(md: DeepReadonly<MachineDeployment>): Promise<void> {
  owner = { name: md.metadata.name ?? '', uid: md.metadata.uid ?? '' };
  wanted = md.spec?.replicas ?? 0;
  follow();
  const generation = md.metadata.generation ?? 0;
  if ((md.status?.observedGeneration ?? 0) < generation) {
    await client.patch(
      MachineDeploymentResource,
      deployment,
      { status: { observedGeneration: generation } },
      { type: 'merge', namespace, subresource: 'status' },
    );
  }
}

const deployments = new Informer<MachineDeployment>({
  client,
  resource: MachineDeploymentResource,
  namespace,
  fieldSelector: `metadata.name=${deployment}`,
  logger: nullLogger,
});
const onDeployment = (md: DeepReadonly<MachineDeployment>): void => {
  observe(md).catch((err: unknown) => {
    console.error('null manager:', err);
  });
};
deployments.addHandler({
  onAdd: onDeployment,
  onUpdate: (_old, md) => {
    onDeployment(md);
  },
});
deployments.start();
if (watches) {
  new Informer<Machine>({ client, resource: MachineResource, namespace, logger: nullLogger }).start();
  new Informer<Node>({ client, resource: CoreResources.nodes, logger: nullLogger }).start();
}

http
  .createServer((_req, res) => {
    res.writeHead(200).end('ok');
  })
  .listen(Number(flag('port')), '127.0.0.1');
