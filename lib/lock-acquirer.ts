import { randomBytes } from 'node:crypto';
import type { LockBackend, LockGrant } from './backends/lock-backend.interface';
import { lockChannels, tracingAcquire, type AcquiredMessage, type AcquireMessage } from './diagnostics/lock-channels';
import { DistributedLockError, LockBackendError, LockServerUnreachableError } from './errors';
import { lockContext } from './lock-context';
import { LockHandle } from './lock-handle';
import { assertLockName, toBackendKey } from './lock-key';
import { LockLease } from './lock-lease';
import { assertBackendDelays } from './lock-delay';
import { canonicalNames, takeMany } from './lock-many';
import { assertBackendGrants, assertCovers } from './lock-mode';
import type { ResolvedLockOptions, ResolvedModuleOptions } from './lock-options';
import { withinServerTimeout } from './server-timeout';
import { WaitRequest } from './wait-request';

/** One lock name, or several taken together (all or nothing, in one canonical order). */
export type LockNames = string | readonly string[];

/**
 * The one path from a call to a held lock, for every primitive: re-entry in the async chain, the
 * mode checks, the backend's grant (waited for with its deadline, or tried), the lease that
 * renews it, the names of a call on several. LockService keeps the public API around it.
 */
export class LockAcquirer {
  /** 96 random bits: unique across processes, and short, since every lock request carries it. */
  private readonly ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  private ownerSeq = 0;
  /** The leases held now: shutdown drains them. */
  readonly leases = new Set<LockLease>();
  private readonly forget = (lease: LockLease) => void this.leases.delete(lease);
  /** The acquisitions still waiting: shutdown stops them first. */
  readonly waits = new Set<WaitRequest>();
  private shuttingDown = false;

  constructor(
    private readonly backend: LockBackend,
    private readonly options: ResolvedModuleOptions,
    /** The lock domain re-entrancy is scoped to (the LockService): see LockScope. */
    private readonly domain: object,
  ) {}

  /**
   * No new locks from now on; waits end with `abandoned`, then each lease still held is given
   * until its lease ends to be released by its holder.
   */
  async shutDown(abandoned: Error, beforeDrain: () => void): Promise<void> {
    this.shuttingDown = true;
    // Waits first: a waiter woken by one of the releases below would get a lock about to go.
    for (const request of [...this.waits]) request.stop(abandoned);
    beforeDrain();
    await Promise.all([...this.leases].map((lease) => lease.drain()));
  }

