import { Module, type DynamicModule } from '@nestjs/common';
import { createBackend } from './backends/registry';
import { LOCK_BACKEND } from './backends/lock-backend.token';
import {
  ASYNC_OPTIONS_TYPE,
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN,
  OPTIONS_TYPE,
} from './distributed-lock.module-definition';
import { backendSettings, resolveModuleOptions, type DistributedLockModuleOptions, type ResolvedModuleOptions } from './lock-options';
import { RESOLVED_LOCK_OPTIONS } from './lock-options.token';
import { BootDoctor, refuseUnfitServers } from './doctor/boot-doctor';
import { DistributedLockHealthIndicator } from './health/distributed-lock.health';
import { LockService } from './lock.service';

/**
 * Registers LockService and the backend. `forRoot()` with no options runs on the embedded
 * in-memory backend. Options are validated when the module boots.
 */
@Module({
  providers: [
    {
      provide: RESOLVED_LOCK_OPTIONS,
      inject: [MODULE_OPTIONS_TOKEN],
      useFactory: (options: DistributedLockModuleOptions) => resolveModuleOptions(options),
    },
    {
      provide: LOCK_BACKEND,
      inject: [RESOLVED_LOCK_OPTIONS],
      useFactory: async (options: ResolvedModuleOptions) => {
        await refuseUnfitServers(options);
        return createBackend(options.backend, backendSettings(options));
      },
    },
    LockService,
    DistributedLockHealthIndicator,
    BootDoctor,
  ],
  exports: [LockService, DistributedLockHealthIndicator],
})
export class DistributedLockModule extends ConfigurableModuleClass {
  static override forRoot(options: typeof OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }

  static override forRootAsync(options: typeof ASYNC_OPTIONS_TYPE): DynamicModule {
    return super.forRootAsync(options);
  }
}
