import type { DistributedLockModuleOptions, LockService } from '../../../lib';
import { moduleLikeService } from '../../support/lock-service-factory';

/** Module-like services over one set of masters, closed together. */
export class RedlockClients {
  private readonly open: LockService[] = [];

  async add(urls: string[], options: Omit<DistributedLockModuleOptions, 'backend'> = {}, backend: Record<string, unknown> = {}): Promise<LockService> {
    const { service } = await moduleLikeService({ ...options, backend: { type: 'redlock', urls, ...backend } as DistributedLockModuleOptions['backend'] });
    this.open.push(service);
    return service;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.open.splice(0).map((service) => service.onApplicationShutdown()));
  }
}

let keySeq = 0;
export const newKey = (what: string) => `redlock-${what}-${process.pid}-${Date.now().toString(36)}-${++keySeq}`;
