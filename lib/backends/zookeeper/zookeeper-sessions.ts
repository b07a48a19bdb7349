import { Logger } from '@nestjs/common';
import { deadlines, type Deadline } from '../../deadlines';
import { LockServerUnreachableError } from '../../errors';
import { unwatchStop, watchStop, type StopSignal } from '../../lazy-abort';
import type { AbortWatcher } from '../../shared-abort-listeners';
import type { ZkModule } from './zookeeper-client';
import { ZooKeeperSession, ZooKeeperSessionLostError, type ZooKeeperSessionOptions } from './zookeeper-session';

const logger = new Logger('DistributedLock');

/**
 * A server that owes a reply and has said nothing for this share of serverTimeoutMs is reported
 * unreachable to a wait that ends meanwhile: ZooKeeper answers a read in well under a
 * millisecond and a write after one fsync, so a silence this long is a paused or cut-off server.
 */
const SILENT_SHARE = 1 / 5;

/**
 * The backend's session, opened in the background at creation and again, on demand, after one
 * dies; and the one view of whether the server can be reached, across sessions: what
 * `unreachable()` answers, and what bounds each call.
 */
export class ZooKeeperSessions {
  private current: ZooKeeperSession;
  private everConnected = false;
  private warnedSlowStart = false;
  private warnedTimeout = false;
  private readonly startupCheck: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly zk: ZkModule,
    private readonly options: ZooKeeperSessionOptions,
    /** How long a call waits for an unreachable server. */
    private readonly serverTimeoutMs: number,
    /** A new session connected (the backend records its holder description then). */
    private readonly onSession: (session: ZooKeeperSession) => void = () => undefined,
  ) {
    this.current = this.open(performance.now());
    // One warning, not one per call: the app booted, but its locks cannot work yet.
    this.startupCheck = setTimeout(() => {
      if (this.everConnected) return;
      this.warnedSlowStart = true;
      logger.warn(
        `ZooKeeper at ${options.address} could not be reached within serverTimeoutMs (${serverTimeoutMs} ms) of startup; ` +
          'lock calls fail with LockServerUnreachableError until it can.',
      );
    }, serverTimeoutMs);
    this.startupCheck.unref();
  }

  /** The session calls go to now: the current one, or a new one if it died. */
  get session(): ZooKeeperSession {
    if (!this.current.alive && !this.closed) this.current = this.open(this.current.unreachableSince() ?? performance.now());
    return this.current;
  }

  /** The session as it is, never a new one (for close-time work). */
  get existing(): ZooKeeperSession {
    return this.current;
  }

  /** Why the server cannot be reached right now, or undefined when it can (cheap: no I/O). */
  unreachable(): Error | undefined {
    const since = this.current.unreachableSince();
    if (since === undefined) return undefined;
    const forMs = Math.round(performance.now() - since);
    if (this.current.isConnected) {
      if (forMs < this.serverTimeoutMs * SILENT_SHARE) return undefined;
      return new Error(`connected, but no reply from the server for ${forMs} ms`);
    }
    return new Error(`no ZooKeeper session connected for ${forMs} ms${this.everConnected ? '' : ', none since startup'}`);
  }

  /** The session when it is connected now: an acquisition then needs no wait (and no promise) for it. */
  connectedNow(): ZooKeeperSession | undefined {
    const session = this.session;
    return session.isConnected ? session : undefined;
  }

  /** A connected session, waiting for one (bounded as `bounded` is). */
  async connected(operation: string, stop: StopSignal | undefined): Promise<ZooKeeperSession> {
    const startedAt = performance.now();
    for (;;) {
      const session = this.session;
      if (session.isConnected) return session;
      try {
        await this.bounded(session.connected, operation, stop, startedAt);
        return session;
      } catch (error) {
        // That session gave up on its handshake: the next one keeps trying, within this call's bound.
        if (!(error instanceof ZooKeeperSessionLostError) || this.closed) throw error;
      }
    }
  }

  /**
   * `work`, or a LockServerUnreachableError once the server has been unreachable for
   * serverTimeoutMs without a break since `startedAt`, or `stop`'s reason when it aborts. The
   * work itself goes on (a create still gets its node deleted, a delete is still sent on reconnection).
   */
  bounded<T>(work: Promise<T>, operation: string, stop?: StopSignal, startedAt = performance.now()): Promise<T> {
    if (stop?.aborted) return Promise.reject(stop.reason);
    return new Promise<T>((resolve, reject) => {
      let timer: Deadline | undefined;
      let done = false;
      const finish = (outcome: () => void) => {
        if (done) return;
        done = true;
        deadlines.cancel(timer);
        if (stop) unwatchStop(stop, stopped);
        outcome();
      };
      const stopped: AbortWatcher = { aborted: (reason) => finish(() => reject(reason)) };
      if (stop) watchStop(stop, stopped);
      const check = (readFirst: boolean) => {
        if (done) return;
        const now = performance.now();
        const since = this.current.unreachableSince();
        const from = since === undefined ? now : Math.max(since, startedAt);
        if (now - from < this.serverTimeoutMs) {
          timer = deadlines.add(from + this.serverTimeoutMs, () => check(true));
        } else if (readFirst) {
          // Timers run before sockets are read: read what came in meanwhile (a stall of our own) before judging.
          setImmediate(() => check(false));
        } else {
          finish(() => reject(this.unreachableError(operation, now - startedAt)));
        }
      };
      check(true);
      work.then(
        (value) => finish(() => resolve(value)),
        (error: unknown) => finish(() => reject(error)),
      );
    });
  }

  /** The error a call ends with when the server could not be reached within its bound. */
  unreachableError(operation: string, waitedMs: number): LockServerUnreachableError {
    return new LockServerUnreachableError('zookeeper', operation, this.options.address, Math.round(waitedMs), this.unreachable());
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.startupCheck);
    await this.current.close();
  }

  private open(downSince: number): ZooKeeperSession {
    // A handshake unanswered for a session timeout will not be answered (a server that accepted
    // the connection while starting may never read it): the next session tries again.
    const handshakeMs = Math.min(this.serverTimeoutMs, this.options.sessionTimeoutMs);
    const session = new ZooKeeperSession(this.zk, this.options, handshakeMs, downSince);
    session.connected.then(() => this.onConnected(session), () => undefined);
    return session;
  }

  private onConnected(session: ZooKeeperSession): void {
    this.onSession(session);
    if (this.warnedSlowStart && !this.everConnected) logger.log(`ZooKeeper at ${this.options.address} is reachable now.`);
    this.everConnected = true;
    if (this.warnedTimeout || session.timeoutMs <= this.options.sessionTimeoutMs) return;
    this.warnedTimeout = true;
    logger.warn(
      `ZooKeeper at ${this.options.address} granted a session timeout of ${session.timeoutMs} ms, more than the ` +
        `${this.options.sessionTimeoutMs} ms asked (backend.sessionTimeoutMs, else the module's ttlMs): a crashed ` +
        "holder's lock is freed only after that long. The server's minSessionTimeout (2 ticks by default) sets the floor.",
    );
  }
}
