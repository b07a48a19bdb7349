import { Controller, Get, Header, Param } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { register } from 'prom-client';
import { DistributedLockHealthIndicator, LockService, type LockInspectionResult } from '../../lib';

/**
 * What an operator points a load balancer, Prometheus and a dashboard at. There is deliberately
 * no route for LockService.forceRelease: breaking a lock is an operator's power, not something
 * to hand to whoever can reach the app's HTTP port (README, "Force release").
 */
@Controller()
export class OperationsController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly lockHealth: DistributedLockHealthIndicator,
    private readonly locks: LockService,
  ) {}

  /** 200 with the lock backend's round trip, or 503 with the reason, within serverTimeoutMs. */
  @Get('health')
  @HealthCheck()
  check() {
    return this.health.check([() => this.lockHealth.isHealthy('lock')]);
  }

  /** The module records into prom-client's default registry (`metrics: true`). */
  @Get('metrics')
  @Header('Content-Type', register.contentType)
  metrics(): Promise<string> {
    return register.metrics();
  }

  /** The server's view of one lock, e.g. GET /locks/stock:pear (read-only); its JSON form shows tokens as decimal strings. */
  @Get('locks/:name')
  inspect(@Param('name') name: string): Promise<LockInspectionResult> {
    return this.locks.inspect(name);
  }
}
