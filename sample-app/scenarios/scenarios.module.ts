import { Module } from '@nestjs/common';
import { CatalogService } from './catalog.service';
import { CheckoutService } from './checkout.service';
import { WarehouseService } from './warehouse.service';

/** The store beside the flash sale: a catalog (read-write lock), a checkout (semaphore), a stock transfer (two names). */
@Module({ providers: [CatalogService, CheckoutService, WarehouseService], exports: [CatalogService, CheckoutService, WarehouseService] })
export class ScenariosModule {}
