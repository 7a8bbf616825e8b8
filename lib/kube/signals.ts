// Linking abort signals without leaking. AbortSignal.any() registers the signal it makes with each
// source until that source aborts; on Node 20 a long-lived source (the leader fence's signal, which
// lives as long as the leadership) keeps one entry per call for ever. A linked signal here listens
// to its sources only until it is disposed, which its user does when the call is over.

/** A signal that aborts when any source does, and a dispose() that detaches it from them. */
export interface LinkedSignal {
  readonly signal: AbortSignal;
  /** Detaches from the sources (idempotent); the signal keeps its state. A function, not a method. */
  readonly dispose: () => void;
}

const noop = (): void => undefined;

/**
 * Links the defined sources: one source is passed through (nothing to detach), an aborted one
 * aborts the result at once with its reason.
 */
export function linkSignals(...sources: readonly (AbortSignal | undefined)[]): LinkedSignal {
  const defined = sources.filter((s): s is AbortSignal => s !== undefined);
  const first = defined[0];
  if (defined.length === 1 && first !== undefined) return { signal: first, dispose: noop };
  const controller = new AbortController();
  const aborted = defined.find((s) => s.aborted);
  if (aborted !== undefined) {
    controller.abort(aborted.reason);
    return { signal: controller.signal, dispose: noop };
  }
  const listeners = defined.map((source) => {
    const onAbort = (): void => {
      dispose();
      controller.abort(source.reason);
    };
    source.addEventListener('abort', onAbort, { once: true });
    return { source, onAbort };
  });
  let disposed = false;
  const dispose = (): void => {
    if (disposed) return;
    disposed = true;
    for (const { source, onAbort } of listeners) source.removeEventListener('abort', onAbort);
  };
  return { signal: controller.signal, dispose };
}
