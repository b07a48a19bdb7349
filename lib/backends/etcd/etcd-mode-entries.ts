import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockConfigError } from '../../errors';
import type { BackendLifecycle } from '../backend-lifecycle';
import { batchToken } from '../../queue/batch';
import type { AcquireRequest, LockGrant } from '../lock-backend.interface';
import { PendingWait } from '../../queue/pending-wait';
import { isStoppable } from '../built-in-backend';
import type { EntryValue } from './entry-modes';
import type { EtcdKeyDeletes } from './etcd-key-deletes';
import type { LockKeys } from './etcd-keys';
import { EtcdModeAcquisition, NOT_FREE } from './etcd-mode-acquisition';
import type { EtcdRenewals } from './etcd-renewals';
import type { EtcdSession } from './etcd-session';
import type { EtcdSessions } from './etcd-sessions';
import type { LocalFollowers } from './local-followers';

/** What the read and permit entries share with the backend's write path. */
export interface ModeEntriesContext {
  readonly client: Etcd3;
  readonly lifecycle: BackendLifecycle;
  readonly sessions: EtcdSessions;
  /** The backend's bounded transaction, which ends the session when etcd says its lease is gone. */
  txn(session: EtcdSession, operation: string, request: ITxnRequest): Promise<ITxnResponse>;
  /** Deletes keys and tells this process's write waiters that follow them (LocalFollowers). */
  readonly deletes: EtcdKeyDeletes;
  readonly renewals: EtcdRenewals;
  readonly localFollowers: LocalFollowers;
  /** Some write acquisition of this process is in flight (see LocalFollowers.gone). */
  mayBeFollowed(): boolean;
  /** etcd dropped the session before this process noticed: worth one try on a new one. */
  sessionDropped(session: EtcdSession, error: unknown): boolean;
  readonly safetyNetMs: number;
}

interface HeldEntry {
  readonly grant: LockGrant;
  readonly lost: AbortController;
  readonly session: EtcdSession;
  readonly keys: LockKeys;
  readonly revision: bigint;
}

/**
 * The backend's read and permit entries: one etcd key per caller (no batching, so readers of one
 * process never wait for each other and each permit is a place of its own), put with the
 * session lease like write entries, under the same name, so every mode shares one queue ordered
 * by create revision. The token is `create revision << 16`, as a write entry's first turn.
 */
export class EtcdModeEntries {
  private readonly held = new Map<string, HeldEntry>();
  private readonly waiting = new Set<EtcdModeAcquisition>();

  constructor(private readonly context: ModeEntriesContext) {}

  /** Some grant of a read or permit entry is held: release and renew must look here. */
  get holding(): boolean {
    return this.held.size > 0;
  }

  acquire(request: AcquireRequest): Promise<LockGrant> {
    try {
      this.context.lifecycle.assertOpen();
      validate(request);
    } catch (error) {
      return Promise.reject(error);
    }
    const wait = new PendingWait<LockGrant | null>();
    let acquisition: EtcdModeAcquisition | undefined;
    const abandoned = (reason: unknown) => acquisition?.stop(reason);
    if (isStoppable(request)) wait.watch(request, abandoned);
    else wait.listen(request.signal, abandoned);
    if (!wait.isSettled) this.begin(request, wait, false, (started) => (acquisition = started), true);
    return wait.promise as Promise<LockGrant>;
  }

