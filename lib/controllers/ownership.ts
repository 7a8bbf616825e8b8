import type { KubeObject, LabelSelector, OwnerReference } from '../kube/types.js';
import type { KubeApi } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { CONTROLLER_UID_INDEX, NO_CONTROLLER, type DeepReadonly, type Lister } from '../kube/informer.js';
import { isEmptySelector, selectorMatches } from '../kube/labels.js';
import type { ResourceType } from '../kube/resources.js';

export interface Owner {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  deleting: boolean;
}

export interface ClaimPlan<T> {
  /** Owned by us and still selected. */
  owned: T[];
  /** Orphans our selector matches: to adopt. */
  adopt: T[];
  /** Owned by us but no longer selected: to release. */
  release: T[];
}

type Candidate = KubeObject | DeepReadonly<KubeObject>;

/**
 * Decides which objects an owner controls, following the controller-ref rules of Kubernetes
 * controllers: an object with a controller reference belongs to that controller alone; an orphan
 * is adopted when the selector matches and neither side is being deleted; an owned object the
 * selector no longer matches is released, unless the owner is being deleted (as in Kubernetes:
 * an owner on its way out neither adopts nor releases). An empty selector matches nothing. One
 * difference: an owned child that is itself being deleted is not released, only left out (it
 * is not counted either way; releasing it would be a write for nothing).
 */
export function planClaim<T extends Candidate>(
  owner: Owner,
  selector: LabelSelector | DeepReadonly<LabelSelector> | undefined,
  candidates: readonly T[],
): ClaimPlan<T> {
  const plan: ClaimPlan<T> = { owned: [], adopt: [], release: [] };
  const usable = selector !== undefined && !isEmptySelector(selector);
  for (const c of candidates) {
    const ref = c.metadata.ownerReferences?.find((r) => r.controller === true);
    const matches = usable && selectorMatches(selector, c.metadata.labels);
    if (ref !== undefined) {
      if (ref.uid !== owner.uid) continue;
      if (matches) plan.owned.push(c);
      else if (!owner.deleting && c.metadata.deletionTimestamp === undefined) plan.release.push(c);
      continue;
    }
    if (!matches || owner.deleting || c.metadata.deletionTimestamp !== undefined) continue;
    plan.adopt.push(c);
  }
  return plan;
}

