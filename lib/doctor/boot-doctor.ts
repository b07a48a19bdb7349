import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { LockDoctorError } from '../errors';
import { backendSettings, type ResolvedModuleOptions } from '../lock-options';
import { RESOLVED_LOCK_OPTIONS } from '../lock-options.token';
import { findingLine, runDoctor } from './run-doctor';

const logger = new Logger('DistributedLock');

/**
 * The module option `doctor`, at boot. 'warn' (the default) runs the checks in the background,
 * so a slow or absent server never delays the boot, and logs one warning per finding; nothing
 * runs on the request path. 'fail' awaits them and fails the boot with LockDoctorError when
 * anything was found or a server could not be asked. 'off' does nothing.
 */
@Injectable()
export class BootDoctor implements OnModuleInit, OnApplicationShutdown {
  /** The background run of 'warn': shutdown waits for it, so it never outlives the app's connections. */
  private running?: Promise<void>;

  constructor(@Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions) {}

  async onModuleInit(): Promise<void> {
    const { doctor, backend } = this.options;
    if (doctor === 'off') return;
    const report = runDoctor(backend, backendSettings(this.options));
    if (doctor === 'warn') {
      this.running = report.then(
        ({ findings, unreachable }) => {
          for (const finding of findings) logger.warn(`Lock doctor: ${findingLine(finding)}`);
          // The backend's own startup warning names the server and its error; this says what was not checked.
          if (unreachable.length > 0) logger.warn(`Lock doctor: the ${backend.type} backend's server could not be reached at boot, so its configuration was not checked; run "npx nest-distributed-lock doctor" against it once it is up.`);
        },
        (error: unknown) => logger.warn(`Lock doctor: the checks of the ${backend.type} backend failed: ${error instanceof Error ? error.message : String(error)}`),
      );
      return;
    }
    const { findings, unreachable } = await report;
    if (findings.length > 0 || unreachable.length > 0) {
      throw new LockDoctorError(backend.type, findings.map(findingLine), unreachable.map(({ server, error }) => `${server} (${error})`));
    }
  }

  async onApplicationShutdown(): Promise<void> {
    await this.running;
  }
}
