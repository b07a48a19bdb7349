import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { LockDoctorError } from '../errors';
import { backendSettings, type ResolvedModuleOptions } from '../lock-options';
import { RESOLVED_LOCK_OPTIONS } from '../lock-options.token';
import { findingLine, runDoctor } from './run-doctor';

const logger = new Logger('DistributedLock');

/**
 * The module option `doctor: 'fail'`: the checks before the backend is built, so a refused
 * deployment fails the boot with LockDoctorError and leaves no connection behind. Anything found,
 * or a server that could not be asked, refuses it.
 */
export async function refuseUnfitServers(options: ResolvedModuleOptions): Promise<void> {
  if (options.doctor !== 'fail') return;
  const { findings, unreachable } = await runDoctor(options.backend, backendSettings(options));
  if (findings.length > 0 || unreachable.length > 0) {
    throw new LockDoctorError(options.backend.type, findings.map(findingLine), unreachable.map(({ server, error }) => `${server} (${error})`));
  }
}

/**
 * The module option `doctor: 'warn'` (the default): the checks run in the background, so a slow
 * or absent server never delays the boot, and each finding is one warning; nothing runs on the
 * request path. ('fail' is refuseUnfitServers; 'off' does nothing.)
 */
@Injectable()
export class BootDoctor implements OnModuleInit, OnApplicationShutdown {
  /** The background run of 'warn': shutdown waits for it, so it never outlives the app's connections. */
  private running?: Promise<void>;

  constructor(@Inject(RESOLVED_LOCK_OPTIONS) private readonly options: ResolvedModuleOptions) {}

  onModuleInit(): void {
    const { doctor, backend } = this.options;
    if (doctor !== 'warn') return;
    this.running = runDoctor(backend, backendSettings(this.options)).then(
      ({ findings, unreachable }) => {
        for (const finding of findings) logger.warn(`Lock doctor: ${findingLine(finding)}`);
        // The backend's own startup warning names the server and its error; this says what was not checked.
        if (unreachable.length > 0) logger.warn(`Lock doctor: the ${backend.type} backend's server could not be reached at boot, so its configuration was not checked; run "npx nest-distributed-lock doctor" against it once it is up.`);
      },
      (error: unknown) => logger.warn(`Lock doctor: the checks of the ${backend.type} backend failed: ${error instanceof Error ? error.message : String(error)}`),
    );
  }

  async onApplicationShutdown(): Promise<void> {
    await this.running;
  }
}
