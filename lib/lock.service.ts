import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LOCK_BACKEND } from './backends/lock-backend.token';
import type { LockBackend, LockGrant, LockInspection } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { lockChannels, tracingAcquire, type AcquiredMessage, type AcquireMessage, type TimedOutMessage } from './diagnostics/lock-channels';
import { DistributedLockError, LockBackendError, LockConfigError, LockTimeoutError } from './errors';
import { withinServerTimeout } from './server-timeout';
import { lockContext, LockScope } from './lock-context';
import { LockInstrumentation } from './instrumentation/lock-instrumentation';
import { LockHandle } from './lock-handle';
import { assertLockName, toBackendKey } from './lock-key';
import { LockLease } from './lock-lease';
import { canonicalNames, takeMany } from './lock-many';
import { assertBackendGrants, assertCovers } from './lock-mode';
import { WaitRequest } from './wait-request';
import {
  asPermit,
  assertSemaphoreLimit,
  CALL_OPTION_FIELDS,
  resolveLockOptions,
  resolveRunOptions,
  SEMAPHORE_RUN_FIELDS,
  SEMAPHORE_DECORATOR_FIELDS,
  type AcquireOptions,
  type CallOptions,
  type SemaphoreOptions,
  type ResolvedLockOptions,
  type ResolvedModuleOptions,
  type ResolvedRunOptions,
  type RunOptions,
  type WithLockOptions,
} from './lock-options';

/** One lock name, or several taken together (all or nothing, in one canonical order). */
export type LockNames = string | readonly string[];
import { RESOLVED_LOCK_OPTIONS } from './lock-options.token';

const logger = new Logger('DistributedLock');

/** What LockService.inspect resolves to: the backend's view (LockInspection) of the lock `name`. */
export type LockInspectionResult = { readonly name: string } & LockInspection;

/**
 * Acquire, try, run under, and look up locks. Re-entrant per async call chain: a name the chain
 * already holds is entered again with no backend call, and only the outermost exit releases.
 */
@Injectable()
export class LockService implements OnModuleInit, OnApplicationBootstrap, OnApplicationShutdown {
  /**
   * Services of the applications still running, oldest first; @WithLock uses the newest that
   * finished booting, and one still booting only when none has (see forDecorator).
   */
  private static readonly running: LockService[] = [];
  private booted = false;
  /** 96 random bits: unique across processes, and short, since every lock request carries it. */
  private readonly ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  private ownerSeq = 0;
  private readonly leases = new Set<LockLease>();
  private readonly forget = (lease: LockLease) => void this.leases.delete(lease);
  /** The acquisitions still waiting: shutdown stops them first. */
  private readonly waits = new Set<WaitRequest>();
  private shuttingDown = false;
  /** Locks whose code finished before their `minHoldMs`: released by a timer, or at shutdown. */
  private readonly minHolds = new Map<LockHandle, Deadline>();
  private readonly instrumentation: LockInstrumentation;

