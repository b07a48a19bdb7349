/** A turn at one key: `ready` is undefined when the key was free, so an uncontended entry waits for nothing. */
export interface KeyTurn {
  readonly ready?: Promise<void>;
  /** The key is gone (or left to a successor that reuses it): the next turn may start. Once. */
  readonly done: () => void;
}

/**
 * Etcd's Lock service names a session's key `<name>/<lease hex>`: a second Lock of the same name
 * and lease finds that key and reuses it, so two entries of one process would share one place
 * and both be told they hold. Every use of such a key (a Lock call, a try, the deletion of a key
 * left by an abandoned call) therefore takes its turn: the next starts once the previous one's
 * key is gone.
 */
export class KeyTurns {
  private readonly tails = new Map<string, Promise<void>>();

  take(key: string): KeyTurn {
    const before = this.tails.get(key);
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = before ? before.then(() => mine) : mine;
    this.tails.set(key, tail);
    let released = false;
    const done = () => {
      if (released) return;
      released = true;
      release();
      void tail.then(() => this.tails.get(key) === tail && this.tails.delete(key));
    };
    return { ready: before, done };
  }

  /** Some turn at the key is taken or waited for. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }
}
