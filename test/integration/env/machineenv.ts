import { defaultConfig, type ManagerConfig } from '../../../lib/config.js';
import { KubeClient, type KubeApi } from '../../../lib/kube/client.js';
import { Manager } from '../../../lib/manager.js';
import { createLogger, nullLogger, type Logger } from '../../../lib/observability/logger.js';
import {
  startControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from '../../harness/controlplane.js';
import { laggingWatches } from './lag.js';
import { StandInMachineController, type StandInOptions } from './standin.js';

export interface MachineEnvOptions {
  /** Stand-in for the machine controller; false to run without one. */
  standIn?: StandInOptions | false;
  /** Overrides of the manager configuration (leader election is off unless set). */
  config?: Partial<ManagerConfig>;
  controlPlane?: ControlPlaneOptions;
  /** Delay every watch event the manager's informers receive (cache lag). */
  watchLagMs?: number;
}

export interface MachineEnv {
  cp: ControlPlane;
  /** A client for the test itself (not rate limited). */
  client: KubeClient;
  manager: Manager;
  standIn: StandInMachineController | undefined;
  namespace: string;
  logger: Logger;
  stop(): Promise<void>;
}

/** Set MCM_TEST_LOG=1 (or a --v number) to see the manager's logs while a test runs. */
function testLogger(): Logger {
  const v = process.env.MCM_TEST_LOG;
  if (v === undefined || v === '' || v === '0') return nullLogger;
  return createLogger({ verbosity: v === '1' ? 4 : Number(v), format: 'text' });
}

/**
 * A real control plane with the CRDs, the manager (MachineSet, MachineDeployment and safety
 * controllers) running in-process against it, and a stand-in machine controller.
 */
export async function startMachineEnv(opts: MachineEnvOptions = {}): Promise<MachineEnv> {
  const cp = await startControlPlane({ installCRDs: true, ...opts.controlPlane });
  const logger = testLogger();
  const client = new KubeClient({
    kubeConfig: cp.kubeConfig,
    qps: 500,
    burst: 500,
    userAgent: 'integration-test',
  });
  const config: ManagerConfig = {
    ...defaultConfig,
    namespace: 'default',
    leaderElect: false,
    address: '127.0.0.1',
    port: 0,
    concurrentSyncs: 5,
    kubeApiQps: 200,
    kubeApiBurst: 400,
    machineSafetyOvershootingPeriodMs: 5_000,
    // With the stand-in, the real machine-side controllers stay off: both would act on machines.
    ...(opts.standIn === false ? {} : { controllers: ['machineset', 'machinedeployment', 'safety'] }),
    ...opts.config,
  };
  const lag = opts.watchLagMs;
  const manager = new Manager(config, {
    logger: logger.child({ component: 'manager' }),
    controlKubeConfig: cp.kubeConfig,
    ...(lag === undefined ? {} : { wrapInformerClient: (c: KubeApi) => laggingWatches(c, lag) }),
  });
  let standIn: StandInMachineController | undefined;
  try {
    await manager.start();
    if (opts.standIn !== false) {
      standIn = new StandInMachineController(
        client,
        'default',
        opts.standIn ?? {},
        logger.child({ component: 'standin' }),
      );
      await standIn.start();
    }
  } catch (err) {
    await manager.stop().catch(() => undefined);
    client.close();
    await cp.stop();
    throw err;
  }
  return {
    cp,
    client,
    manager,
    standIn,
    namespace: 'default',
    logger,
    async stop() {
      await standIn?.stop();
      await manager.stop();
      client.close();
      await cp.stop();
    },
  };
}
