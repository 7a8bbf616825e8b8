// The world of the AWS e2e scenarios: the EC2 emulator (optionally behind the fault proxy), a real
// control plane with kube-scheduler, kube-controller-manager and kwok, the manager serving
// externalgrpc over mutual TLS, and the kubelet simulator that registers a Node for every running
// instance. The cluster-autoscaler is each scenario's own.

import { mkdirSync } from 'node:fs';
import path from 'node:path';

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
  /** A cluster-autoscaler of `version` against the manager, over mutual TLS. */
  startAutoscaler(
    version: string,
    flags?: Record<string, string | number | boolean | null>,
  ): Promise<Autoscaler>;
  stop(): Promise<void>;
}

/**
 * Starts it all; `withProxy` gets the fault proxy's rules in before the manager makes its first
 * EC2 call, and `prepare` writes the scenario's objects before the manager starts (so that its
 * first orphan collection pass lists every class). The manager's EC2 endpoint is set through
 * AWS_ENDPOINT_URL_EC2 and restored by stop().
 */
export async function startAwsE2eEnv(opts: {
  capacityByType: Record<string, Record<string, string>>;
  withProxy?: (proxy: Ec2FaultProxy) => void;
  prepare?: (env: LifecycleEnv, cloud: Ec2Cloud) => Promise<void>;
}): Promise<AwsE2eEnv> {
  const savedEndpoint = process.env.AWS_ENDPOINT_URL_EC2;
  const moto = await startMoto();
  let proxy: Ec2FaultProxy | undefined;
  if (opts.withProxy !== undefined) {
    proxy = new Ec2FaultProxy(moto.endpoint);
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    opts.withProxy(proxy);
  } else {
    process.env.AWS_ENDPOINT_URL_EC2 = moto.endpoint;
  }
  const cloud = await provisionCloud(moto.endpoint);
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
  });
  const kubelet = new Ec2KubeletSimulator({
    endpoint: moto.endpoint,
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
    async startAutoscaler(version, flags) {
      const ca = await startAutoscaler({
        version,
        controlPlane: env.cp,
        address: `127.0.0.1:${env.manager?.grpcPort ?? 0}`,
        tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
        grpcTimeout: '10s',
        ...(flags === undefined ? {} : { flags }),
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
      await proxy?.stop();
      await moto.stop();
      if (savedEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
      else process.env.AWS_ENDPOINT_URL_EC2 = savedEndpoint;
    },
  };
}
