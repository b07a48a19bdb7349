import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import { deadlines } from '../lib/deadlines';
import { LazyAbort } from '../lib/lazy-abort';
import { IDLE_DISABLE_MS, YOUNG_PROCESS_SCOPES } from '../lib/lock-context';
import { withinServerTimeout } from '../lib/server-timeout';

const SERVER_TIMEOUT_MS = 5_000;

/**
 * What the bench's lean locks (one per backend, each over the library's own server calls) share:
 * the least a holder needs around those calls to keep the lock's basic promises. A unique owner,
 * each call bounded as the library bounds one, the holder recorded with its fencing token, a lease
 * deadline firing a lazily made lost signal, re-entrancy in the async chain.
 */
export class LeanLockCore<Token> {
  private readonly ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  private ownerSeq = 0;
  private readonly held = new Map<string, { key: string; fencingToken: Token; loss: LazyAbort }>();
  private readonly scope = new LeanScope();

  constructor(
    private readonly server: { name: string; address: string },
    private readonly ttlMs: number,
  ) {}

  /** The lock is already held in this async chain: the section runs inside it. */
  holds(name: string): boolean {
    return this.scope.holds(name);
  }

  newOwner(): string {
    return this.ownerPrefix + (++this.ownerSeq).toString(36);
  }

  bounded<T>(work: Promise<T>, operation: string): Promise<T> {
    return withinServerTimeout(work, this.server, operation, SERVER_TIMEOUT_MS);
  }

  /** Runs `section` as the granted holder `owner`, then `release`s. */
  async hold(name: string, owner: string, fencingToken: Token, section: () => void | Promise<void>, release: () => Promise<unknown>): Promise<void> {
    const loss = new LazyAbort();
    this.held.set(owner, { key: name, fencingToken, loss });
    const lease = deadlines.add(performance.now() + this.ttlMs, () => loss.abort(new Error(`lease of "${name}" ended`)));
    try {
      await this.scope.run(name, section);
    } finally {
      deadlines.cancel(lease);
      this.held.delete(owner);
      await release();
    }
  }

  /** Every holder's lock is lost at once (a session that ended). */
  loseAll(reason: Error): void {
    for (const holder of this.held.values()) holder.loss.abort(reason);
  }
}

/**
 * The held name in the async chain, kept in a storage that goes off once no cycle has entered it
 * for IDLE_DISABLE_MS, and after each cycle in a young process, as the library's own does
 * (lock-context.ts). A storage left on would run Node's promise hooks for every other runner of
 * the bench's rounds too, slowing the floors the library is measured against, and would slow the
 * lean lock itself in the cold-process row.
 */
class LeanScope {
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
      if (this.entered <= YOUNG_PROCESS_SCOPES && this.open === 0) this.storage.disable();
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
