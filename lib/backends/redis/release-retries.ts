import { LockServerUnreachableError } from '../../errors';

/** A release that could not reach the server, to send again. */
interface DueRelease {
  readonly key: string;
  /** The owner key's value the release compares: '<fence> <owner>'. */
  readonly value: string;
  readonly write: boolean;
  /** performance.now() past which the server's lease of the entry has ended whatever happened. */
  readonly untilMs: number;
}

/**
 * Releases lost with the connection (a failover, a restart with persistence, a network cut) are
 * sent again once the command connection is back, as long as the entry's lease may still be
 * there: else the next waiter would wait for the lease to run out (up to a ttl). Release scripts
 * compare the owner key's value before they delete it, so one sent again never frees a grant
 * that is not its own. A release that failed otherwise (a script error) is not sent again.
 */
export class ReleaseRetries {
  private readonly due = new Map<string, DueRelease>();

  constructor(private readonly send: (key: string, value: string, write: boolean) => Promise<void>) {}

  /** The release of `value` failed with `error`; the entry's lease ends by `untilMs` at the latest. */
  failed(key: string, value: string, write: boolean, untilMs: number, error: unknown): void {
    if (error instanceof LockServerUnreachableError && untilMs > performance.now()) this.due.set(value, { key, value, write, untilMs });
  }

  /** The command connection is back: every release still due goes out again (once per reconnection). */
  reconnected(): void {
    const now = performance.now();
    for (const release of this.due.values()) {
      if (release.untilMs <= now) {
        this.due.delete(release.value);
        continue;
      }
      this.send(release.key, release.value, release.write).then(
        () => this.due.delete(release.value),
        // Unreachable again: the next reconnection sends it again, while the lease may last.
        () => undefined,
      );
    }
  }

  clear(): void {
    this.due.clear();
  }
}
