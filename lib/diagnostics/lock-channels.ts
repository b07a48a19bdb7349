import { channel, tracingChannel } from 'node:diagnostics_channel';
import type { EntryMode } from '../backends/lock-backend.interface';
import type { LockLostReason } from '../errors';

/**
 * The names of the library's `node:diagnostics_channel` channels: what metrics, tracers and
 * logs subscribe to. Publishing costs nothing while a channel has no subscriber (each publish
 * is guarded by `hasSubscribers`, and the message is built only then).
 */
export const LOCK_CHANNELS = {
  /**
   * A tracingChannel (`tracing:nest-distributed-lock:acquire:start|end|asyncStart|asyncEnd|error`)
   * around each acquisition that goes to the backend (re-entrant ones do not): the message is
   * an `AcquireMessage`, completed with `fencingToken` and `waitedMs` when it settles.
   */
  acquire: 'nest-distributed-lock:acquire',
  /** A lock was granted by the backend: `AcquiredMessage`. */
  acquired: 'nest-distributed-lock:acquired',
  /** A held lock was given back by its holder (also after it was lost): `ReleasedMessage`. */
  released: 'nest-distributed-lock:released',
  /** A held lock is known gone before its holder released it: `LostMessage`. */
  lost: 'nest-distributed-lock:lost',
  /** Not granted within `waitTimeoutMs`, and the caller is told so (also a tryAcquire that found it busy): `TimedOutMessage`. */
  timedOut: 'nest-distributed-lock:timed-out',
  /** Not granted within `waitTimeoutMs` with `onTimeout: 'skip'`: the code did not run. `TimedOutMessage`. */
  skipped: 'nest-distributed-lock:skipped',
} as const;

export interface LockMessage {
  /** The lock name as the caller gave it (before keyPrefix). */
  readonly name: string;
  /** The backend's name: 'memory', 'redis', 'etcd', 'zookeeper', or a custom backend's. */
  readonly backend: string;
  /** 'write' (the lock), 'read' (a read lock) or 'permit' (a semaphore's). */
  readonly mode: EntryMode;
}

export interface AcquireMessage extends LockMessage {
  /** false for a try (tryAcquire, or waitTimeoutMs 0). */
  readonly wait: boolean;
  /** Set when the acquisition ends: the grant's token, if there was a grant. */
  fencingToken?: bigint;
  /** Set when the acquisition ends. */
  waitedMs?: number;
}

export interface AcquiredMessage extends LockMessage {
  readonly fencingToken: bigint;
  readonly waitedMs: number;
}

export interface ReleasedMessage extends LockMessage {
  readonly fencingToken: bigint;
  /** From the grant to the release. */
  readonly heldMs: number;
  /** The lock had been lost before this release (a `lost` message was published). */
  readonly wasLost: boolean;
}

export interface LostMessage extends LockMessage {
  readonly fencingToken: bigint;
  readonly reason: LockLostReason;
  readonly heldMs: number;
}

export interface TimedOutMessage extends LockMessage {
  readonly waitedMs: number;
}

/** The channels, made once: `channel()` looks its name up in a global table. */
export const lockChannels = {
  acquire: tracingChannel<object, AcquireMessage>(LOCK_CHANNELS.acquire),
  acquired: channel(LOCK_CHANNELS.acquired),
  released: channel(LOCK_CHANNELS.released),
  lost: channel(LOCK_CHANNELS.lost),
  timedOut: channel(LOCK_CHANNELS.timedOut),
  skipped: channel(LOCK_CHANNELS.skipped),
};

/** Whether any subscriber listens to the acquire tracingChannel (Node 20's TracingChannel has no `hasSubscribers` before 20.13). */
export function tracingAcquire(): boolean {
  const traced = lockChannels.acquire;
  return traced.start.hasSubscribers || traced.end.hasSubscribers || traced.asyncStart.hasSubscribers || traced.asyncEnd.hasSubscribers || traced.error.hasSubscribers;
}
