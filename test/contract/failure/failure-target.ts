import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { LockServerUnreachableError, type BackendOptions, type DistributedLockModuleOptions, type LockService } from '../../../lib';
import { moduleLikeService } from '../../support/lock-service-factory';
import type { ServerFaults } from '../../support/server-faults';
import type { BackendCapabilities } from '../capabilities';

/** How a client reaches the server: the module's backend options and the address errors must name. */
export interface Route {
  readonly backend: BackendOptions;
  /** `127.0.0.1:<port>`, as every backend's errors are to show it. */
  readonly address: string;
  /**
   * Several servers behind one lock (Redlock's masters). While they come back one by one, an
   * error names only those not back yet: at least `unreachableAtLeast` of `addresses`.
   */
  readonly servers?: { readonly addresses: readonly string[]; readonly unreachableAtLeast: number };
}

/** A running server with its fault controls. */
export interface FailureTarget {
  /** Straight to the server: a killed server refuses these connections. */
  readonly direct: Route;
  /** Through a TcpProxy that can black-hole; absent for a backend without a server. */
  readonly proxied?: Route;
  readonly faults?: ServerFaults;
  stop(): Promise<void>;
}

export interface FailureContractOptions extends BackendCapabilities {
  name: string;
  /** The backend lives in this process (memory): no server faults, no other processes to share it. */
  serverless?: boolean;
  /** False: the backend, as configured, refuses lockDelayMs (Redis 'plain', ZooKeeper 'curator'); its own tests check the refusal. */
  lockDelay?: boolean;
  start(): Promise<FailureTarget>;
}

/** The settings of the fault cases: the module's serverTimeoutMs, and a wait long enough to tell the two apart. */
export const SERVER_TIMEOUT_MS = 1_000;
export const WAIT_TIMEOUT_MS = 3_000;
/**
 * What a bound allows beyond its figure: timers, a Nest boot and client reconnects on a 2-core
 * machine that other test runs share. Still well below WAIT_TIMEOUT_MS, so a backend that waits
 * out the caller's whole wait for a dead server fails.
 */
export const MARGIN_MS = 1_000;
/** How late this process's timers may fire under load (a signal due at a deadline). */
export const TIMER_SLACK_MS = 150;

export interface FailureContext {
  readonly options: FailureContractOptions;
  /** The target the top-level `before` started. */
  target(): FailureTarget;
  newKey(): string;
}

/** The outcome of a call and how long it took, in ms. */
export interface Timed<T> {
  ms: number;
  value?: T;
  error?: unknown;
}

/**
 * Runs `call` and measures it. With `limitMs`, a call still pending then counts as failed with
 * that time, so a hang fails its case in seconds instead of eating the suite's whole time.
 */
export async function timed<T>(call: () => Promise<T>, limitMs = Infinity): Promise<Timed<T>> {
  const started = performance.now();
  let promise: Promise<T>;
  try {
    promise = call();
  } catch (error) {
    promise = Promise.reject(error);
  }
  return settled(promise, started, limitMs);
}

/** As timed(), for a promise made earlier at `since` (a performance.now() time); settles by `since + limitMs`. */
export async function settled<T>(promise: Promise<T>, since: number, limitMs = Infinity): Promise<Timed<T>> {
  let timer: NodeJS.Timeout | undefined;
  const pending = Symbol('pending');
  const limit = new Promise<typeof pending>((resolve) => {
    if (limitMs !== Infinity) timer = setTimeout(() => resolve(pending), Math.max(0, since + limitMs - performance.now()));
  });
  try {
    const value = await Promise.race([promise, limit]);
    if (value === pending) return { ms: performance.now() - since, error: new Error(`still pending after ${Math.round(performance.now() - since)} ms`) };
    return { ms: performance.now() - since, value: value as T };
  } catch (error) {
    return { ms: performance.now() - since, error };
  } finally {
    clearTimeout(timer);
  }
}

