/**
 * Something that happens at most once, for a reason (a session dying, a lock node deleted by
 * someone else): listeners are told once, and one added after it happened is told at once.
 */
export class OneShot {
  private happened?: Error;
  private readonly listeners = new Set<(reason: Error) => void>();

  /** Why it happened; undefined while it has not. */
  get reason(): Error | undefined {
    return this.happened;
  }

  /** Calls `listener` once when it happens (at once if it has); returns an unsubscribe. */
  listen(listener: (reason: Error) => void): () => void {
    if (this.happened) {
      listener(this.happened);
      return () => undefined;
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Tells every listener, once; nothing if it had already happened. */
  happen(reason: Error): void {
    if (this.happened) return;
    this.happened = reason;
    for (const listener of this.listeners) listener(reason);
    this.listeners.clear();
  }

  /** Forgets every listener: none is told any more. */
  clear(): void {
    this.listeners.clear();
  }
}
