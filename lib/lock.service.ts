import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LOCK_BACKEND } from './backends/lock-backend.token';
import type { AcquireRequest, LockBackend, LockGrant } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { DistributedLockError, LockBackendError, LockTimeoutError } from './errors';
import { lockContext, LockScope } from './lock-context';
import { LockHandle } from './lock-handle';
import { assertLockName, toBackendKey } from './lock-key';
import { LockLease } from './lock-lease';
import {
  CALL_OPTION_FIELDS,
  resolveLockOptions,
  type AcquireOptions,
  type LockOptions,
  type ResolvedLockOptions,
  type ResolvedModuleOptions,
} from './lock-options';
import { RESOLVED_LOCK_OPTIONS } from './lock-options.token';

/**
 * Acquire, try, run under, and look up locks. Re-entrant per async call chain: a name the chain
 * already holds is entered again with no backend call, and only the outermost exit releases.
 */
@Injectable()
export class LockService implements OnModuleInit, OnApplicationShutdown {
  /** Services of the applications still running, oldest first; @WithLock uses the newest. */
  private static readonly running: LockService[] = [];
  /** 96 random bits: unique across processes, and short, since every lock request carries it. */
  private readonly ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  private ownerSeq = 0;
  private readonly leases = new Set<LockLease>();
  private readonly forget = (lease: LockLease) => void this.leases.delete(lease);
  /** The acquisitions still waiting: shutdown stops them first. */
  private readonly waits = new Set<WaitRequest>();
  private shuttingDown = false;

