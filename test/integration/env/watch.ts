// A list-then-watch for integration tests that must see every state the API server reports.

import type { KubeApi, WatchEvent } from '../../../lib/kube/client.js';
import type { ResourceType } from '../../../lib/kube/resources.js';
import type { KubeObject } from '../../../lib/kube/types.js';

/**
 * Lists `res` in `namespace` (the selected objects go to `listed`), then watches it from that
 * list's resourceVersion, handing every event to `on` until the returned stop is called. A watch
 * that failed, sent an ERROR event or ended before stop has missed states: stop then rejects, so
 * the test that relied on it fails.
 */
export async function watchEvents<T extends KubeObject>(
  client: KubeApi,
  namespace: string,
  res: ResourceType,
  select: { labelSelector?: string; fieldSelector?: string },
  on: (ev: WatchEvent<T>) => void,
  listed: (items: T[]) => void = () => undefined,
): Promise<() => Promise<void>> {
  const list = await client.list<T>(res, { namespace, ...select });
  listed(list.items);
  const abort = new AbortController();
  const stream = await client.watch<T>(res, {
    namespace,
    resourceVersion: list.metadata.resourceVersion ?? '',
    ...select,
    signal: abort.signal,
  });
  const done = (async () => {
    for await (const ev of stream) {
      if (ev.type === 'ERROR') throw new Error(`watch of ${res.plural}: ERROR ${JSON.stringify(ev.object)}`);
      on(ev);
    }
    if (!abort.signal.aborted) throw new Error(`watch of ${res.plural} ended before it was stopped`);
  })();
  // Reported by stop(); until then a failure must not count as an unhandled rejection.
  done.catch(() => undefined);
  return async () => {
    abort.abort();
    await done;
  };
}
