import { Inject, Injectable } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LOCK_BACKEND } from '../backends/lock-backend.token';
import type { LockBackend, LockGrant } from '../backends/lock-backend.interface';
import { toBackendKey } from '../lock-key';
import { assertTtl, type ResolvedModuleOptions } from '../lock-options';
import { RESOLVED_LOCK_OPTIONS } from '../lock-options.token';
import { withinServerTimeout } from '../server-timeout';

/** What the indicator reports under its key; the shape of @nestjs/terminus's HealthIndicatorResult. */
export type LockHealthResult<Key extends string> = Record<
  Key,
  | { status: 'up'; backend: string; address?: string; roundTripMs: number }
  | { status: 'down'; backend: string; address?: string; message: string }
>;

/** The lock name the generic health check takes and releases when a backend has no `ping`. */
export const HEALTH_CHECK_LOCK_NAME = '__health__';

/**
 * A health indicator for @nestjs/terminus, in terminus 11's HealthIndicatorService style: it
 * returns `up` or `down` instead of throwing, so `HealthCheckService.check()` answers 200 or
 * 503. It needs nothing from terminus at runtime (the result is a plain object of terminus's
 * shape), so the library does not load that optional package.
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.lock.isHealthy('lock')]); }
 * ```
 */
@Injectable()
export class DistributedLockHealthIndicator {
  private readonly owner = `health:${randomBytes(9).toString('base64url')}:`;
  private checks = 0;

  constructor(
    @Inject(LOCK_BACKEND) private readonly backend: LockBackend,
    @Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {}

  /**
   * `up` with the backend's name and one round trip's time, or `down` with the reason, within
   * `timeoutMs` (default: the module's serverTimeoutMs) whatever the server does.
   */
  async isHealthy<const Key extends string>(key: Key, options: { timeoutMs?: number } = {}): Promise<LockHealthResult<Key>> {
    const timeoutMs = options.timeoutMs ?? this.options.serverTimeoutMs;
    assertTtl('timeoutMs', timeoutMs);
    const { name: backend, address } = this.backend;
    const where = address === undefined ? {} : { address };
    try {
      const roundTripMs = await withinServerTimeout(this.roundTrip(), this.backend, 'answer a health check', timeoutMs);
      return { [key]: { status: 'up', backend, ...where, roundTripMs: Math.round(roundTripMs * 100) / 100 } } as LockHealthResult<Key>;
    } catch (error) {
      return { [key]: { status: 'down', backend, ...where, message: error instanceof Error ? error.message : String(error) } } as LockHealthResult<Key>;
    }
  }

  /** The time of one round trip: `ping`, or else a try of a reserved key (then released). */
  private async roundTrip(): Promise<number> {
    const started = performance.now();
    if (this.backend.ping) {
      await this.backend.ping();
      return performance.now() - started;
    }
    const { keyPrefix, ttlMs } = this.options;
    const key = toBackendKey(keyPrefix, HEALTH_CHECK_LOCK_NAME, this.backend.maxKeyBytes);
    // A busy answer (another check holds it) is a round trip too.
    const grant: LockGrant | null = await this.backend.tryAcquire({ key, owner: this.owner + (++this.checks).toString(36), ttlMs });
    const roundTripMs = performance.now() - started;
    if (grant) await this.backend.release(grant);
    return roundTripMs;
  }
}
