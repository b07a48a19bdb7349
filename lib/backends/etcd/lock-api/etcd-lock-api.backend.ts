import { LockConfigError } from '../../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../../lock-defaults';
import type { BackendSettings } from '../../backend-definition';
import type { AcquireRequest, EntryMode, LockGrant } from '../../lock-backend.interface';
import { LATE_PUT_MS } from '../etcd-key-deletes';
import { watchSafetyNetMs } from '../etcd-acquisition';
import type { EtcdBatch } from '../etcd-batch';
import { lockApiKeys, type LockKeys } from '../etcd-keys';
import type { EtcdBackendOptions } from '../etcd-options';
import type { EtcdSession } from '../etcd-session';
import { EtcdLockBackend, etcdBackendParts } from '../etcd.backend';
import { LockApiCall, type LockApiContext } from './lock-api-call';
import { KeyTurns, type KeyTurn } from './lock-api-turns';

/** A Lock call unanswered this long is backed by a probe (LockApiContext.probeAfterMs). */
const PROBE_AFTER_MS = 100;

/**
 * etcd with `protocol: 'lock-api'`: each batch of this process's callers takes its entry as etcd's
 * own Lock service does (`etcdctl lock`, jetcd's LockClient), and a batch that must wait waits in
 * that service, on the server (LockApiCall). Everything else is the native backend's: the session
 * lease kept alive by us, the hand-over inside the process (LocalQueues), renewal checks, fenced
 * deletes, inspect and forceRelease, and a try, which the Lock service lacks, as one transaction
 * on the same key. Exclusive locks only. See docs/etcd.md, "Protocol: lock-api".
 */
export class EtcdLockApiBackend extends EtcdLockBackend {
  override readonly modes: readonly EntryMode[] = ['write'];
  /** Per session: the one key a name can have (see KeyTurns). Gone with its session. */
  private readonly turns = new WeakMap<EtcdSession, KeyTurns>();
  private readonly turnDone = new WeakMap<EtcdBatch, () => void>();
  private readonly lockCalls: LockApiContext = {
    client: this.client,
    calls: this.calls,
    probeAfterMs: PROBE_AFTER_MS,
    safetyNetMs: watchSafetyNetMs(this.config.sessionTtlSeconds),
    txn: (session, request) => this.txn(session, 'queue for a lock', request),
  };

  /** The Lock service's key knows no modes: the refusal names the protocol that has them. */
  modeRefusal(mode: EntryMode): string | undefined {
    if (mode === 'write') return undefined;
    const what = mode === 'read' ? "mode: 'read'" : 'semaphores';
    return (
      `backend.protocol 'lock-api' does not offer ${what} (etcd's Lock service grants the exclusive lock only): use protocol 'native' ` +
      '(the default) for them, or another backend: memory, redis, etcd, zookeeper or postgres.'
    );
  }

  /** The Lock service's waiters neither write nor read our delay keys, so a lock-delay would not hold against them. */
  override lockDelayRefusal(): string {
    return "backend.protocol 'lock-api' cannot enforce lockDelayMs (etcdctl lock and Go's concurrency.Mutex ignore the delay keys): use protocol 'native' for a lock-delay, or leave lockDelayMs at 0.";
  }

  /** LockService refuses other modes before any I/O; a caller of the backend itself gets the same refusal. */
  private assertGrants(mode: EntryMode = 'write'): void {
    const refusal = this.modeRefusal(mode);
    if (refusal) throw new LockConfigError('backend', refusal);
  }

  /** A try takes the name's key in one transaction (the Lock service has no try), in the key's turn. */
  protected override async tryTake(request: Omit<AcquireRequest, 'signal'>, retryOnNewSession = true): Promise<LockGrant | null> {
    this.assertGrants(request.mode);
    const session = await this.sessions.session('take a lock');
    const turn = this.turnOf(session, lockApiKeys(request.key, session.leaseId));
    await turn.ready;
    let grant: LockGrant | null = null;
    try {
      grant = await super.tryTake(request, retryOnNewSession);
    } finally {
      const batch = grant && this.held.get(grant.owner)?.batch;
      // Taken on this session: the key's turn lasts until it is removed; else it is over.
      if (batch && batch.session === session) this.turnDone.set(batch, turn.done);
      else turn.done();
    }
    return grant;
  }

