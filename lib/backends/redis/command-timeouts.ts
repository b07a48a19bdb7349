import { deadlines, type Deadline } from '../../deadlines';

/** What CommandTimeouts needs of an ioredis Command. */
export interface TimedCommand {
  readonly isResolved: boolean;
  reject(error: Error): void;
}

interface Sent {
  readonly command: TimedCommand;
  readonly sentAt: number;
}

/**
 * Fails our own connection's commands that go unanswered for `timeoutMs`, as ioredis'
 * `commandTimeout` would, without its Node timer per command (two per lock cycle). Replies come
 * in the order the commands were sent, so the oldest command still unanswered is the next to
 * time out, and one deadline on the shared scheduler at a time is enough.
 */
export class CommandTimeouts {
  private readonly sent: Sent[] = [];
  private deadline?: Deadline;

  constructor(private readonly timeoutMs: number) {}

  track(command: TimedCommand, sentAt: number): void {
    // Answered commands leave from the front as new ones come: the list is what is in flight.
    while (this.sent.length > 0 && this.sent[0].command.isResolved) this.sent.shift();
    this.sent.push({ command, sentAt });
    this.deadline ??= deadlines.add(sentAt + this.timeoutMs, this.sweep);
  }

  /** The connections closed: ioredis fails what was in flight itself. */
  clear(): void {
    deadlines.cancel(this.deadline);
    this.deadline = undefined;
    this.sent.length = 0;
  }

  private readonly sweep = (): void => {
    this.deadline = undefined;
    const now = performance.now();
    while (this.sent.length > 0) {
      const { command, sentAt } = this.sent[0];
      if (!command.isResolved) {
        const dueAt = sentAt + this.timeoutMs;
        if (dueAt > now) {
          this.deadline = deadlines.add(dueAt, this.sweep);
          return;
        }
        // ioredis' own wording: RedisConnections.failure tells a stalled server by it.
        command.reject(new Error('Command timed out'));
      }
      this.sent.shift();
    }
  };
}