  constructor(
    @Inject(LOCK_BACKEND) private readonly backend: LockBackend,
    @Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {
    this.instrumentation = new LockInstrumentation(options);
  }

  /**
   * Registered for @WithLock once the application initialises, not when constructed: an
   * application that fails to boot leaves nothing behind. The module's init hook runs before
   * those of the modules that import it (and, global, before every other module's).
   */
  onModuleInit(): void {
    this.instrumentation.start();
    LockService.running.push(this);
  }

  /** Booted: from now on @WithLock prefers this service to any whose boot may have failed. */
  onApplicationBootstrap(): void {
    this.booted = true;
  }

  private static unregister(service: LockService): void {
    const index = LockService.running.indexOf(service);
    if (index !== -1) LockService.running.splice(index, 1);
  }

  /**
   * @internal The service behind @WithLock, or a clear error when the module was never imported.
   * An application whose boot failed after this module's init never closes, so its service stays
   * listed: one that finished booting wins over it.
   */
  static forDecorator(method: string): LockService {
    const running = LockService.running;
    let service = running[running.length - 1];
    for (let i = running.length - 1; i >= 0; i--) {
      if (running[i].booted) {
        service = running[i];
        break;
      }
    }
    if (!service) {
      throw new DistributedLockError(
        `@WithLock on ${method} ran, but no LockService exists: import DistributedLockModule.forRoot() ` +
          'in the application module, and call decorated methods once the application has initialised ' +
          '(after NestFactory.create(...).init() or listen(), or createApplicationContext).',
      );
    }
    return service;
  }

  /** Waits (FIFO) up to `waitTimeoutMs`, then rejects with LockTimeoutError. Several names: all or nothing. */
  acquire(name: LockNames, options?: AcquireOptions): Promise<LockHandle> {
    let resolved: ResolvedLockOptions;
    try {
      resolved = resolveLockOptions(options, this.options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.acquireWith(name, resolved, options?.signal, 'LockService.acquire', false);
  }

  /**
   * One permit of the semaphore `name`, which at most `limit` holders hold at once across every
   * process, granted first come first served; waits up to `waitTimeoutMs` (0: only if a permit
   * is free now). Release it with the handle, as a lock.
   */
  acquireSemaphore(name: string, limit: number, options?: SemaphoreOptions): Promise<LockHandle> {
    let resolved: ResolvedLockOptions;
    try {
      assertSemaphoreLimit(limit);
      resolved = asPermit(resolveLockOptions(options, this.options, SEMAPHORE_ACQUIRE_FIELDS), limit);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.acquireWith(name, resolved, options?.signal, 'LockService.acquireSemaphore', false);
  }

  /** Takes the lock only if it is free now (or re-entered); `null` otherwise. Never waits. Several names: all or none. */
  tryAcquire(name: LockNames, options?: CallOptions): Promise<LockHandle | null> {
    let resolved: ResolvedLockOptions;
    try {
      resolved = resolveLockOptions(options, this.options, CALL_OPTION_FIELDS);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.take(name, resolved, undefined, 'LockService.tryAcquire', false).then((handle) => {
      if (!handle && lockChannels.timedOut.hasSubscribers) lockChannels.timedOut.publish({ name: namesOf(name), backend: this.backend.name, waitedMs: 0 } satisfies TimedOutMessage);
      return handle;
    });
  }

  /**
   * Runs `fn` holding the lock, then releases it, whatever `fn` did. `fn`'s error is rethrown
   * after the release; when the lock was lost before `fn` finished, the call rejects with
   * LockLostError (unless `onLockLost: 'ignore'`). With `onTimeout: 'skip'`, a lock not taken
   * within `waitTimeoutMs` resolves to `undefined` without running `fn`.
   */
  withLock<T>(name: LockNames, fn: (lock: LockHandle) => T | Promise<T>, options: WithLockOptions & { onTimeout: 'skip' }): Promise<T | undefined>;
  withLock<T>(name: LockNames, fn: (lock: LockHandle) => T | Promise<T>, options?: WithLockOptions): Promise<T>;
  withLock<T>(name: LockNames, fn: (lock: LockHandle) => T | Promise<T>, options?: WithLockOptions): Promise<T | undefined> {
    let resolved: ResolvedRunOptions;
    try {
      resolved = resolveRunOptions(options, this.options, true);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.run(name, fn, resolved, options?.signal, 'LockService.withLock');
  }

  /**
   * Runs `fn` holding one permit of the semaphore `name` (at most `limit` holders at once across
   * every process), then gives the permit back, as withLock does with a lock.
   */
  withSemaphore<T>(name: string, limit: number, fn: (permit: LockHandle) => T | Promise<T>, options: SemaphoreOptions & { onTimeout: 'skip' }): Promise<T | undefined>;
  withSemaphore<T>(name: string, limit: number, fn: (permit: LockHandle) => T | Promise<T>, options?: SemaphoreOptions): Promise<T>;
  withSemaphore<T>(name: string, limit: number, fn: (permit: LockHandle) => T | Promise<T>, options?: SemaphoreOptions): Promise<T | undefined> {
    let resolved: ResolvedRunOptions;
    try {
      assertSemaphoreLimit(limit);
      resolved = asPermit(resolveRunOptions(options, this.options, true, SEMAPHORE_RUN_FIELDS), limit);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.run(name, fn, resolved, options?.signal, 'LockService.withSemaphore');
  }

  /**
   * @internal @WithLock's and @WithSemaphore's way in: its method's name in logs and errors, no
   * `signal`; `limit` for a semaphore.
   */
  runForDecorator<T>(name: LockNames, fn: () => T | Promise<T>, options: RunOptions | undefined, method: string, limit?: number): Promise<T | undefined> {
    let resolved: ResolvedRunOptions;
    try {
      resolved = limit === undefined ? resolveRunOptions(options, this.options, false) : asPermit(resolveRunOptions(options, this.options, false, SEMAPHORE_DECORATOR_FIELDS), limit);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.run(name, fn, resolved, undefined, method);
  }

  private async run<T>(name: LockNames, fn: (lock: LockHandle) => T | Promise<T>, options: ResolvedRunOptions, signal: AbortSignal | undefined, method: string): Promise<T | undefined> {
    const skip = options.onTimeout === 'skip';
    let handle: LockHandle | null;
    try {
      const taken = this.begin(name, options, signal, method, options.waitTimeoutMs !== 0);
      if (taken instanceof WaitRequest) {
        // Awaited here, not through waited(): a promise layer less on every lock's path.
        let grant: LockGrant;
        try {
          grant = await taken.granted;
        } catch (error) {
          throw this.waitFailed(taken, error);
        } finally {
          this.waitEnded(taken);
        }
        const held = this.holding(grant, name as string, options, taken.started);
        handle = held instanceof LockHandle ? held : await held;
      } else {
        handle = await taken;
      }
    } catch (error) {
      return this.notTaken(name, error, skip, method);
    }
    if (!handle) return this.notTaken(name, new LockTimeoutError(namesOf(name), 0), skip, method);
    const scope = handle.reentrant
      ? lockContext.getStore()
      : handle.parts
        ? LockScope.withEach(lockContext.getStore(), this, handle)
        : LockScope.with(lockContext.getStore(), this, handle.lease.grant.key, handle);
    let result: T;
    try {
      const returned = lockContext.run(scope!, fn, handle);
      // A plain value needs no await: the release starts at once.
      result = isPromiseLike(returned) ? await returned : returned;
    } catch (error) {
      await this.releaseAfterMinHold(handle, options.minHoldMs);
      throw error;
    }
    const lost = handle.lost;
    await this.releaseAfterMinHold(handle, options.minHoldMs);
    if (lost && options.onLockLost === 'throw') throw lost;
    return result;
  }

  /**
   * Releases now, or, when the lock was taken less than `minHoldMs` ago, later in the background
   * (the caller is not kept waiting). A re-entrant handle's lock is its outer holder's to keep.
   */
  private releaseAfterMinHold(handle: LockHandle, minHoldMs: number): Promise<void> {
    if (minHoldMs === 0 || handle.reentrant) return handle.release();
    const leftMs = minHoldMs - handle.heldMs;
    if (leftMs <= 0 || !handle.isActive) return handle.release();
    // Not kept alive: a process that exits meanwhile leaves the lock to its lease, which covers minHoldMs.
    const timer = deadlines.add(performance.now() + leftMs, () => {
      this.minHolds.delete(handle);
      void handle.release();
    });
    this.minHolds.set(handle, timer);
    return Promise.resolve();
  }

  /** The handle of `name` if the calling async chain holds it, else undefined. */
  current(name: string): LockHandle | undefined {
    return lockContext.getStore()?.find(this, this.backendKey(name));
  }

  /**
   * The server's view of the lock `name`: held or free, the holder's owner id and fencing token
   * (and, where the backend can tell, how long it has held it and when its lease ends), and how
   * many wait. Another process's lock shows up. Bounded by `serverTimeoutMs`.
   */
  async inspect(name: string): Promise<LockInspectionResult> {
    const key = this.operatorKey(name, 'inspect');
    const inspection = await this.operatorCall(`inspect "${name}"`, () => this.backend.inspect!(key));
    return { name, ...inspection };
  }

  /**
   * An operator's escape hatch for a stuck lock: removes its holder's lease on the server,
   * whoever holds it, and the next waiter is granted. The holder's lost signal fires at its next
   * contact with the server; its fencing token is lower than the next holder's, so storage that
   * checks tokens refuses its late writes. True when a holder was removed, false when the lock
   * was free. Not for application code: see the README, "Force release".
   */
  async forceRelease(name: string): Promise<boolean> {
    const key = this.operatorKey(name, 'forceRelease');
    const removed = await this.operatorCall(`force the release of "${name}"`, () => this.backend.forceRelease!(key));
    if (removed) logger.warn(`forceRelease("${name}") removed the holder's lease (${this.backend.name} backend); the holder learns at its next renewal.`);
    return removed;
  }

  /** The key of `name` for an operator's call; a bad name, or a backend without the call, fails before any I/O. */
  private operatorKey(name: string, method: 'inspect' | 'forceRelease'): string {
    assertLockName(name, `LockService.${method}`);
    if (typeof this.backend[method] !== 'function') {
      throw new LockConfigError(
        'backend',
        `the ${this.backend.name} backend has no ${method}(), which LockService.${method} needs: a custom backend implements LockBackend.${method} for it (every built-in backend has it).`,
      );
    }
    return this.backendKey(name);
  }

  /** One operator's call at the server, bounded by serverTimeoutMs like a renewal or a release. */
  private async operatorCall<T>(operation: string, call: () => Promise<T>): Promise<T> {
    let answer: Promise<T>;
    try {
      answer = call();
    } catch (error) {
      answer = Promise.reject(error);
    }
    try {
      return await withinServerTimeout(answer, this.backend, operation, this.options.serverTimeoutMs);
    } catch (error) {
      throw this.wrap(operation, error);
    }
  }

  /**
   * Shutdown takes no new locks and abandons waits, then gives each lock still held until its
   * lease ends to be released by its holder (renewal stops; a holder still running then is told
   * its lock was lost). Each lock is released once, at the server, so other processes need not
   * wait for a lease to run out. A `custom` backend is the caller's to close; the others close here.
   */
  async onApplicationShutdown(): Promise<void> {
    this.shuttingDown = true;
    // Waits first: a waiter woken by one of the releases below would get a lock about to go.
    const abandoned = new DistributedLockError('The application is shutting down: the wait for the lock was abandoned.');
    for (const request of [...this.waits]) request.stop(abandoned);
    // Their code is done: a shutting-down process gives up the minimum hold rather than wait for it.
    for (const [handle, timer] of this.minHolds) {
      deadlines.cancel(timer);
      void handle.release();
    }
    this.minHolds.clear();
    await Promise.all([...this.leases].map((lease) => lease.drain()));
    LockService.unregister(this);
    if (this.options.backend.type !== 'custom') await this.backend.close();
    this.instrumentation.stop();
  }

  private backendKey(name: string): string {
    return toBackendKey(this.options.keyPrefix, name, this.backend.maxKeyBytes);
  }

  /**
   * As take(), waiting unless `waitTimeoutMs` is 0; a lock not taken is a LockTimeoutError,
   * published as timed out, or as skipped when the caller will `skip`.
   */
  private acquireWith(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, skip: boolean): Promise<LockHandle> {
    // One reaction, not an async layer: withLock takes every lock through here.
    return this.take(name, options, signal, method, options.waitTimeoutMs !== 0).then(
      (handle) => handle ?? this.timedOut(name, new LockTimeoutError(namesOf(name), 0), skip),
      (error: unknown) => this.timedOut(name, error, skip),
    );
  }

  /** Rethrows `error`; a lock not taken in time is published first, as skipped when the caller will skip. */
  private timedOut(name: LockNames, error: unknown, skip: boolean): never {
    this.publishTimeout(name, error, skip);
    throw error;
  }

  /** A lock run() did not take: rethrows `error`, or, for a timeout the caller skips, resolves to undefined. */
  private notTaken(name: LockNames, error: unknown, skip: boolean, method: string): undefined {
    if (!skip || !(error instanceof LockTimeoutError)) return this.timedOut(name, error, skip);
    this.publishTimeout(name, error, skip);
    logger.debug(`${method} skipped: lock "${namesOf(name)}" was not taken within ${error.waitedMs} ms (onTimeout: 'skip').`);
    return undefined;
  }

  private publishTimeout(name: LockNames, error: unknown, skip: boolean): void {
    if (!(error instanceof LockTimeoutError)) return;
    const published = skip ? lockChannels.skipped : lockChannels.timedOut;
    if (published.hasSubscribers) published.publish({ name: namesOf(name), backend: this.backend.name, waitedMs: error.waitedMs } satisfies TimedOutMessage);
  }

  /**
   * The one path to a lock, for acquire, withLock and tryAcquire: re-entered if the chain holds
   * it, else from the backend, waiting in its queue when `wait`, or taken only if free (null if not).
   */
  private take(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> {
    const taken = this.begin(name, options, signal, method, wait);
    return taken instanceof WaitRequest ? this.waited(taken, name as string, options) : taken;
  }

  /** Several names (see takeMany); one name of an array is that name's lock. */
  private takeMany(names: readonly string[], options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> {
    try {
      const ordered = canonicalNames(names, method, (name) => this.backendKey(name));
      if (ordered.length === 1) return this.take(ordered[0].name, options, signal, method, wait);
      assertBackendGrants(this.backend, options.mode);
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
  private begin(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> | WaitRequest {
    if (typeof name !== 'string' && Array.isArray(name)) return this.takeMany(name, options, signal, method, wait);
    try {
      assertLockName(name, method);
      const key = this.backendKey(name);
      const reentered = this.reenter(key, name, options);
      if (reentered) return Promise.resolve(reentered);
      if (options.mode !== 'write') assertBackendGrants(this.backend, options.mode);
      signal?.throwIfAborted();
      this.assertRunning();
      if (tracingAcquire()) {
        const message: AcquireMessage = { name, backend: this.backend.name, wait };
        return lockChannels.acquire.tracePromise(() => this.fromBackend(key, name, options, signal, wait, message), message);
      }
      return wait ? this.startWait(key, name, options, signal) : this.fromBackend(key, name, options, signal, false);
    } catch (error) {
      // Not async (a promise layer less per cycle): bad input still rejects, never throws.
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
    const request = new WaitRequest(key, this.nextOwner(), options.ttlMs, performance.now(), options.mode, options.limit);
    let granted: Promise<LockGrant>;
    try {
      granted = this.backend.acquire(request);
    } catch (error) {
      granted = Promise.reject(error);
    }
    // Set up while the request is on its way to the server: nothing here is needed before it answers.
    request.startClock(name, options.waitTimeoutMs, signal, this.backend);
    request.granted = this.backend.settlesStoppedWaits ? granted : request.bound(granted, this.releaseLate);
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

  /** A timeout or the caller's abort reaches us as the signal's own reason: passed through; else wrapped. */
  private waitFailed(request: WaitRequest, error: unknown): unknown {
    return request.stoppedWith(error) ? error : this.wrap('acquire', error);
  }

  private waitEnded(request: WaitRequest, message?: AcquireMessage): void {
    request.stopClock();
    this.waits.delete(request);
    if (message) message.waitedMs = performance.now() - request.started;
  }

  /**
   * The handle of a new `grant`, asked for at `started`; at shutdown the grant goes straight back
   * (a rejected promise, then).
   */
  private holding(grant: LockGrant, name: string, options: ResolvedLockOptions, started: number, message?: AcquireMessage): LockHandle | Promise<never> {
    if (this.shuttingDown) return this.givenBack(grant);
    const handle = new LockHandle(this.track(grant, name, options), false);
    if (message) message.fencingToken = grant.fencingToken;
    if (lockChannels.acquired.hasSubscribers) {
      const acquired: AcquiredMessage = { name, backend: this.backend.name, fencingToken: grant.fencingToken, waitedMs: performance.now() - started };
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
  private async tryGrant(key: string, { ttlMs, mode, limit }: ResolvedLockOptions): Promise<LockGrant | null> {
    let taken: Promise<LockGrant | null>;
    try {
      taken = this.backend.tryAcquire(mode === 'write' ? { key, owner: this.nextOwner(), ttlMs } : { key, owner: this.nextOwner(), ttlMs, mode, limit });
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
    const held = lockContext.getStore()?.find(this, key);
    if (held && held.lease.mode !== options.mode) assertCovers(name, held.lease.mode, options.mode);
    return held;
  }

  /** Wraps client errors once, at the boundary; the library's own errors pass through. */
  private wrap(operation: string, error: unknown): Error {
    return error instanceof DistributedLockError ? error : new LockBackendError(this.backend.name, operation, error, this.backend.address);
  }

  private track(grant: LockGrant, name: string, options: ResolvedLockOptions): LockLease {
    const { ttlMs, renewIntervalMs, renew, mode } = options;
    const lease = new LockLease(this.backend, grant, name, ttlMs, renewIntervalMs, renew, this.options.serverTimeoutMs, this.forget, mode);
    this.leases.add(lease);
    return lease;
  }

  private nextOwner(): string {
    return this.ownerPrefix + (++this.ownerSeq).toString(36);
  }
}

/** A semaphore call's fields with `signal`, for acquireSemaphore. */
const SEMAPHORE_ACQUIRE_FIELDS: readonly string[] = SEMAPHORE_RUN_FIELDS.filter((field) => field !== 'onTimeout' && field !== 'minHoldMs');

/** The names of a call as messages and errors show them. */
function namesOf(name: LockNames): string {
  return typeof name === 'string' ? name : name.join(', ');
}

/** A thenable, which `await` would wait for; anything else is a result already. */
function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function';
}
