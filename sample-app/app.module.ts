import { Module, type DynamicModule } from '@nestjs/common';
import { DistributedLockModule, type BackendOptions, type LockOptions } from '../lib';
import { InventoryModule } from './inventory/inventory.module';
import { OperationsModule } from './operations/operations.module';
import { ScenariosModule } from './scenarios/scenarios.module';
import type { StockStore } from './inventory/stock-store';

/** The inventory app on the lock backend and stock store the runner chose. */
@Module({})
export class AppModule {
  static register(backend: BackendOptions, store: StockStore, lockOptions: LockOptions = {}): DynamicModule {
    return {
      module: AppModule,
      imports: [DistributedLockModule.forRoot({ ...lockOptions, backend, metrics: true }), InventoryModule.withStore(store), OperationsModule, ScenariosModule],
    };
  }
}