/** How long past its bound a measured call is awaited before it counts as hung. */
export const GRACE_MS = 2_000;

/** Prints a measurement next to its bound, in the test's own output, and asserts it. */
export function withinBound(t: TestContext, what: string, ms: number, boundMs: number): void {
  t.diagnostic(`${what}: ${Math.round(ms)} ms (bound ${Math.round(boundMs)} ms)`);
  assert.ok(ms <= boundMs, `${what} took ${Math.round(ms)} ms, over its bound of ${Math.round(boundMs)} ms`);
}

export function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** The call failed with LockServerUnreachableError, and its message names the server's address. */
export function assertUnreachable(outcome: Timed<unknown>, address: string, what: string): void {
  assert.ok(outcome.error !== undefined, `${what} succeeded with the server unreachable`);
  assert.ok(
    outcome.error instanceof LockServerUnreachableError,
    `${what}: expected LockServerUnreachableError, got ${describeError(outcome.error)}`,
  );
  assert.ok(outcome.error.message.includes(address), `${what}: the message does not name ${address}: ${outcome.error.message}`);
  assertWaitedAsMeasured(outcome, what);
}

/** The "within N ms" of the message is what the caller waited (not one attempt's share of it), up to scheduling slack. */
function assertWaitedAsMeasured(outcome: Timed<unknown>, what: string): void {
  const { waitedMs } = outcome.error as LockServerUnreachableError;
  const slackMs = Math.max(150, outcome.ms * 0.1);
  assert.ok(outcome.ms - waitedMs <= slackMs, `${what}: the message says ${waitedMs} ms, the caller waited ${Math.round(outcome.ms)} ms: ${(outcome.error as Error).message}`);
}

/**
 * A call made while the servers come back: unreachable, naming the route's server, or with
 * several servers (Redlock) enough of those still down to have lost the call its majority.
 */
export function assertUnreachableWhileReconnecting(outcome: Timed<unknown>, route: Route, what: string): void {
  if (!route.servers) return assertUnreachable(outcome, route.address, what);
  assert.ok(outcome.error instanceof LockServerUnreachableError, `${what}: expected LockServerUnreachableError, got ${describeError(outcome.error ?? 'success')}`);
  const { addresses, unreachableAtLeast } = route.servers;
  const message = outcome.error.message;
  // A port is never followed by another digit: 127.0.0.1:3715 is not named by 127.0.0.1:37157.
  const named = addresses.filter((address) => new RegExp(`${address.replace(/[.[\]]/g, '\\$&')}(?!\\d)`).test(message));
  assert.ok(named.length >= unreachableAtLeast, `${what}: expected at least ${unreachableAtLeast} of ${addresses.join(', ')} named: ${message}`);
  assertWaitedAsMeasured(outcome, what);
}

/** Rejects when `promise` has not settled after `ms`: an `after` hook must not hang on a dead server. */
export function bounded<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not end within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Module-like services a describe block opens, closed together (each bounded) in its `after`. */
export class Services {
  private readonly open: LockService[] = [];

  async add(options: DistributedLockModuleOptions, warmUp = true): Promise<LockService> {
    const { service } = await moduleLikeService(options);
    this.open.push(service);
    // Connected (and its session open) before a fault is inflicted: the fault is then met by a
    // client that was working, as in production.
    if (warmUp) {
      const lock = await service.tryAcquire(`warm-up-${process.pid}-${this.open.length}-${Date.now()}`);
      assert.ok(lock, 'the warm-up lock was not free');
      await lock.release();
    }
    return service;
  }

  async closeAll(): Promise<void> {
    const closing = this.open.splice(0).map((service) => bounded(service.onApplicationShutdown(), 5_000, 'closing a LockService'));
    const failures = (await Promise.allSettled(closing)).filter((result) => result.status === 'rejected');
    if (failures.length > 0) throw (failures[0] as PromiseRejectedResult).reason;
  }
}
