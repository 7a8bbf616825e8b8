// The module entry: what --provider-module loads. It declares the provider API version it was
// written for and registers one provider, `example`, for `MachineClass.provider: example`.

import type { ProviderApi } from '../../../lib/driver/index.js';
import { ExampleDriver, PROVIDER_ID_PREFIX, PROVIDER_NAME } from './driver.js';
import { Kubelets } from './kubelet.js';

export const providerApiVersion = 1;

export function registerProviders(api: ProviderApi): void {
  api.register(
    PROVIDER_NAME,
    (ctx) => {
      // Without a target cluster there is no kubelet to simulate: machines go Available.
      const kubelets = ctx.target === undefined ? undefined : new Kubelets(ctx.target, ctx.logger);
      return {
        driver: new ExampleDriver(
          api,
          kubelets === undefined ? undefined : (vm, spec) => kubelets.boot(vm, spec),
        ),
        stop: () => kubelets?.stop() ?? Promise.resolve(),
      };
    },
    { providerIDPrefix: PROVIDER_ID_PREFIX },
  );
}
