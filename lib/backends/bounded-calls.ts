import { LockBackendError, LockServerUnreachableError } from '../errors';

/** How a call sent by BoundedCalls.boundedSettling reports its end, once. */
export interface Settle {
  /** The server answered. */
  answered(): void;
  /** The call failed: the error to reject with (wrapped once, naming the address). */
  failed(error: unknown): LockBackendError;
}

/**
 * A backend's calls at its server: at most `maxInFlight` at once (the rest wait their turn, in
 * order), and wrapped once: a transport failure becomes LockServerUnreachableError naming the
 * address, any other a LockBackendError, with the client's error as `cause`. Also answers
 * `unreachable()` from what the newest calls saw. A backend extends it with how a call is made
 * (bounded by serverTimeoutMs in its client's own way) and which errors mean "unreachable".
 */
export abstract class BoundedCalls {
  private inFlight = 0;
  private readonly queued: Array<() => void> = [];
  /** Start times of calls at the server, oldest first. */
  private readonly pending = new Map<number, number>();
  private nextId = 0;
  private lastFailure?: Error;
  private lastAnswerAt = performance.now();

  constructor(
    /** The backend as errors name it ('postgres'). */
    private readonly backend: string,
    /** The server as "no answer from" names it ('PostgreSQL'). */
    private readonly serverName: string,
    readonly address: string,
    private readonly maxInFlight: number,
    /** How long a call may go unanswered, with no answer to anything meanwhile, before the server counts as unreachable. */
    private readonly silenceMs: number,
  ) {}

  /** The client's errors that mean the server could not be reached, or did not answer in time. */
  protected abstract isTransportError(error: unknown): boolean;

  /** A transport failure as unreachable() keeps it, given the one kept until now (a backend restates TLS failures). */
  protected kept(error: Error, _keptBefore: Error | undefined): Error {
    return error;
  }

  /** Any other failure as the caller sees it. */
  protected otherError(operation: string, error: unknown, _waitedMs: number): LockBackendError {
    return new LockBackendError(this.backend, operation, error, this.address);
  }

  /**
   * The server's last word was a transport failure, or a call has gone unanswered longer than
   * `silenceMs` with no answer to anything meanwhile (a slow but working server answers something).
   */
  unreachable(): Error | undefined {
    if (this.lastFailure) return this.lastFailure;
    const oldest = this.pending.values().next();
    const now = performance.now();
    if (!oldest.done && now - oldest.value > this.silenceMs && now - this.lastAnswerAt > this.silenceMs) {
      return new Error(`no answer from ${this.serverName} for ${Math.round(now - Math.max(oldest.value, this.lastAnswerAt))} ms`);
    }
    return undefined;
  }

  /** The server answered (a call, a keepalive): it is reachable. */
  reached(): void {
    this.lastFailure = undefined;
    this.lastAnswerAt = performance.now();
  }

  /** A call or a connection failed: remembered when it says the server cannot be reached. */
  failed(error: unknown): void {
    if (this.isTransportError(error)) this.lastFailure = this.kept(error as Error, this.lastFailure);
  }

  /** Counts `call` (made outside the in-flight bound) as a call at the server for `unreachable()`, until it settles. */
  track<T>(call: Promise<T>): Promise<T> {
    const id = this.nextId++;
    this.pending.set(id, performance.now());
    return call.finally(() => this.pending.delete(id));
  }

  /** The client's error as this library's, naming the address; counts it for `unreachable()`. */
  wrap(operation: string, error: unknown, startedAt: number): LockBackendError {
    if (error instanceof LockBackendError) return error;
    this.failed(error);
    const waitedMs = Math.round(performance.now() - startedAt);
    if (this.isTransportError(error)) return new LockServerUnreachableError(this.backend, operation, this.address, waitedMs, this.lastFailure);
    return this.otherError(operation, error, waitedMs);
  }

  /**
   * `send()` once a slot is free, wrapped. A call that had to wait for its turn is not sent when
   * the server turned out unreachable meanwhile: it fails at once rather than queueing behind a
   * dead server. (Not on waiting alone: a burst waits its turn while the server answers.)
   */
  protected bounded<T>(operation: string, send: () => Promise<T>): Promise<T> {
    return this.boundedSettling(operation, (settle) => {
      let sent: Promise<T>;
      try {
        sent = send();
      } catch (error) {
        sent = Promise.reject(error);
      }
      return sent.then(
        (answer) => {
          settle.answered();
          return answer;
        },
        (error: unknown) => {
          throw settle.failed(error);
        },
      );
    });
  }

  /**
   * As bounded(), for a call that settles its own promise: `send` calls `settle.answered()` as it
   * resolves, or rejects with `settle.failed(error)`, and its promise is the caller's. Every lock's
   * take and release passes here: a promise layer less costs each a reaction after its answer.
   */
  protected boundedSettling<T>(operation: string, send: (settle: Settle) => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    if (this.inFlight < this.maxInFlight) {
      this.inFlight++;
      return this.sendInSlot(operation, send, startedAt);
    }
    // The slot is handed over by the call that frees it (releaseSlot).
    return new Promise<void>((resolve) => this.queued.push(resolve)).then(() => {
      if (this.lastFailure) {
        this.releaseSlot();
        throw new LockServerUnreachableError(this.backend, operation, this.address, Math.round(performance.now() - startedAt), this.lastFailure);
      }
      return this.sendInSlot(operation, send, startedAt);
    });
  }

  private sendInSlot<T>(operation: string, send: (settle: Settle) => Promise<T>, startedAt: number): Promise<T> {
    const id = this.nextId++;
    this.pending.set(id, performance.now());
    const settle: Settle = {
      answered: () => {
        this.reached();
        this.pending.delete(id);
        this.releaseSlot();
      },
      failed: (error) => {
        const wrapped = this.wrap(operation, error, startedAt);
        this.pending.delete(id);
        this.releaseSlot();
        return wrapped;
      },
    };
    try {
      return send(settle);
    } catch (error) {
      return Promise.reject(settle.failed(error));
    }
  }

  private releaseSlot(): void {
    const next = this.queued.shift();
    if (next) next();
    else this.inFlight--;
  }
}