  /** BatchEntries: the batch's entry (LockApiCall), started once the key's previous entry is gone. */
  protected override enqueue(batch: EtcdBatch, session: EtcdSession, retryOnNewSession: boolean): void {
    if (batch.state !== 'sending') return;
    if (!batch.hasCallers || !this.lifecycle.isOpen) return this.queues.end(batch);
    try {
      this.assertGrants(batch.mode);
    } catch (refused) {
      return this.queues.end(batch, refused);
    }
    // A batch queued anew after its key was deleted had the key's turn: it is over.
    this.turnDone.get(batch)?.();
    const keys = lockApiKeys(batch.key, session.leaseId);
    batch.keys = keys;
    batch.session = session;
    const turn = this.turnOf(session, keys);
    this.turnDone.set(batch, turn.done);
    const call = new LockApiCall(this.lockCalls, session, keys, {
      queued: () => this.queues.sent(batch, true),
      granted: (revision) => {
        this.queues.holds(batch, revision);
        this.queues.sent(batch, false);
      },
      failed: (error, queued) => {
        if (batch.state === 'ended') return;
        // As the native enqueue: etcd may have dropped the session before this process noticed.
        if (!(retryOnNewSession && !queued && this.sessionDropped(session, error) && batch.hasCallers)) return this.queues.end(batch, error);
        this.sessions.session('queue for a lock').then(
          (next) => this.enqueue(batch, next, false),
          (refused) => this.queues.end(batch, refused),
        );
      },
      cleanup: (mayExist) => {
        if (!mayExist) return turn.done();
        this.deleteUnsure(keys, session, turn);
      },
    });
    batch.acquisition = call;
    if (turn.ready) void turn.ready.then(() => call.start());
    else call.start();
  }

  /** BatchEntries: the fenced delete of the batch's key, then the key's next turn. */
  override async remove(batch: EtcdBatch): Promise<void> {
    try {
      await super.remove(batch);
    } finally {
      this.turnDone.get(batch)?.();
    }
  }

  /** A renewal that found the key deleted ended a batch nobody waits in: its key's turn is over. */
  override async renew(grant: LockGrant): Promise<boolean> {
    const batch = this.held.get(grant.owner)?.batch;
    const renewed = await super.renew(grant);
    if (!renewed && batch?.state === 'ended') this.turnDone.get(batch)?.();
    return renewed;
  }

  /** BatchEntries: a key that no longer holds is deleted (the native confirm) and its turn ends. */
  override async confirm(batch: EtcdBatch): Promise<true | Error> {
    const held = await super.confirm(batch);
    if (held !== true) this.turnDone.get(batch)?.();
    return held;
  }

  protected override entryKeys(session: EtcdSession, name: string): LockKeys {
    return lockApiKeys(name, session.leaseId);
  }

  /**
   * A key whose put may still land (its call failed or was given up) is deleted by name now, and
   * once more LATE_PUT_MS later if no entry of this process uses the key then: the name is the
   * same for every entry of the session, so a later delete must never hit a successor's key.
   */
  protected override deleteUnsure(keys: LockKeys, session: EtcdSession, turn: KeyTurn = this.turnOf(session, keys)): void {
    const deleteNow = () => this.deletes.delete(keys, undefined, session).catch(() => undefined);
    void (async () => {
      await turn.ready;
      await deleteNow();
      turn.done();
    })();
    setTimeout(() => {
      if (!session.alive || !this.lifecycle.isOpen || this.turnsOf(session).busy(keyName(keys))) return;
      const late = this.turnOf(session, keys);
      void deleteNow().finally(late.done);
    }, LATE_PUT_MS).unref();
  }

  private turnOf(session: EtcdSession, keys: LockKeys): KeyTurn {
    return this.turnsOf(session).take(keyName(keys));
  }

  private turnsOf(session: EtcdSession): KeyTurns {
    let turns = this.turns.get(session);
    if (!turns) this.turns.set(session, (turns = new KeyTurns()));
    return turns;
  }
}

/** The escaped lock name of a session's key: what its turns are kept by. */
function keyName(keys: LockKeys): string {
  return keys.start.toString('latin1');
}

/** Builds the backend for `{ type: 'etcd', protocol: 'lock-api', ... }`; the session opens in the background. */
export function createEtcdLockApiBackend(
  options: EtcdBackendOptions,
  settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS },
): EtcdLockApiBackend {
  return new EtcdLockApiBackend(...etcdBackendParts(options, settings));
}
