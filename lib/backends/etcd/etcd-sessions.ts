import { Logger } from '@nestjs/common';
import type { Etcd3 } from 'etcd3';
import { LockServerUnreachableError } from '../../errors';
import { ReadyWaits } from '../ready-waits';
import type { EtcdCalls } from './etcd-calls';
import { EtcdSession } from './etcd-session';

const logger = new Logger('DistributedLock');

/** Pause between failed attempts to open a session: doubling from the first, up to the last. */
const RETRY_MS = [250, 500, 1_000, 2_000];

/**
 * The backend's session, opened in the background from creation on (creating the backend never
 * waits for etcd) and again whenever one is lost. A caller waits for it within its own bound;
 * when etcd cannot be reached within `serverTimeoutMs` of startup, one warning names the hosts.
 */
export class EtcdSessions {
  private current?: EtcdSession;
  private readonly waits: ReadyWaits<EtcdSession>;
  private opening = false;
  private closed = false;
  private retry?: NodeJS.Timeout;
  private warnTimer?: NodeJS.Timeout;
  private lastError?: Error;
  private askedAt = performance.now();
  /** Failed attempts in a row: the next retry pause. */
  private failures = 0;

  constructor(
    private readonly client: Etcd3,
    private readonly ttlSeconds: number,
    private readonly calls: EtcdCalls,
    private readonly serverTimeoutMs: number,
    /** A user's client has no deadlines of ours: the grant gets this one. */
    private readonly grantTimeoutMs: number | undefined,
    private readonly onLost: (session: EtcdSession, reason: Error) => void,
    /** A session was granted and is in use (the backend records its holder description then). */
    private readonly onOpened: (session: EtcdSession) => void = () => undefined,
  ) {
    this.waits = new ReadyWaits('etcd', calls.address, () => calls.unreachable());
    this.warnTimer = setTimeout(() => {
      const cause = this.lastError ?? calls.unreachable();
      logger.warn(
        `etcd at ${calls.address} gave no session within ${serverTimeoutMs} ms of startup; lock calls fail until it does` +
          `${cause ? ` (${cause.message})` : ''}.`,
      );
    }, serverTimeoutMs);
    this.warnTimer.unref();
    this.open(0);
  }

  /**
   * Why there is no session, while there is none: the error of the last attempt, or the attempt
   * still unanswered. A call that waited for a session waited for etcd.
   */
  missing(): Error | undefined {
    if (this.live) return undefined;
    return this.lastError ?? new Error(`etcd has not granted the session lease yet (asked ${Math.round(performance.now() - this.askedAt)} ms ago)`);
  }

  /** The live session, if there is one now. */
  get live(): EtcdSession | undefined {
    return this.current?.alive ? this.current : undefined;
  }

  /**
   * The live session, waiting for one at most `timeoutMs` (then LockServerUnreachableError).
   * Rejects at once when etcd refused the session (a wrong password, say): that will not pass by waiting.
   */
  async session(operation: string, timeoutMs = this.serverTimeoutMs): Promise<EtcdSession> {
    const live = this.live;
    if (live) return live;
    // A caller waits: try now rather than at the end of the retry pause.
    if (!this.opening && !this.closed) {
      clearTimeout(this.retry);
      this.open(this.failures);
    }
    return this.waits.wait(operation, timeoutMs);
  }

  /** A session was lost: open the next one now. */
  lost(session: EtcdSession): void {
    if (this.current !== session) return;
    this.current = undefined;
    this.open(0);
  }

  /** `closedError`: what a call still waiting for a session gets. */
  async close(revokeTimeoutMs: number, closedError: Error): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    clearTimeout(this.warnTimer);
    this.waits.fail(() => closedError);
    await this.current?.revoke(revokeTimeoutMs);
  }

  private open(attempt: number): void {
    if (this.opening || this.closed) return;
    this.failures = attempt;
    this.opening = true;
    if (this.current === undefined && !this.lastError) this.askedAt = performance.now();
    const startedAt = performance.now();
    const deadline = this.grantTimeoutMs === undefined ? undefined : { deadline: Date.now() + this.grantTimeoutMs };
    EtcdSession.open(this.client, this.ttlSeconds, this.onLost, this.calls, deadline).then(
      (session) => {
        this.opening = false;
        clearTimeout(this.warnTimer);
        if (this.closed) return void session.revoke(this.serverTimeoutMs);
        this.current = session;
        this.lastError = undefined;
        this.waits.ready(session);
        this.onOpened(session);
      },
      (error: unknown) => {
        this.opening = false;
        const wrapped = this.calls.wrap('open a session', error, startedAt);
        this.lastError = wrapped;
        if (this.closed) return;
        if (!(wrapped instanceof LockServerUnreachableError)) this.waits.fail(() => wrapped);
        this.retry = setTimeout(() => this.open(attempt + 1), RETRY_MS[Math.min(attempt, RETRY_MS.length - 1)]);
        this.retry.unref();
      },
    );
  }
}
