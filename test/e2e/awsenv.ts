// The world of the AWS e2e scenarios: the EC2 emulator (optionally behind the fault proxy), a real
// control plane with kube-scheduler, kube-controller-manager and kwok, the manager serving
// externalgrpc over mutual TLS, and the kubelet simulator that registers a Node for every running
// instance. The cluster-autoscaler is each scenario's own.

import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { CreateQueueCommand, SQSClient, SendMessageCommand } from '@aws-sdk/client-sqs';

import type { ManagerConfig } from '../../lib/config.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Secret } from '../../lib/kube/types.js';
import { startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle } from '../harness/certs.js';
import { CLUSTER_TAG, REGION, provisionCloud, sampleSecret, type Ec2Cloud } from '../harness/ec2cloud.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { LifecycleEnv } from '../integration/env/lifecycle.js';

export interface AwsE2eEnv {
  env: LifecycleEnv;
  moto: Moto;
  cloud: Ec2Cloud;
  /** The fault proxy in front of the emulator, when asked for. */
  proxy: Ec2FaultProxy | undefined;
  kubelet: Ec2KubeletSimulator;
  /** The interruption queue the manager reads, when asked for: send() puts an event's body on it. */
  queue: { url: string; send(body: string): Promise<void> } | undefined;
  /** A cluster-autoscaler of `version` against the manager, over mutual TLS. */
  startAutoscaler(
    version: string,
    flags?: Record<string, string | number | boolean | null>,
    verbosity?: number,
  ): Promise<Autoscaler>;
  stop(): Promise<void>;
}

/**
 * Starts it all; `withProxy` gets the fault proxy's rules in before the manager makes its first
 * EC2 call, and `prepare` writes the scenario's objects before the manager starts (so that its
 * first orphan collection pass lists every class). The manager's EC2 endpoint is set through
 * AWS_ENDPOINT_URL_EC2 (and its queue's through AWS_ENDPOINT_URL_SQS), restored by stop().
 */
export async function startAwsE2eEnv(opts: {
  capacityByType: Record<string, Record<string, string>>;
  withProxy?: (proxy: Ec2FaultProxy) => void;
  prepare?: (env: LifecycleEnv, cloud: Ec2Cloud) => Promise<void>;
  /** An SQS queue on the emulator for EC2's events, read by the manager (--aws-interruption-queue). */
  interruptionQueue?: boolean;
  /** The manager's configuration beyond the defaults and what this sets. */
  manager?: Partial<ManagerConfig>;
  /**
   * With the proxy: instances carry EC2's resource names (i-….compute.internal) instead of the
   * emulator's IP names, which it reuses at once after a termination (see withResourceNames); the
   * kubelet simulator reads through the proxy to see them so.
   */
  resourceNames?: boolean;
}): Promise<AwsE2eEnv> {
  const savedEnv = Object.fromEntries(
    [
      'AWS_ENDPOINT_URL_EC2',
      'AWS_ENDPOINT_URL_SQS',
      'AWS_REGION',
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
    ].map((k) => [k, process.env[k]]),
  );
  const moto = await startMoto();
  let proxy: Ec2FaultProxy | undefined;
  if (opts.withProxy !== undefined) {
    proxy = new Ec2FaultProxy(moto.endpoint, opts.resourceNames === true ? { resourceNamesIn: REGION } : {});
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    opts.withProxy(proxy);
  } else {
    process.env.AWS_ENDPOINT_URL_EC2 = moto.endpoint;
  }
  const cloud = await provisionCloud(moto.endpoint);
  let queue: AwsE2eEnv['queue'];
  let sqs: SQSClient | undefined;
  if (opts.interruptionQueue === true) {
    // The manager's queue client: the SDK's own variables, as in a pod.
    process.env.AWS_ENDPOINT_URL_SQS = moto.endpoint;
    process.env.AWS_REGION = REGION;
    process.env.AWS_ACCESS_KEY_ID = 'manager';
    process.env.AWS_SECRET_ACCESS_KEY = 'manager';
    const client = new SQSClient({
      region: REGION,
      endpoint: moto.endpoint,
      credentials: { accessKeyId: 'eventbridge', secretAccessKey: 'eventbridge' },
    });
    sqs = client;
    const url =
      (await client.send(new CreateQueueCommand({ QueueName: 'mcm-interruptions' }))).QueueUrl ?? '';
    queue = {
      url,
      async send(body) {
        await client.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
      },
    };
  }
  const env = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
  const dir = path.join(env.cp.workDir, 'tls');
  mkdirSync(dir);
  const tls = writeMtlsBundle(dir, createMtlsBundle());
  await env.client.create<Secret>(CoreResources.secrets, sampleSecret());
  await opts.prepare?.(env, cloud);
  await env.startManager({
    grpcAddress: '127.0.0.1:0',
    grpcTlsCertFile: tls.serverCertFile,
    grpcTlsKeyFile: tls.serverKeyFile,
    grpcClientCaFile: tls.caFile,
    machineDrainTimeoutMs: 30_000,
    ...(queue === undefined ? {} : { awsInterruptionQueue: queue.url }),
    ...opts.manager,
  });
  const kubelet = new Ec2KubeletSimulator({
    endpoint: opts.resourceNames === true && proxy !== undefined ? proxy.endpoint : moto.endpoint,
    region: REGION,
    clusterTag: CLUSTER_TAG,
    client: env.client,
    capacityByType: opts.capacityByType,
  });
  kubelet.start();
  const autoscalers: Autoscaler[] = [];
  return {
    env,
    moto,
    cloud,
    proxy,
    kubelet,
    queue,
    async startAutoscaler(version, flags, verbosity) {
      const ca = await startAutoscaler({
        version,
        controlPlane: env.cp,
        address: `127.0.0.1:${env.manager?.grpcPort ?? 0}`,
        tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
        grpcTimeout: '10s',
        ...(flags === undefined ? {} : { flags }),
        ...(verbosity === undefined ? {} : { verbosity }),
      });
      autoscalers.push(ca);
      return ca;
    },
    async stop() {
      for (const ca of autoscalers) await ca.stop();
      await kubelet.stop();
      await env.stop();
      cloud.ec2.destroy();
      cloud.iam.destroy();
      sqs?.destroy();
      await proxy?.stop();
      await moto.stop();
      for (const [k, v] of Object.entries(savedEnv)) {
        if (v === undefined) Reflect.deleteProperty(process.env, k);
        else process.env[k] = v;
      }
    },
  };
}
