import type { AcquireRequest, LockGrant } from '../backends/lock-backend.interface';
import { PendingWait, waitOf } from './pending-wait';
import type { Batch } from './batch';

/**
 * What a backend does at its server for the batches of LocalQueues: put an entry, let it go,
 * check it still holds. Everything else of the in-process hand-over (who joins which batch,
 * FIFO across batches, serving callers in turn, giving up) is LocalQueues' own.
 */
export interface BatchEntries<B extends Batch> {
  /**
   * Put the batch's entry in the server's queue (its state is 'sending'). Report with
   * LocalQueues.sent once the server answered, holds when the entry holds the lock, and end
   * when it failed.
   */
  send(batch: B): void;
  /** Take back the entry of a batch that is sending or queued: its callers all left, or the backend closes. */
  withdraw(batch: B, reason: unknown): void;
  /** Remove the entry of a batch that held and has nobody left (the server grants whoever is next). */
  remove(batch: B): Promise<void>;
  /**
   * A holder let go without knowing its lease valid: does the entry still hold the lock? An
   * Error ends the batch with it (the backend removes what is left of the entry itself).
   */
  confirm(batch: B): Promise<true | Error>;
  /** False when the entry can no longer serve (a lost session): the backend ends the batch itself. */
  usable(batch: B): boolean;
  /**
   * Record and return the grant of `request` under the batch, with the token `batch.token()`.
   * `handedOverForMs`: the caller follows a holder of the batch whose lease was known valid this
   * much longer; undefined for the first caller served after the entry got the lock, or after confirm().
   */
  grant(batch: B, request: AcquireRequest, handedOverForMs?: number): LockGrant;
}

/** The batches of one name in this process, oldest first. */
class NameQueue<B extends Batch> {
  readonly batches: B[] = [];
  pumpScheduled = false;

  /** The batch whose entry may be sent now: one at a time per name, in the order callers arrived. */
  sendable(): B | undefined {
    const batches = this.batches;
    for (let i = 0; i < batches.length; i++) {
      const state = batches[i].state;
      if (state === 'open') return batches[i];
      if (state === 'sending') return undefined;
    }
    return undefined;
  }
}

const RESOLVED: Promise<void> = Promise.resolve();

/** Batch ids are never reused in a process, so an entry once removed is never mistaken for a new one. */
let batchSeq = 0;

/**
 * The in-process hand-over every queueing backend shares: a process's callers of one name queue
 * behind one server-side entry per batch (see Batch), and a holder that lets go hands the lock to
 * the next caller of its batch with no round trip while the entry holds. A caller that arrives
 * once the batch's entry is sent joins the next batch, queued at the server behind whatever other
 * processes queued meanwhile: first come first served across processes.
 */
export class LocalQueues<B extends Batch> {
  private readonly queues = new Map<string, NameQueue<B>>();
  /** Batches whose lateJoinsIn is this turn take late joins; the next sendSoon ends the turn. */
  private lateJoinTurn = 0;
  private lateJoinTurnEndScheduled = false;

  constructor(
    private readonly entries: BatchEntries<B>,
    private readonly newBatch: (name: string, id: string) => B,
    private readonly isOpen: () => boolean,
    /** What callers still waiting get when their batch ends without a reason (the backend closed). */
    private readonly closedWhileWaiting: () => unknown,
    /**
     * When a batch's entry goes out after its first caller joined: setImmediate gathers callers
     * that arrive in one turn of the event loop; process.nextTick only those of the same tick,
     * and costs an uncontended acquisition no wait for the loop.
     */
    private readonly sendSoon: (send: () => void) => void = setImmediate,
    /**
     * The entry of a name nobody of this process queues for goes out at once, not at sendSoon:
     * callers until then join it all the same (Batch.lateJoinsIn). For backends whose entry costs
     * a single request, so an uncontended acquisition's request leaves before its bookkeeping.
     */
    private readonly sendFirstAtOnce = false,
  ) {}