  constructor(
    @Inject(LOCK_BACKEND) private readonly backend: LockBackend,
    @Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {}

  /**
   * Registered for @WithLock once the application initialises, not when constructed: an
   * application that fails to boot leaves nothing behind. The module's init hook runs before
   * those of the modules that import it (and, global, before every other module's).
   */
  onModuleInit(): void {
    LockService.running.push(this);
  }

  /** @internal The service behind @WithLock, or a clear error when the module was never imported. */
  static forDecorator(method: string): LockService {
    const service = LockService.running[LockService.running.length - 1];
    if (!service) {
      throw new DistributedLockError(
        `@WithLock on ${method} ran, but no LockService exists: import DistributedLockModule.forRoot() ` +
          'in the application module, and call decorated methods once the application has initialised ' +
          '(after NestFactory.create(...).init() or listen(), or createApplicationContext).',
      );
    }
    return service;
  }

  /** Waits (FIFO) up to `waitTimeoutMs`, then rejects with LockTimeoutError. */
  acquire(name: string, options?: AcquireOptions): Promise<LockHandle> {
    return this.acquireWith(name, resolveLockOptions(options, this.options), options?.signal, 'LockService.acquire');
  }

  /** Takes the lock only if it is free now (or re-entered); `null` otherwise. Never waits. */
  tryAcquire(name: string, options?: LockOptions): Promise<LockHandle | null> {
    return this.take(name, resolveLockOptions(options, this.options, CALL_OPTION_FIELDS), undefined, 'LockService.tryAcquire', false);
  }

  /**
   * Runs `fn` holding the lock, then releases it, whatever `fn` did. `fn`'s error is rethrown
   * after the release; when the lock was lost before `fn` finished, the call rejects with
   * LockLostError (unless `onLockLost: 'ignore'`).
   */
  async withLock<T>(name: string, fn: (lock: LockHandle) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    const resolved = resolveLockOptions(options, this.options);
    const handle = await this.acquireWith(name, resolved, options?.signal, 'LockService.withLock');
    const lease = handle.lease;
    const scope = handle.reentrant ? lockContext.getStore() : LockScope.with(lockContext.getStore(), this, lease.grant.key, handle);
    let result: T;
    try {
      result = await lockContext.run(scope!, () => fn(handle));
    } catch (error) {
      await handle.release();
      throw error;
    }
    const lost = lease.lost;
    await handle.release();
    if (lost && resolved.onLockLost === 'throw') throw lost;
    return result;
  }

  /** The handle of `name` if the calling async chain holds it, else undefined. */
  current(name: string): LockHandle | undefined {
    return lockContext.getStore()?.find(this, this.backendKey(name));
  }

  /**
   * Locks still held at shutdown are reported lost (their critical sections may still be running)
   * and released at the server, so other processes need not wait for the leases to run out.
   */
  async onApplicationShutdown(): Promise<void> {
    this.shuttingDown = true;
    // Waits first: a waiter woken by one of the releases below would get a lock lost at once.
    const abandoned = new DistributedLockError('The application is shutting down: the wait for the lock was abandoned.');
    for (const request of [...this.waits]) request.stop(abandoned);
    const held = [...this.leases];
    this.leases.clear();
    for (const lease of held) lease.markLost('backend-closed');
    await Promise.all(held.map((lease) => this.backend.release(lease.grant).catch(() => undefined)));
    const running = LockService.running.indexOf(this);
    if (running !== -1) LockService.running.splice(running, 1);
    await this.backend.close();
  }

  private backendKey(name: string): string {
    return toBackendKey(this.options.keyPrefix, name, this.backend.maxKeyBytes);
  }

  /** As take(), waiting unless `waitTimeoutMs` is 0; a lock not taken is a LockTimeoutError. */
  private async acquireWith(name: string, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string): Promise<LockHandle> {
    const handle = await this.take(name, options, signal, method, options.waitTimeoutMs !== 0);
    if (!handle) throw new LockTimeoutError(name, 0);
    return handle;
  }

  /**
   * The one path to a lock, for acquire, withLock and tryAcquire: re-entered if the chain holds
   * it, else from the backend, waiting in its queue when `wait`, or taken only if free (null if not).
   */
  private async take(name: string, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, wait: boolean): Promise<LockHandle | null> {
    assertLockName(name, method);
    const key = this.backendKey(name);
    const reentered = this.reenter(key);
    if (reentered) return reentered;
    signal?.throwIfAborted();
    this.assertRunning();
    let grant: LockGrant;
    if (!wait) {
      const taken = await this.tryGrant(key, options.ttlMs);
      if (!taken) return null;
      grant = taken;
    } else {
      const started = performance.now();
      const request = new WaitRequest(key, this.nextOwner(), options.ttlMs);
      let granted: Promise<LockGrant>;
      try {
        granted = this.backend.acquire(request);
      } catch (error) {
        granted = Promise.reject(error);
      }
      // Set up while the request is on its way to the server: nothing here is needed before it answers.
      request.startClock(name, started, options.waitTimeoutMs, signal);
      this.waits.add(request);
      try {
        grant = await granted;
      } catch (error) {
        // A timeout or the caller's abort reaches us as the signal's own reason: pass it through.
        throw request.stoppedWith(error) ? error : this.wrap('acquire', error);
      } finally {
        request.stopClock();
        this.waits.delete(request);
      }
    }
    if (this.shuttingDown) {
      await this.backend.release(grant).catch(() => undefined);
      this.assertRunning();
    }
    return new LockHandle(this.track(grant, name, options), false);
  }

  private assertRunning(): void {
    if (this.shuttingDown) throw new DistributedLockError('The application is shutting down: no new locks are taken.');
  }

  private tryGrant(key: string, ttlMs: number): Promise<LockGrant | null> {
    return this.backend.tryAcquire({ key, owner: this.nextOwner(), ttlMs }).catch((error) => {
      throw this.wrap('try to acquire', error);
    });
  }

  private reenter(key: string): LockHandle | undefined {
    const held = lockContext.getStore()?.find(this, key);
    if (!held) return undefined;
    held.lease.enter();
    return new LockHandle(held.lease, true);
  }

  /** Wraps client errors once, at the boundary; the library's own errors pass through. */
  private wrap(operation: string, error: unknown): Error {
    return error instanceof DistributedLockError ? error : new LockBackendError(this.backend.name, operation, error);
  }

  private track(grant: LockGrant, name: string, options: ResolvedLockOptions): LockLease {
    const lease = new LockLease(this.backend, grant, name, options.ttlMs, options.renewIntervalMs, options.renew, this.forget);
    this.leases.add(lease);
    return lease;
  }

  private nextOwner(): string {
    return this.ownerPrefix + (++this.ownerSeq).toString(36);
  }
}

/**
 * One acquisition's request to the backend. Its signal is made only when a backend looks at it
 * (most grants come at once, before any backend needs it) or when the wait must end: an
 * AbortSignal costs microseconds to make.
 */
class WaitRequest implements AcquireRequest {
  private controller?: AbortController;
  private timer?: Deadline;
  private callerSignal?: AbortSignal;
  private onCallerAbort?: () => void;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
  ) {}

  /** Ends the wait `waitTimeoutMs` after `started`, or when the caller's signal aborts. */
  startClock(name: string, started: number, waitTimeoutMs: number, callerSignal: AbortSignal | undefined): void {
    if (waitTimeoutMs !== Infinity) {
      // Kept alive for: a process waiting for a lock is not done.
      this.timer = deadlines.add(started + waitTimeoutMs, () => this.stop(new LockTimeoutError(name, Math.round(performance.now() - started))), true);
    }
    if (callerSignal) {
      this.callerSignal = callerSignal;
      this.onCallerAbort = () => this.stop(callerSignal.reason);
      callerSignal.addEventListener('abort', this.onCallerAbort, { once: true });
    }
  }

  stopClock(): void {
    deadlines.cancel(this.timer);
    if (this.onCallerAbort) this.callerSignal!.removeEventListener('abort', this.onCallerAbort);
  }

  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** Ends the wait: the backend rejects with `reason`. */
  stop(reason: unknown): void {
    (this.controller ??= new AbortController()).abort(reason);
  }

  /** `error` is the reason this request was stopped with (not a backend failure). */
  stoppedWith(error: unknown): boolean {
    return this.controller?.signal.aborted === true && this.controller.signal.reason === error;
  }
}
