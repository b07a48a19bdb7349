import { Controller, Get, Header } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { register } from 'prom-client';
import { DistributedLockHealthIndicator } from '../../lib';

/** What an operator points a load balancer and Prometheus at. */
@Controller()
export class OperationsController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly lockHealth: DistributedLockHealthIndicator,
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
}
