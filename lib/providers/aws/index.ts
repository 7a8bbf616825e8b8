import type { Driver } from '../../driver/driver.js';
import type { ProviderFactory } from '../../driver/registry.js';
import { AwsDriver } from './driver.js';
import { sdkEc2Api, type Ec2ApiFactory } from './client.js';
import { AwsPricing, type AwsPricingOptions } from './prices/pricing.js';
import { InstanceHealthMetrics, InstanceHealthPoller, type InstanceHealthSettings } from './health/poller.js';
import { InterruptionMetrics, InterruptionPoller, type PollerHooks } from './interruption/poller.js';
import { NoticeReason, type InterruptionSettings } from './interruption/notices.js';
import { sqsInterruptionQueue, type InterruptionQueue } from './interruption/queue.js';
import type { WriteFence } from '../../kube/fence.js';
import type { VmNoticeSink } from '../../driver/notices.js';
import { UnavailableOfferings, offeringMetrics } from './offerings.js';
import type { MachineClass } from '../../api/types.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Secret } from '../../kube/types.js';

export { AWS_PROVIDER, AWS_PROVIDER_ID_PREFIX } from './driver.js';

/**
 * The driver, telling pricing and the health poll of the class and Secret of the calls that carry
 * them on a class's regular path: CreateMachine, GetMachineStatus, and ListMachines (the orphan
 * collection lists every class, machines or not, at start and every period).
 */
function observedDriver(driver: AwsDriver, observers: readonly Observer[]): Driver {
  const observe = (cls: DeepReadonly<MachineClass>, secret: Secret): void => {
    for (const o of observers) o.observeRequest(cls, secret);
  };
  return {
    createMachine: (req, signal) => {
      observe(req.machineClass, req.secret);
      return driver.createMachine(req, signal);
    },
    initializeMachine: (req, signal) => driver.initializeMachine(req, signal),
    deleteMachine: (req, signal) => driver.deleteMachine(req, signal),
    getMachineStatus: (req, signal) => {
      observe(req.machineClass, req.secret);
      return driver.getMachineStatus(req, signal);
    },
    listMachines: (req, signal) => {
      observe(req.machineClass, req.secret);
      return driver.listMachines(req, signal);
    },
    getVolumeIDs: (req) => driver.getVolumeIDs(req),
  };
}

/** What learns a class's region and credentials from the driver's calls. */
interface Observer {
  observeRequest(machineClass: DeepReadonly<MachineClass>, secret: Secret): void;
}

/** The interruption queue of the AWS provider (--aws-interruption-queue and its settings). */
export interface AwsInterruptionOptions {
  /** The SQS queue URL. */
  queueUrl: string;
  settings: InterruptionSettings;
  /** Makes the queue (default: the SQS client). */
  queue?: (url: string, fence: WriteFence | undefined) => InterruptionQueue;
  /** Test seams of the reader. */
  hooks?: PollerHooks;
}

export interface AwsProviderOptions {
  ec2?: Ec2ApiFactory;
  spot?: AwsPricingOptions['spot'];
  /** Reads interruption notices from an SQS queue (leader only) when given. */
  interruption?: AwsInterruptionOptions | undefined;
  /**
   * Polls EC2's instance status checks (leader only) and fails the machines of instances impaired
   * for too long, when given with an interval above 0 (the manager passes its flags; unset, none).
   */
  health?: (InstanceHealthSettings & { random?: () => number }) | undefined;
  /**
   * --aws-unavailable-offering-ttl: how long an offering stays unavailable after a capacity error
   * (or, opted in, a Spot interruption; default 3 minutes; 0: never marked).
   */
  unavailableOfferingTtlMs?: number;
  /**
   * --aws-unavailable-after-interruption: a Spot interruption marks its instance's offering
   * unavailable too (Karpenter's choice; default false: the replacement is launched at once, and
   * only EC2's own capacity answer marks the offering).
   */
  unavailableAfterInterruption?: boolean;
  /** How long an instance lookup waits to share its DescribeInstances (tests; the driver's default). */
  lookupGatherMs?: number;
}

/** The default of --aws-unavailable-offering-ttl. */
export const DEFAULT_UNAVAILABLE_OFFERING_TTL_MS = 3 * 60_000;

/** The instance id a providerID `aws:///<region>/<id>` names. */
const instanceIdOf = (providerID: string): string => providerID.slice(providerID.lastIndexOf('/') + 1);

