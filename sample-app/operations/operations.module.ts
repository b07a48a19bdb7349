import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { OperationsController } from './operations.controller';

/** GET /health (terminus) and GET /metrics (Prometheus text). */
@Module({ imports: [TerminusModule], controllers: [OperationsController] })
export class OperationsModule {}
