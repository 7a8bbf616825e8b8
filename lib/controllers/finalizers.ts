import type { KubeApi } from '../kube/client.js';
import { ConflictError, isInvalid, isNotFound } from '../kube/errors.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { ResourceType } from '../kube/resources.js';
import type { KubeObject } from '../kube/types.js';

/**
 * Removes one finalizer with a JSON patch that first tests it is still at the index the cached
 * object shows: exact and conditional, without depending on the object's resourceVersion (which
 * our own status writes keep moving). A failed test surfaces as a ConflictError (requeue); a
 * vanished object or an absent finalizer is success. Returns the object as the API server left it
 * (undefined when no request was sent or the object was gone): a caller can see from it whether a
 * deletion is pending without reading again.
 */
export async function removeFinalizerAt<T extends KubeObject>(
  client: KubeApi,
  res: ResourceType,
  obj: T | DeepReadonly<T>,
  finalizer: string,
): Promise<T | undefined> {
  const i = (obj.metadata.finalizers ?? []).indexOf(finalizer);
  if (i < 0) return undefined;
  const path = `/metadata/finalizers/${i}`;
  try {
    return await client.patch<T>(
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
    if (isNotFound(err)) return undefined;
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
