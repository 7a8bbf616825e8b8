import type { KubeApi } from '../kube/client.js';
import { ConflictError, isInvalid, isNotFound } from '../kube/errors.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { ResourceType } from '../kube/resources.js';
import type { KubeObject } from '../kube/types.js';

/**
 * Removes one finalizer with a JSON patch that first tests it is still at the index the cached
 * object shows: exact and conditional, without depending on the object's resourceVersion (which
 * our own status writes keep moving). A failed test surfaces as a ConflictError (requeue); a
 * vanished object or an absent finalizer is success.
 */
export async function removeFinalizerAt(
  client: KubeApi,
  res: ResourceType,
  obj: KubeObject | DeepReadonly<KubeObject>,
  finalizer: string,
): Promise<void> {
  const i = (obj.metadata.finalizers ?? []).indexOf(finalizer);
  if (i < 0) return;
  const path = `/metadata/finalizers/${i}`;
  try {
    await client.patch(
      res,
      obj.metadata.name ?? '',
      [
        { op: 'test', path, value: finalizer },
        { op: 'remove', path },
      ],
      {
        type: 'json',
        ...(obj.metadata.namespace === undefined ? {} : { namespace: obj.metadata.namespace }),
      },
    );
  } catch (err) {
    if (isNotFound(err)) return;
    if (isInvalid(err)) {
      throw new ConflictError(
        `${res.kind} ${obj.metadata.name ?? ''}: finalizers changed since they were read`,
        409,
        'Conflict',
        undefined,
        { cause: err },
      );
    }
    throw err;
  }
}