  /** Puts the entry and reads the queue: when the rule does not grant it at once, it is deleted. */
  tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    try {
      this.context.lifecycle.assertOpen();
      validate(request);
    } catch (error) {
      return Promise.reject(error);
    }
    const wait = new PendingWait<LockGrant | null>();
    this.begin(request, wait, true, () => undefined, true);
    return wait.promise;
  }

  /** Our key still there with its create revision (the renewal checks of write grants, shared). */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || !held.session.alive) return false;
    const stillOurs = await this.context.renewals.stillOurs(held.session, { key: held.keys.own, revision: held.revision });
    if (stillOurs && held.session.alive) return true;
    if (this.held.get(grant.owner) === held) this.held.delete(grant.owner);
    if (!stillOurs) this.context.localFollowers.gone(held.keys.own, held.revision, this.context.mayBeFollowed());
    return false;
  }

  /** Owner-checked and idempotent: deletes our key, fenced on its create revision. */
  release(grant: LockGrant): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return Promise.resolve();
    this.held.delete(grant.owner);
    if (!held.session.alive) return Promise.resolve();
    return this.context.deletes.delete(held.keys, held.revision, held.session);
  }

  /** The session is gone, and every key put with it: its grants are lost, its waits end. */
  sessionLost(session: EtcdSession, error: Error): void {
    for (const [owner, held] of this.held) {
      if (held.session !== session) continue;
      this.held.delete(owner);
      held.lost.abort(error);
    }
    for (const acquisition of this.waiting) if (acquisition.session === session) acquisition.stop(error);
  }

  close(waitError: Error, heldError: Error): void {
    for (const acquisition of this.waiting) acquisition.stop(waitError);
    for (const held of this.held.values()) held.lost.abort(heldError);
    this.held.clear();
  }

  /** Once there is a session: put the entry and wait (EtcdModeAcquisition). `retry`: once more on a new session, as write entries do. */
  private begin(
    request: Omit<AcquireRequest, 'signal'>,
    wait: PendingWait<LockGrant | null>,
    onlyIfFree: boolean,
    started: (acquisition: EtcdModeAcquisition) => void,
    retry: boolean,
  ): void {
    const { lifecycle, sessions } = this.context;
    sessions.session('queue for a lock').then(
      (session) => {
        if (wait.isSettled) return;
        if (!lifecycle.isOpen) return void wait.reject(lifecycle.closedWhileWaiting());
        const keys = session.entryKeys(request.key);
        let notFree = false;
        const acquisition = new EtcdModeAcquisition(
          request.key,
          this.context.client,
          session,
          keys,
          entryValue(request),
          (txn) => this.context.txn(session, 'queue for a lock', txn),
          {
            granted: (revision) => {
              this.waiting.delete(acquisition);
              const grant = this.hold(request, session, keys, revision);
              // The caller stopped waiting as the grant came: give it back.
              if (!wait.resolve(grant)) void this.release(grant).catch(() => undefined);
            },
            failed: (error) => {
              this.waiting.delete(acquisition);
              // A try that would wait answers null once its entry is deleted (cleanup).
              if (error === NOT_FREE) return void (notFree = true);
              if (retry && !acquisition.queued && !wait.isSettled && this.context.sessionDropped(session, error)) {
                return this.begin(request, wait, onlyIfFree, started, false);
              }
              wait.reject(error);
            },
            cleanup: (revision) => {
              if (revision === undefined) return this.context.deletes.deleteUnsure(keys, session);
              const deleted = this.context.deletes.delete(keys, revision, session).catch(() => undefined);
              if (notFree) void deleted.then(() => wait.resolve(null));
            },
          },
          this.context.safetyNetMs,
          onlyIfFree,
        );
        this.waiting.add(acquisition);
        started(acquisition);
        void acquisition.start();
      },
      (error) => wait.reject(error),
    );
  }

  private hold(request: Pick<AcquireRequest, 'key' | 'owner'>, session: EtcdSession, keys: LockKeys, revision: bigint): LockGrant {
    const lost = new AbortController();
    const grant: LockGrant = { key: request.key, owner: request.owner, fencingToken: batchToken(revision, 0n), lost: lost.signal };
    this.held.set(request.owner, { grant, lost, session, keys, revision });
    return grant;
  }

  /** The held entry of this very grant: a stale grant of a reused owner id does not match. */
  private heldFor(grant: LockGrant): HeldEntry | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }
}

function validate(request: Pick<AcquireRequest, 'mode' | 'limit' | 'key'>): void {
  if (request.mode !== 'permit') return;
  const { limit } = request;
  if (!Number.isInteger(limit) || limit! < 1) throw new LockConfigError('limit', `a semaphore's limit must be a positive integer, got ${String(limit)} for "${request.key}"`);
}

function entryValue(request: Pick<AcquireRequest, 'mode' | 'limit' | 'owner'>): EntryValue & { mode: 'read' | 'permit' } {
  return request.mode === 'permit' ? { mode: 'permit', limit: request.limit, owner: request.owner } : { mode: 'read', owner: request.owner };
}
