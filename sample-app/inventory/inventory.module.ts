import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { InventoryController } from './inventory.controller';
import { InventoryService } from './inventory.service';
import { LockExceptionFilter } from '../../lib';
import { StaleWriteFilter } from './stale-write.filter';
import { STOCK_STORE, type StockStore } from './stock-store';

@Module({})
export class InventoryModule {
  static withStore(store: StockStore): DynamicModule {
    return {
      module: InventoryModule,
      controllers: [InventoryController],
      providers: [
        InventoryService,
        { provide: STOCK_STORE, useValue: store },
        { provide: APP_FILTER, useClass: LockExceptionFilter },
        { provide: APP_FILTER, useClass: StaleWriteFilter },
      ],
      exports: [InventoryService],
    };
  }
}
