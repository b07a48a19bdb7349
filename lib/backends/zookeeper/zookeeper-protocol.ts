import type { EntryMode } from '../lock-backend.interface';
import { exclusiveLockDelayOnly } from '../lock-delay-refusals';
import { protectedPrefix } from './zookeeper-paths';

/** Whose node layout the lock nodes follow: this backend's own, or Apache Curator's (see docs/zookeeper.md). */
export type ZooKeeperProtocol = 'native' | 'curator';

/**
 * The Curator recipe a Java peer uses on the same lock path. Curator's two recipes cannot share a
 * path (each sorts the other's nodes by their whole name), so a name is one or the other.
 */
export type CuratorRecipe = 'InterProcessMutex' | 'InterProcessReadWriteLock';

/** The layout of one backend's lock nodes: how it names them and which modes it can grant in it. */
export interface NodeLayout {
  readonly protocol: ZooKeeperProtocol;
  /** Set with protocol 'curator'. */
  readonly curatorRecipe?: CuratorRecipe;
}

/** The modes a layout grants; LockService refuses the others before any I/O, with modeRefusal's message. */
export function modesOf(layout: NodeLayout): readonly EntryMode[] {
  if (layout.protocol === 'native') return ['write', 'read', 'permit'];
  return layout.curatorRecipe === 'InterProcessReadWriteLock' ? ['write', 'read'] : ['write'];
}

/**
 * The node name's prefix for an entry, before the sequence number ZooKeeper appends. Curator's
 * mutex names its nodes `_c_<uuid>-lock-`, which the native layout's write entries already are;
 * its read-write lock names them `_c_<uuid>-__READ__` and `_c_<uuid>-__WRIT__` (the prefix of
 * CreateBuilder.withProtection, then the lock name).
 */
export function entryPrefix(layout: NodeLayout, attemptId: string, mode: EntryMode, limit?: number): string {
  if (layout.protocol === 'curator' && layout.curatorRecipe === 'InterProcessReadWriteLock') {
    return `_c_${attemptId}-${mode === 'read' ? '__READ__' : '__WRIT__'}`;
  }
  return protectedPrefix(attemptId, mode, limit);
}

/** Why the layout cannot grant `mode`, naming the option to change; undefined when it can. */
export function modeRefusal(layout: NodeLayout, mode: EntryMode): string | undefined {
  if (modesOf(layout).includes(mode)) return undefined;
  if (mode === 'permit') {
    return (
      "backend.protocol 'curator' does not offer semaphores (Curator's InterProcessSemaphoreV2 keeps a lock and " +
      "leases in another layout): use protocol 'native' for them, or another backend: memory, redis, etcd, zookeeper or postgres."
    );
  }
  return (
    "backend.protocol 'curator' with curatorRecipe 'InterProcessMutex' grants only the exclusive lock: for mode 'read' set " +
    "backend.curatorRecipe: 'InterProcessReadWriteLock' (the Java side then uses InterProcessReadWriteLock on the path), " +
    "or use protocol 'native', or another backend: memory, redis, etcd, zookeeper or postgres."
  );
}

/**
 * Why the layout cannot enforce a lock-delay for `mode`; undefined when it can. Curator's peers
 * neither keep nor honour a delay record, and treat one under the lock path as a lock node.
 */
export function lockDelayRefusal(layout: NodeLayout, mode: EntryMode): string | undefined {
  if (layout.protocol === 'curator') {
    return "backend.protocol 'curator' cannot enforce lockDelayMs (Curator's recipes neither keep nor honour a delay record): use protocol 'native' (the default), or leave lockDelayMs at 0.";
  }
  return exclusiveLockDelayOnly('zookeeper', mode);
}
