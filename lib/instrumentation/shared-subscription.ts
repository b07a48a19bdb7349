/**
 * Channels are process-wide, so two applications in one process that each subscribed would
 * count every event twice: one subscription per target (a metrics registry, the tracer),
 * shared by the applications that asked for it and ended when the last one stops.
 */
export class SharedSubscriptions<Target extends object> {
  private readonly active = new Map<Target, { users: number; stop: () => void }>();

  /** Subscribes with `start` unless `target` already is; returns this user's stop. */
  use(target: Target, start: () => () => void): () => void {
    let entry = this.active.get(target);
    if (!entry) this.active.set(target, (entry = { users: 0, stop: start() }));
    entry.users++;
    let stopped = false;
    return () => {
      if (stopped) return;
      stopped = true;
      if (--entry.users === 0) {
        this.active.delete(target);
        entry.stop();
      }
    };
  }
}
