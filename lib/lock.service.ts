import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { LOCK_BACKEND } from './backends/lock-backend.token';
import type { EntryMode } from './backends/lock-backend.interface';
import type { LockBackend, LockGrant } from './backends/lock-backend.interface';
import { MinHolds } from './min-holds';
import { inspectionResult, type LockInspectionResult } from './lock-inspection';
import { assertOperatorCall, operatorCall } from './operator-calls';
import { lockChannels, type TimedOutMessage } from './diagnostics/lock-channels';
import { DistributedLockError, LockTimeoutError } from './errors';
import { leftScope, lockContext, LockScope, runInScope } from './lock-context';
import { LockInstrumentation } from './instrumentation/lock-instrumentation';
import { LockHandle } from './lock-handle';
import { assertLockName } from './lock-key';
import { warnShortSchedules } from './schedule-checks';
import { LockAcquirer, type LockNames } from './lock-acquirer';
import { assertBackendDelays } from './lock-delay';
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

export type { LockNames };
import { RESOLVED_LOCK_OPTIONS } from './lock-options.token';

const logger = new Logger('DistributedLock');

export type { LockInspectionResult };

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
  private readonly minHolds = new MinHolds();
  private readonly instrumentation: LockInstrumentation;
  private readonly acquirer: LockAcquirer;

  constructor(
    @Inject(LOCK_BACKEND) private readonly backend: LockBackend,
    @Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {
    // A module-wide lock-delay the backend cannot enforce fails the boot, not the first request.
    if (options.lockDelayMs > 0) assertBackendDelays(backend);
    this.instrumentation = new LockInstrumentation(options);
    this.acquirer = new LockAcquirer(backend, options, this);
  }

  /**
   * Registered for @WithLock once the application initialises, not when constructed: an
   * application that fails to boot leaves nothing behind. The module's init hook runs before
   * those of the modules that import it (and, global, before every other module's).
   */
  onModuleInit(): void {
    logger.log(backendLine(this.backend));
    this.instrumentation.start();
    LockService.running.push(this);
  }

  /** Booted: from now on @WithLock prefers this service to any whose boot may have failed. */
  onApplicationBootstrap(): void {
    this.booted = true;
    warnShortSchedules((message) => logger.warn(message));
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
    return this.acquirer.take(name, resolved, undefined, 'LockService.tryAcquire', false).then((handle) => {
      if (!handle && lockChannels.timedOut.hasSubscribers) lockChannels.timedOut.publish({ name: namesOf(name), backend: this.backend.name, mode: resolved.mode, waitedMs: 0 } satisfies TimedOutMessage);
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
      const taken = this.acquirer.begin(name, options, signal, method, options.waitTimeoutMs !== 0);
      if (taken instanceof WaitRequest) {
        // Awaited here rather than through waited(): this is every lock's path.
        let grant: LockGrant;
        try {
          grant = await taken.granted;
        } catch (error) {
          throw this.acquirer.waitFailed(taken, error);
        } finally {
          this.acquirer.waitEnded(taken);
        }
        const held = this.acquirer.holding(grant, name as string, options, taken.started);
        handle = held instanceof LockHandle ? held : await held;
      } else {
        handle = await taken;
      }
    } catch (error) {
      return this.notTaken(name, options.mode, error, skip, method);
    }
    if (!handle) return this.notTaken(name, options.mode, new LockTimeoutError(namesOf(name), 0), skip, method);
    const scope = handle.reentrant
      ? lockContext.getStore()
      : handle.parts
        ? LockScope.withEach(lockContext.getStore(), this, handle)
        : LockScope.with(lockContext.getStore(), this, handle.lease.grant.key, handle);
    let result: T;
    try {
      const returned = runInScope(scope, fn, handle);
      // A plain value needs no await: the release starts at once.
      result = isPromiseLike(returned) ? await returned : returned;
    } catch (error) {
      await this.minHolds.releaseAfter(handle, options.minHoldMs, leftScope);
      throw error;
    }
    const lost = handle.lost;
    await this.minHolds.releaseAfter(handle, options.minHoldMs, leftScope);
    if (lost && options.onLockLost === 'throw') throw lost;
    return result;
  }

  /** The handle of `name` if the calling async chain holds it, else undefined. */
  current(name: string): LockHandle | undefined {
    return lockContext.getStore()?.find(this, this.acquirer.backendKey(name));
  }

  /**
   * The server's view of the lock `name`: held or free, the holder's owner id and fencing token
   * (and, where the backend can tell, how long it has held it and when its lease ends), and how
   * many wait. Another process's lock shows up. Bounded by `serverTimeoutMs`.
   */
  async inspect(name: string): Promise<LockInspectionResult> {
    const key = this.operatorKey(name, 'inspect');
    const inspection = await operatorCall(this.backend, `inspect "${name}"`, () => this.backend.inspect!(key), this.options.serverTimeoutMs);
    return inspectionResult(name, inspection);
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
    const removed = await operatorCall(this.backend, `force the release of "${name}"`, () => this.backend.forceRelease!(key), this.options.serverTimeoutMs);
    if (removed) logger.warn(`forceRelease("${name}") removed the holder's lease (${this.backend.name} backend); the holder learns at its next renewal.`);
    return removed;
  }

  /** The key of `name` for an operator's call; a bad name, or a backend without the call, fails before any I/O. */
  private operatorKey(name: string, method: 'inspect' | 'forceRelease'): string {
    assertLockName(name, `LockService.${method}`);
    assertOperatorCall(this.backend, method);
    return this.acquirer.backendKey(name);
  }

  /**
   * Shutdown takes no new locks and abandons waits, then gives each lock still held until its
   * lease ends to be released by its holder (renewal stops; a holder still running then is told
   * its lock was lost). Each lock is released once, at the server, so other processes need not
   * wait for a lease to run out. A `custom` backend is the caller's to close; the others close here.
   */
  async onApplicationShutdown(): Promise<void> {
    const abandoned = new DistributedLockError('The application is shutting down: the wait for the lock was abandoned.');
    // Their code is done: a shutting-down process gives up the minimum hold rather than wait for it.
    await this.acquirer.shutDown(abandoned, () => this.minHolds.releaseAll());
    LockService.unregister(this);
    if (this.options.backend.type !== 'custom') await this.backend.close();
    this.instrumentation.stop();
  }

  /**
   * As take(), waiting unless `waitTimeoutMs` is 0; a lock not taken is a LockTimeoutError,
   * published as timed out, or as skipped when the caller will `skip`.
   */
  private acquireWith(name: LockNames, options: ResolvedLockOptions, signal: AbortSignal | undefined, method: string, skip: boolean): Promise<LockHandle> {
    // One reaction, not an async layer: withLock takes every lock through here.
    return this.acquirer.take(name, options, signal, method, options.waitTimeoutMs !== 0).then(
      (handle) => handle ?? this.timedOut(name, options.mode, new LockTimeoutError(namesOf(name), 0), skip),
      (error: unknown) => this.timedOut(name, options.mode, error, skip),
    );
  }

  /** Rethrows `error`; a lock not taken in time is published first, as skipped when the caller will skip. */
  private timedOut(name: LockNames, mode: EntryMode, error: unknown, skip: boolean): never {
    this.publishTimeout(name, mode, error, skip);
    throw error;
  }

  /** A lock run() did not take: rethrows `error`, or, for a timeout the caller skips, resolves to undefined. */
  private notTaken(name: LockNames, mode: EntryMode, error: unknown, skip: boolean, method: string): undefined {
    if (!skip || !(error instanceof LockTimeoutError)) return this.timedOut(name, mode, error, skip);
    this.publishTimeout(name, mode, error, skip);
    logger.debug(`${method} skipped: lock "${namesOf(name)}" was not taken within ${error.waitedMs} ms (onTimeout: 'skip').`);
    return undefined;
  }

  private publishTimeout(name: LockNames, mode: EntryMode, error: unknown, skip: boolean): void {
    if (!(error instanceof LockTimeoutError)) return;
    const published = skip ? lockChannels.skipped : lockChannels.timedOut;
    if (published.hasSubscribers) published.publish({ name: namesOf(name), backend: this.backend.name, mode, waitedMs: error.waitedMs } satisfies TimedOutMessage);
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

/**
 * The boot line: an instance that fell back to the embedded backend (a missing environment
 * variable in forRootAsync) shows it in its log, before its locks quietly stop excluding others.
 */
function backendLine(backend: LockBackend): string {
  if (backend.address) return `Locks on the ${backend.name} backend at ${backend.address}.`;
  if (backend.name === 'memory') return "Locks on the embedded memory backend: they exclude callers in this process only; set the module's backend option to share them between processes.";
  return `Locks on the ${backend.name} backend.`;
}
