import { AsyncChannel, type KubeApi, type WatchEvent, type WatchOptions } from '../../../lib/kube/client.js';
import type { ResourceType } from '../../../lib/kube/resources.js';

/**
 * A KubeApi whose watch events arrive lagMs late (in order), while requests answer at once: the
 * cache-lag condition under which a controller without expectations acts twice.
 */
export function laggingWatches(inner: KubeApi, lagMs: number): KubeApi {
  const lagging = Object.create(inner) as KubeApi;
  lagging.watch = async <T>(
    res: ResourceType,
    opts?: WatchOptions,
  ): Promise<AsyncIterableIterator<WatchEvent<T>>> => {
    const source = await inner.watch<T>(res, opts);
    const out = new AsyncChannel<WatchEvent<T>>(() => {
      void source.return?.();
    });
    void (async () => {
      try {
        for await (const ev of source) {
          setTimeout(() => {
            out.push(ev);
          }, lagMs);
        }
        setTimeout(() => {
          out.end();
        }, lagMs);
      } catch (err) {
        setTimeout(() => {
          out.fail(err);
        }, lagMs);
      }
    })();
    return out;
  };
  return lagging;
}
