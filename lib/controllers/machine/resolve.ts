import { Finalizer, MACHINE_CLASS_KIND } from '../../api/constants.js';
import type { Machine, MachineClass, SecretReference } from '../../api/types.js';
import type { Driver } from '../../driver/driver.js';
import type { ProviderRegistry } from '../../driver/registry.js';
import type { DeepReadonly, Lister } from '../../kube/informer.js';
import type { Secret } from '../../kube/types.js';

/** Reasons (also event reasons) why a machine's class cannot be used yet. */
export const ResolveProblem = {
  InvalidClassReference: 'InvalidClassReference',
  MachineClassNotFound: 'MachineClassNotFound',
  SecretNotFound: 'SecretNotFound',
  ProviderNotFound: 'ProviderNotFound',
  /** Not a user problem: the class controller has not added its finalizer yet. */
  ClassNotFinalized: 'ClassNotFinalized',
} as const;
export type ResolveProblem = (typeof ResolveProblem)[keyof typeof ResolveProblem];

export type Resolution =
  | { ok: true; machineClass: DeepReadonly<MachineClass>; secret: Secret; driver: Driver; provider: string }
  | { ok: false; problem: ResolveProblem; message: string };

export interface ResolveDeps {
  machineClasses: Lister<MachineClass>;
  secrets: Lister<Secret>;
  providers: ProviderRegistry;
}

/**
 * The class, merged secret and driver of a machine, from the caches. Secrets are read in the
 * control namespace (as MCM does); secretRef's data is merged with credentialsSecretRef's, the
 * credentials winning on a clash.
 */
export function resolveMachineClass(
  deps: ResolveDeps,
  m: Machine | DeepReadonly<Machine>,
  opts: { requireFinalizer?: boolean; allowMissingSecrets?: boolean } = {},
): Resolution {
  const ref = m.spec?.class;
  const namespace = m.metadata.namespace ?? '';
  if (
    ref?.name === undefined ||
    ref.name === '' ||
    (ref.kind !== undefined && ref.kind !== MACHINE_CLASS_KIND)
  ) {
    return {
      ok: false,
      problem: ResolveProblem.InvalidClassReference,
      message: `spec.class must name a ${MACHINE_CLASS_KIND} (got kind "${ref?.kind ?? ''}", name "${ref?.name ?? ''}")`,
    };
  }
  const cls = deps.machineClasses.get(namespace, ref.name);
  if (cls === undefined) {
    return {
      ok: false,
      problem: ResolveProblem.MachineClassNotFound,
      message: `MachineClass ${namespace}/${ref.name} not found; the machine is created once it exists`,
    };
  }
  const provider = cls.provider ?? '';
  const driver = deps.providers.driverFor(provider);
  if (driver === undefined) {
    return {
      ok: false,
      problem: ResolveProblem.ProviderNotFound,
      message: `MachineClass ${namespace}/${ref.name} names provider "${provider}", which this manager does not serve (known: ${deps.providers.names().join(', ')})`,
    };
  }
  const data: Record<string, string> = {};
  for (const [field, sref] of [
    ['secretRef', cls.secretRef],
    ['credentialsSecretRef', cls.credentialsSecretRef],
  ] as const) {
    if (sref?.name === undefined || sref.name === '') continue;
    const found = lookupSecret(deps.secrets, sref, namespace);
    if (found === undefined && opts.allowMissingSecrets === true) continue;
    if (found === undefined) {
      const ns = sref.namespace ?? namespace;
      return {
        ok: false,
        problem: ResolveProblem.SecretNotFound,
        message: `Secret ${ns}/${sref.name} (${field} of MachineClass ${ref.name}) not found${ns === namespace ? '' : ` (only secrets in the control namespace ${namespace} are read)`}`,
      };
    }
    Object.assign(data, found.data ?? {});
  }
  if (
    opts.requireFinalizer !== false &&
    !(cls.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager)
  ) {
    return {
      ok: false,
      problem: ResolveProblem.ClassNotFinalized,
      message: `waiting for MachineClass ${ref.name} to get its finalizer`,
    };
  }
  return {
    ok: true,
    machineClass: cls,
    secret: { apiVersion: 'v1', kind: 'Secret', metadata: { name: ref.name, namespace }, data },
    driver,
    provider,
  };
}

function lookupSecret(
  secrets: Lister<Secret>,
  ref: DeepReadonly<SecretReference>,
  namespace: string,
): DeepReadonly<Secret> | undefined {
  const ns = ref.namespace ?? namespace;
  return ns === namespace ? secrets.get(ns, ref.name ?? '') : undefined;
}