/**
 * The sink, marking the offering of an instance whose Spot capacity is reclaimed first: the mark
 * must stand before the record on the machine makes its MachineSet create the replacement.
 */
function markingSink(sink: VmNoticeSink, offerings: UnavailableOfferings): VmNoticeSink {
  return {
    handle: (notice, signal) => {
      if (notice.reason === NoticeReason.SpotInterruption)
        offerings.markInterrupted(instanceIdOf(notice.providerID));
      return sink.handle(notice, signal);
    },
  };
}

/**
 * The AWS EC2 provider (`MachineClass.provider: AWS`, gardener's value): gardener's AWS
 * providerSpec and Secret keys, on @aws-sdk/client-ec2. The endpoint comes from the SDK's
 * standard AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL variables. Node prices for the autoscaler's
 * price expander: on-demand list prices, and spot prices refreshed in the background (prices/).
 * With an interruption queue, its notices (Spot interruptions, rebalance recommendations, state
 * changes, scheduled changes) go to the manager's sink while the provider runs (interruption/).
 * Without a queue too, instances EC2's status checks report impaired for too long are handed to
 * the sink (health/).
 */
export function awsProvider(opts: AwsProviderOptions = {}): ProviderFactory {
  return (ctx) => {
    const logger = ctx.logger.child({ provider: 'AWS' });
    // Registered whether a queue is read or not: the metrics page lists them, dashboards find 0.
    const interruptionMetrics = InterruptionMetrics.of(ctx.registry);
    let poller: InterruptionPoller | undefined;
    let queue: InterruptionQueue | undefined;
    const ec2 = opts.ec2 ?? sdkEc2Api;
    const offerings = new UnavailableOfferings({
      ttlMs: opts.unavailableOfferingTtlMs ?? DEFAULT_UNAVAILABLE_OFFERING_TTL_MS,
      clock: ctx.clock,
      metrics: offeringMetrics(ctx.registry),
    });
    const pricing = new AwsPricing({
      ec2,
      clock: ctx.clock,
      logger: logger.child({ component: 'prices' }),
      registry: ctx.registry,
      ...(opts.spot === undefined ? {} : { spot: opts.spot }),
    });
    const driver = new AwsDriver({
      logger,
      fence: ctx.fence,
      ec2,
      ...(opts.lookupGatherMs === undefined ? {} : { lookupGatherMs: opts.lookupGatherMs }),
      onInstance: (i) => {
        pricing.observeInstance(i);
        offerings.observeInstance(i);
      },
      offerings,
    });
    // Registered whether the poll runs or not, as the interruption metrics.
    const healthMetrics = InstanceHealthMetrics.of(ctx.registry);
    const sink = ctx.notices;
    // Made at once, so that the driver calls before start() show it what to poll.
    const health =
      opts.health === undefined || opts.health.intervalMs <= 0 || sink === undefined
        ? undefined
        : new InstanceHealthPoller({
            ec2,
            sink,
            settings: opts.health,
            clock: ctx.clock,
            logger,
            metrics: healthMetrics,
            ...(opts.health.random === undefined ? {} : { random: opts.health.random }),
          });
    return {
      driver: observedDriver(driver, health === undefined ? [pricing] : [pricing, health]),
      nodePrice: (req) => pricing.nodePrice(req),
      start: () => {
        pricing.start();
        offerings.open();
        health?.start();
        const interruption = opts.interruption;
        if (interruption === undefined || poller !== undefined) return;
        if (ctx.notices === undefined) {
          logger.warn('an interruption queue is configured, but nothing takes its notices: not reading it', {
            queue: interruption.queueUrl,
          });
          return;
        }
        queue = (interruption.queue ?? ((url, fence) => sqsInterruptionQueue(url, { fence })))(
          interruption.queueUrl,
          ctx.fence,
        );
        poller = new InterruptionPoller({
          queue,
          sink:
            opts.unavailableAfterInterruption === true ? markingSink(ctx.notices, offerings) : ctx.notices,
          settings: interruption.settings,
          clock: ctx.clock,
          logger,
          metrics: interruptionMetrics,
          hooks: interruption.hooks,
        });
        poller.start();
      },
      stop: async () => {
        await Promise.all([pricing.stop(), poller?.stop(), health?.stop()]);
        poller = undefined;
        queue?.close();
        queue = undefined;
        driver.close();
        offerings.close();
      },
    };
  };
}
