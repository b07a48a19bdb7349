import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { OperationsController } from './operations.controller';

/** GET /health (terminus), GET /metrics (Prometheus text) and GET /locks/:name (the lock inspector). */
@Module({ imports: [TerminusModule], controllers: [OperationsController] })
export class OperationsModule {}