  /**
   * Joins this process's open batch for the name; its entry is sent on the next turn of the
   * event loop, so that a burst's callers all join one batch. Bounded by the request's signal.
   */
  acquire(request: AcquireRequest): Promise<LockGrant> {
    const queue = this.queueOf(request.key);
    // The core's request is the caller's wait itself; a plain request gets one.
    const own = waitOf<LockGrant>(request);
    const wait = own ?? new PendingWait<LockGrant>();
    let batch = queue.batches.at(-1);
    const first = batch === undefined;
    if (!batch || !(batch.state === 'open' || batch.lateJoinsIn === this.lateJoinTurn) || !batch.fits(request)) {
      batch = this.newBatch(request.key, `~q${(batchSeq++).toString(36)}`);
      batch.mode = request.mode ?? 'write';
      batch.limit = request.limit;
      batch.lockDelayMs = request.lockDelayMs ?? 0;
      queue.batches.push(batch);
    }
    const joined = batch;
    joined.add({ request, wait });
    const sendNow = first && this.sendFirstAtOnce;
    if (sendNow) {
      // The request leaves first; the rest of this setup happens while it is on its way, and
      // the tick's callers still join it.
      joined.lateJoinsIn = this.lateJoinTurn;
      this.pump(queue);
    }
    const abandoned = (reason: unknown) => this.left(queue, joined, reason);
    if (own) {
      // Stopped directly, without an AbortSignal: from the start, even while the entry is on its way.
      own.onAbandon(abandoned);
    } else {
      const listen = () => void wait.listen(request.signal, abandoned);
      // Nobody of this process queues for the name: likely granted at once, with no signal needed.
      if (first) joined.listenLater = listen;
      else listen();
    }
    // A reader that joins an entry already holding (a late join) shares it at once.
    if (joined.mode === 'read' && joined.state === 'holding') this.serve(joined);
    if (sendNow) {
      this.endLateJoinTurnSoon();
    } else if (joined.state === 'open' && !queue.pumpScheduled) {
      queue.pumpScheduled = true;
      this.sendSoon(() => {
        queue.pumpScheduled = false;
        this.pump(queue);
      });
    }
    return wait.promise;
  }

  /** Some caller of this process queues for or holds the name: a try must fail without asking. */
  has(name: string): boolean {
    return this.queues.has(name);
  }

  /** A batch that took the lock outright for `request` (a try): it holds, ahead of any batch queued meanwhile. */
  adopt(batch: B, entryToken: bigint, request: Pick<AcquireRequest, 'owner' | 'mode' | 'limit' | 'lockDelayMs'>): void {
    batch.entryToken = entryToken;
    batch.state = 'holding';
    batch.mode = request.mode ?? 'write';
    batch.limit = request.limit;
    batch.lockDelayMs = request.lockDelayMs ?? 0;
    batch.holders.add(request.owner);
    this.queueOf(batch.key).batches.unshift(batch);
  }

  /** Every batch, of every name. */
  *batches(): Iterable<B> {
    for (const queue of [...this.queues.values()]) yield* [...queue.batches];
  }

  /** The server answered the batch's put: the next batch of the name may be sent. */
  sent(batch: B, queued: boolean): void {
    if (batch.state === 'sending' && queued) {
      batch.state = 'queued';
      this.listenNow(batch);
    }
    const queue = this.queues.get(batch.key);
    if (queue) this.pump(queue);
  }

  /** The batch's entry holds the lock, with the server's token: its first caller gets it. */
  holds(batch: B, entryToken: bigint): void {
    if (batch.state === 'ended') return;
    batch.entryToken = entryToken;
    batch.state = 'holding';
    this.serve(batch);
  }

  /**
   * `owner`, a holder of `batch`, let go. The next caller of the batch gets the lock at once when
   * the lease is known valid (`validForMs`), after a check that the entry still holds otherwise;
   * with nobody left (readers still holding count) the entry is removed.
   */
  release(batch: B, owner: string, validForMs: number | undefined): Promise<void> {
    batch.holders.delete(owner);
    try {
      if (batch.state !== 'holding' || batch.holders.size > 0 || !this.entries.usable(batch)) return RESOLVED;
      if (batch.hasCallers && this.isOpen()) {
        if (validForMs === undefined) this.confirmThenServe(batch);
        else this.serve(batch, validForMs);
        return RESOLVED;
      }
      return this.finish(batch);
    } catch (error) {
      // Not async: every lock's release passes here, and each promise layer costs it.
      return Promise.reject(error);
    }
  }

  /** The batch is over: its callers still waiting get `error`, and the name's queue moves on. */
  end(batch: B, error?: unknown): void {
    const rest = this.drop(batch, error);
    if (rest) this.pump(rest);
  }