  /**
   * The one path to a lock, for acquire, withLock and tryAcquire: re-entered if the chain holds
   * it, else from the backend, waiting in its queue when `wait`, or taken only if free (null if not).
   */
  take(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> {
    const taken = this.begin(name, options, signal, method, wait);
    return taken instanceof WaitRequest ? this.waited(taken, name as string, options) : taken;
  }

  /** Several names (see takeMany); one name of an array is that name's lock. */
  private takeMany(names: readonly string[], options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> {
    try {
      const ordered = canonicalNames(names, method, (name) => this.backendKey(name));
      if (ordered.length === 1) return this.take(ordered[0].name, options, signal, method, wait);
      assertBackendGrants(this.backend, options.mode);
      if (options.lockDelayMs > 0) assertBackendDelays(this.backend, options.mode);
      for (const { name, key } of ordered) this.reenterable(key, name, options);
      return takeMany(ordered, options, wait, (name, each, waitEach) => this.take(name, each, signal, method, waitEach));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * take() up to the backend's answer: the handle's promise (re-entered, a try, a traced
   * acquisition, bad input), or, for a plain wait, the request on its way, for the caller to await.
   */
  begin(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> | WaitRequest {
    if (typeof name !== 'string' && Array.isArray(name)) return this.takeMany(name, options, signal, method, wait);
    try {
      assertLockName(name, method);
      const key = this.backendKey(name);
      const reentered = this.reenter(key, name, options);
      if (reentered) return Promise.resolve(reentered);
      if (options.mode !== 'write') assertBackendGrants(this.backend, options.mode);
      if (options.lockDelayMs > 0) assertBackendDelays(this.backend, options.mode);
      signal?.throwIfAborted();
      this.assertRunning();
      if (tracingAcquire()) {
        const message: AcquireMessage = { name, backend: this.backend.name, mode: options.mode, wait };
        return lockChannels.acquire.tracePromise(() => this.fromBackend(key, name, options, signal, wait, message), message);
      }
      return wait ? this.startWait(key, name, options, signal) : this.fromBackend(key, name, options, signal, false);
    } catch (error) {
      // Not async, as every lock takes this path; bad input still rejects, never throws.
      return Promise.reject(error);
    }
  }

  /** A new grant from the backend (not re-entered); `message`: the tracing message to complete. */
  private async fromBackend(
    key: string,
    name: string,
    options: ResolvedLockOptions,
    signal: AbortSignal | undefined,
    wait: boolean,
    message?: AcquireMessage,
  ): Promise<LockHandle | null> {
    if (wait) return this.waited(this.startWait(key, name, options, signal), name, options, message);
    const started = performance.now();
    let taken: LockGrant | null;
    try {
      taken = await this.tryGrant(key, options);
    } finally {
      if (message) message.waitedMs = performance.now() - started;
    }
    return taken && this.holding(taken, name, options, started, message);
  }

  /** The request goes to the backend; its wait's clock starts while it is on its way. */
  private startWait(key: string, name: string, options: ResolvedLockOptions, signal: AbortSignal | undefined): WaitRequest {
    const request = new WaitRequest(key, this.nextOwner(), options.ttlMs, performance.now(), options.mode, options.limit, options.lockDelayMs || undefined);
    let granted: Promise<LockGrant>;
    try {
      granted = this.backend.acquire(request);
    } catch (error) {
      granted = Promise.reject(error);
    }
    // Set up while the request is on its way to the server: nothing here is needed before it answers.
    request.startClock(name, options.waitTimeoutMs, signal, this.backend);
    // A queueing backend settles the request itself; another's promise is bound to it.
    request.granted = granted === request.promise ? granted : request.bound(granted, this.releaseLate);
    this.waits.add(request);
    return request;
  }

  /** The handle of the grant `request` waits for. */
  private async waited(request: WaitRequest, name: string, options: ResolvedLockOptions, message?: AcquireMessage): Promise<LockHandle> {
    let grant: LockGrant;
    try {
      grant = await request.granted;
    } catch (error) {
      throw this.waitFailed(request, error);
    } finally {
      this.waitEnded(request, message);
    }
    return this.holding(grant, name, options, request.started, message);
  }

  /**
   * A timeout or the caller's abort reaches us as the signal's own reason: passed through; else
   * wrapped. An unreachable server is reported with the time this caller waited, not the time of
   * the backend's last attempt (a backend may try several times within one wait).
   */
  waitFailed(request: WaitRequest, error: unknown): unknown {
    if (request.stoppedWith(error)) return error;
    if (error instanceof LockServerUnreachableError) {
      const waitedMs = Math.round(performance.now() - request.started);
      if (waitedMs > error.waitedMs) return new LockServerUnreachableError(error.backend, error.operation, error.address ?? error.backend, waitedMs, error.cause);
    }
    return this.wrap('acquire', error);
  }

  waitEnded(request: WaitRequest, message?: AcquireMessage): void {
    request.stopClock();
    this.waits.delete(request);
    if (message) message.waitedMs = performance.now() - request.started;
  }

  /**
   * The handle of a new `grant`, asked for at `started`; at shutdown the grant goes straight back
   * (a rejected promise, then).
   */
  holding(grant: LockGrant, name: string, options: ResolvedLockOptions, started: number, message?: AcquireMessage): LockHandle | Promise<never> {
    if (this.shuttingDown) return this.givenBack(grant);
    const handle = new LockHandle(this.track(grant, name, options), false);
    if (message) message.fencingToken = grant.fencingToken;
    if (lockChannels.acquired.hasSubscribers) {
      const acquired: AcquiredMessage = { name, backend: this.backend.name, mode: options.mode, fencingToken: grant.fencingToken, waitedMs: performance.now() - started };
      lockChannels.acquired.publish(acquired);
    }
    return handle;
  }

  /** A grant that came during shutdown: released, and the caller told no lock is taken now. */
  private async givenBack(grant: LockGrant): Promise<never> {
    await this.backend.release(grant).catch(() => undefined);
    throw this.shutdownError();
  }

  private assertRunning(): void {
    if (this.shuttingDown) throw this.shutdownError();
  }

  private shutdownError(): DistributedLockError {
    return new DistributedLockError('The application is shutting down: no new locks are taken.');
  }

  /** One round trip, bounded by serverTimeoutMs whatever the server does; a late grant is given back. */
  private async tryGrant(key: string, { ttlMs, mode, limit, lockDelayMs }: ResolvedLockOptions): Promise<LockGrant | null> {
    let taken: Promise<LockGrant | null>;
    try {
      const request = mode === 'write' ? { key, owner: this.nextOwner(), ttlMs } : { key, owner: this.nextOwner(), ttlMs, mode, limit };
      taken = this.backend.tryAcquire(lockDelayMs > 0 ? { ...request, lockDelayMs } : request);
    } catch (error) {
      taken = Promise.reject(error);
    }
    try {
      return await withinServerTimeout(taken, this.backend, 'try to acquire', this.options.serverTimeoutMs, (grant) => grant && this.releaseLate(grant));
    } catch (error) {
      throw this.wrap('try to acquire', error);
    }
  }

  /** A grant that arrived after its caller stopped waiting goes straight back. */
  private readonly releaseLate = (grant: LockGrant): void => {
    this.backend.release(grant).catch(() => undefined);
  };

  /** A new handle on the chain's lease of `key`, if it holds one in a mode that covers `options.mode`. */
  private reenter(key: string, name: string, options: ResolvedLockOptions): LockHandle | undefined {
    const held = this.reenterable(key, name, options);
    if (!held) return undefined;
    held.lease.enter();
    return new LockHandle(held.lease, true);
  }

  /** The chain's handle of `key`; LockModeError when its mode does not cover the one asked for. */
  private reenterable(key: string, name: string, options: ResolvedLockOptions): LockHandle | undefined {
    const held = lockContext.getStore()?.find(this.domain, key);
    if (held && held.lease.mode !== options.mode) assertCovers(name, held.lease.mode, options.mode);
    return held;
  }

  /** Wraps client errors once, at the boundary; the library's own errors pass through. */
  wrap(operation: string, error: unknown): Error {
    return error instanceof DistributedLockError ? error : new LockBackendError(this.backend.name, operation, error, this.backend.address);
  }

  private track(grant: LockGrant, name: string, options: ResolvedLockOptions): LockLease {
    const { ttlMs, renewIntervalMs, renew, mode, lockDelayMs } = options;
    const lease = new LockLease(this.backend, grant, name, ttlMs, renewIntervalMs, renew, this.options.serverTimeoutMs, this.forget, mode, lockDelayMs);
    this.leases.add(lease);
    return lease;
  }

  private nextOwner(): string {
    return this.ownerPrefix + (++this.ownerSeq).toString(36);
  }

  backendKey(name: string): string {
    return toBackendKey(this.options.keyPrefix, name, this.backend.maxKeyBytes);
  }
}
