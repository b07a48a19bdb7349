import { AsyncLocalStorage } from 'node:async_hooks';
import { IDLE_DISABLE_MS } from '../lib/lock-context';

/**
 * The lean locks' re-entrancy: the name held in the async chain, kept in a storage that goes off
 * once no cycle has entered it for IDLE_DISABLE_MS, as the library's own does (lock-context.ts).
 * A storage left on would run Node's promise hooks for every other runner of the bench's rounds
 * too, slowing the floors the library is measured against.
 */
export class LeanScope {
  private readonly storage = new AsyncLocalStorage<string>();
  private entered = 0;
  private open = 0;
  private idleCheck?: NodeJS.Timeout;

  holds(name: string): boolean {
    return this.storage.getStore() === name;
  }

  async run(name: string, section: () => void | Promise<void>): Promise<void> {
    this.entered++;
    this.open++;
    if (!this.idleCheck) this.armIdleCheck(this.entered);
    try {
      await this.storage.run(name, section);
    } finally {
      this.open--;
    }
  }

  private armIdleCheck(enteredAtArming: number): void {
    this.idleCheck = setTimeout(() => {
      this.idleCheck = undefined;
      if (this.entered === enteredAtArming && this.open === 0) this.storage.disable();
      else this.armIdleCheck(this.entered);
    }, IDLE_DISABLE_MS);
    this.idleCheck.unref();
  }
}