  /** end() without moving the queue on: the name's queue when other batches are left in it. */
  private drop(batch: B, error?: unknown): NameQueue<B> | undefined {
    if (batch.state === 'ended') return undefined;
    batch.state = 'ended';
    batch.listenLater = undefined;
    // Built only when someone still waits: an error's stack costs more than a whole lock cycle's bookkeeping.
    if (batch.hasCallers) batch.rejectAll(error ?? this.closedWhileWaiting());
    const queue = this.queues.get(batch.key);
    if (!queue) return undefined;
    const index = queue.batches.indexOf(batch);
    if (index >= 0) queue.batches.splice(index, 1);
    if (queue.batches.length > 0) return queue;
    this.queues.delete(batch.key);
    return undefined;
  }

  /**
   * The entry of a holding batch is gone (its session died, someone deleted it) and its holder
   * was told: the callers still waiting never had the lock, so they keep their batch, which puts
   * a new entry at the back of the server's queue (send). With nobody waiting the batch ends.
   */
  requeue(batch: B): void {
    if (batch.state !== 'holding') return;
    batch.holders.clear();
    if (!batch.hasCallers || !this.isOpen()) return this.end(batch);
    batch.newEntry();
    batch.state = 'sending';
    this.entries.send(batch);
  }

  /** The backend closes: every batch ends with `error`, entries still queued are taken back. */
  closeAll(error: unknown): void {
    for (const batch of this.batches()) {
      if (batch.state === 'sending' || batch.state === 'queued') this.entries.withdraw(batch, error);
      this.end(batch, error);
    }
  }

  /**
   * Ends the turn of late joins at sendSoon: one callback for every batch opened before it runs,
   * holding none of them. Locks granted in microtasks alone (the memory backend, in a loop of
   * awaits) let no tick run until the loop ends: a callback per batch would keep every batch,
   * with its callers' requests and grants, alive until then.
   */
  private endLateJoinTurnSoon(): void {
    if (this.lateJoinTurnEndScheduled) return;
    this.lateJoinTurnEndScheduled = true;
    this.sendSoon(this.endLateJoinTurn);
  }

  private readonly endLateJoinTurn = (): void => {
    this.lateJoinTurnEndScheduled = false;
    this.lateJoinTurn++;
  };

  private listenNow(batch: B): void {
    const listen = batch.listenLater;
    batch.listenLater = undefined;
    listen?.();
  }

  private queueOf(name: string): NameQueue<B> {
    let queue = this.queues.get(name);
    if (!queue) this.queues.set(name, (queue = new NameQueue<B>()));
    return queue;
  }

  private pump(queue: NameQueue<B>): void {
    const batch = queue.sendable();
    if (!batch || !this.isOpen()) return;
    if (!batch.hasCallers) return this.end(batch);
    batch.state = 'sending';
    this.entries.send(batch);
  }

  /**
   * The entry holds: the batch's next caller gets the lock when nobody is served, and under a
   * read entry every caller waiting does (`validForMs`: handed over by a holder whose lease was
   * known valid that much longer).
   */
  private serve(batch: B, validForMs?: number): void {
    if (batch.state !== 'holding' || (batch.mode !== 'read' && batch.holders.size > 0) || !this.entries.usable(batch)) return;
    batch.listenLater = undefined;
    let caller = batch.next();
    if (!caller && batch.holders.size === 0) return void this.finish(batch).catch(() => undefined);
    while (caller) {
      const grant = this.entries.grant(batch, caller.request, validForMs);
      batch.holders.add(caller.request.owner);
      caller.wait.resolve(grant);
      caller = batch.mode === 'read' ? batch.next() : undefined;
    }
  }

  private confirmThenServe(batch: B): void {
    this.entries.confirm(batch).then(
      (held) => (held === true ? this.serve(batch) : this.end(batch, held)),
      (error) => this.end(batch, error),
    );
  }

  /**
   * Ends the batch and removes its entry, then moves the name's queue on: the removal goes out
   * before the name's next entry, and the backend sees the batch gone from the queue.
   */
  private finish(batch: B): Promise<void> {
    const rest = this.drop(batch);
    let removed: Promise<void>;
    try {
      removed = this.entries.remove(batch);
    } catch (error) {
      removed = Promise.reject(error);
    }
    if (rest) this.pump(rest);
    return removed;
  }

  /** A caller of `batch` gave up: a batch nobody waits in any more leaves the queue. */
  private left(queue: NameQueue<B>, batch: B, reason: unknown): void {
    if (batch.hasCallers || batch.state === 'holding' || batch.state === 'ended') return;
    if (batch.state === 'open') this.end(batch);
    else this.entries.withdraw(batch, reason);
    this.pump(queue);
  }
}