export function controllerReference(owner: Omit<Owner, 'deleting'>): OwnerReference {
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: owner.name,
    uid: owner.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/**
 * Adds the owner's controller reference. The merge patch replaces the whole ownerReferences list,
 * so it carries the resourceVersion it was computed from: a concurrent change makes it fail with
 * a conflict instead of losing that change.
 */
export async function adopt<T extends KubeObject>(
  client: KubeApi,
  res: ResourceType,
  obj: T | DeepReadonly<T>,
  owner: Omit<Owner, 'deleting'>,
): Promise<T> {
  const refs = [...(obj.metadata.ownerReferences ?? [])].map((r) => ({ ...r }));
  refs.push(controllerReference(owner));
  return client.patch<T>(
    res,
    obj.metadata.name ?? '',
    { metadata: { ownerReferences: refs, resourceVersion: obj.metadata.resourceVersion } },
    { type: 'merge', ...(obj.metadata.namespace === undefined ? {} : { namespace: obj.metadata.namespace }) },
  );
}

/** Removes the owner's reference (conditional on resourceVersion, like adopt). */
export async function release<T extends KubeObject>(
  client: KubeApi,
  res: ResourceType,
  obj: T | DeepReadonly<T>,
  ownerUID: string,
): Promise<T> {
  const refs = (obj.metadata.ownerReferences ?? []).filter((r) => r.uid !== ownerUID).map((r) => ({ ...r }));
  return client.patch<T>(
    res,
    obj.metadata.name ?? '',
    {
      metadata: {
        ownerReferences: refs.length === 0 ? null : refs,
        resourceVersion: obj.metadata.resourceVersion,
      },
    },
    { type: 'merge', ...(obj.metadata.namespace === undefined ? {} : { namespace: obj.metadata.namespace }) },
  );
}

/** Adds a finalizer (conditional on resourceVersion). */
export async function addFinalizer<T extends KubeObject>(
  client: KubeApi,
  res: ResourceType,
  obj: T | DeepReadonly<T>,
  finalizer: string,
): Promise<T> {
  const finalizers = [...(obj.metadata.finalizers ?? []), finalizer];
  return client.patch<T>(
    res,
    obj.metadata.name ?? '',
    { metadata: { finalizers, resourceVersion: obj.metadata.resourceVersion } },
    { type: 'merge', ...(obj.metadata.namespace === undefined ? {} : { namespace: obj.metadata.namespace }) },
  );
}

/** Removes a finalizer (conditional on resourceVersion). */
export async function removeFinalizer<T extends KubeObject>(
  client: KubeApi,
  res: ResourceType,
  obj: T | DeepReadonly<T>,
  finalizer: string,
): Promise<T> {
  const finalizers = (obj.metadata.finalizers ?? []).filter((f) => f !== finalizer);
  return client.patch<T>(
    res,
    obj.metadata.name ?? '',
    {
      metadata: {
        finalizers: finalizers.length === 0 ? null : finalizers,
        resourceVersion: obj.metadata.resourceVersion,
      },
    },
    { type: 'merge', ...(obj.metadata.namespace === undefined ? {} : { namespace: obj.metadata.namespace }) },
  );
}

type WithSelector = KubeObject & { spec?: { selector?: LabelSelector } };

/**
 * The object of `kind` controlling `obj`, looked up in a cache and only if it still has the UID
 * the reference names (a same-named successor is not the owner).
 */
export function cachedController<O extends KubeObject>(
  lister: Lister<O>,
  obj: Candidate,
  kind: string,
): DeepReadonly<O> | undefined {
  const ref = obj.metadata.ownerReferences?.find((r) => r.controller === true);
  if (ref?.kind !== kind) return undefined;
  const owner = lister.get(obj.metadata.namespace, ref.name);
  return owner?.metadata.uid === ref.uid ? owner : undefined;
}

/** Cached objects in obj's namespace whose non-empty selector matches obj's labels (may adopt it). */
export function selectingOwners<O extends WithSelector>(
  lister: Lister<O>,
  obj: Candidate,
): DeepReadonly<O>[] {
  return lister.list(obj.metadata.namespace).filter((o) => {
    const sel = o.spec?.selector;
    return sel !== undefined && !isEmptySelector(sel) && selectorMatches(sel, obj.metadata.labels);
  });
}

/**
 * Claims children for an owner (ownerRes/owner) among the cached children of childRes: only the
 * owner's own children and orphans are candidates (two index lookups, no namespace scan).
 * Matching orphans are adopted after a live read confirms the owner still exists with its UID and
 * is not being deleted, so a stale cache never makes a vanished owner adopt; children the
 * selector no longer matches are released. Returns what the owner controls afterwards.
 */
export async function claim<T extends KubeObject>(args: {
  client: KubeApi;
  ownerRes: ResourceType;
  childRes: ResourceType;
  children: Lister<T>;
  owner: Owner;
  namespace: string | undefined;
  selector: LabelSelector | DeepReadonly<LabelSelector> | undefined;
}): Promise<(T | DeepReadonly<T>)[]> {
  const { client, owner, children } = args;
  const candidates = [
    ...children.byIndex(CONTROLLER_UID_INDEX, owner.uid),
    ...children.byIndex(CONTROLLER_UID_INDEX, NO_CONTROLLER),
  ].filter((c) => c.metadata.namespace === args.namespace);
  const plan = planClaim(owner, args.selector, candidates);
  const owned: (T | DeepReadonly<T>)[] = [...plan.owned];
  if (plan.adopt.length > 0) {
    const fresh = await client.get(args.ownerRes, owner.name, args.namespace);
    if (fresh.metadata.uid === owner.uid && fresh.metadata.deletionTimestamp === undefined) {
      for (const c of plan.adopt) {
        try {
          owned.push(await adopt<T>(client, args.childRes, c, owner));
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
    }
  }
  for (const c of plan.release) {
    try {
      await release<T>(client, args.childRes, c, owner.uid);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
  return owned;
}
