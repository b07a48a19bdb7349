/** One request of a batch, and how to answer its caller. */
interface Pending<Request, Answer> {
  readonly request: Request;
  readonly resolve: (answer: Answer) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Requests made in one turn of the event loop, sent together: one call per `maxPerCall` of them.
 * Leases of one process come due together (LockLease's renewal grid), so a backend renews
 * 10,000 held locks with a few dozen calls per interval, not 10,000. `sendMany` answers each
 * request of its chunk in order; a chunk that fails fails each of its requests.
 */
export class SameTickBatches<Request, Answer> {
  private pending: Pending<Request, Answer>[] = [];

  constructor(
    private readonly maxPerCall: number,
    private readonly sendMany: (requests: Request[]) => Promise<readonly Answer[]>,
  ) {}

  add(request: Request): Promise<Answer> {
    return new Promise((resolve, reject) => {
      if (this.pending.push({ request, resolve, reject }) === 1) queueMicrotask(() => this.flush());
    });
  }

  private flush(): void {
    const due = this.pending;
    this.pending = [];
    for (let from = 0; from < due.length; from += this.maxPerCall) this.send(due.slice(from, from + this.maxPerCall));
  }

  private send(chunk: Pending<Request, Answer>[]): void {
    let sent: Promise<readonly Answer[]>;
    try {
      sent = this.sendMany(chunk.map((pending) => pending.request));
    } catch (error) {
      sent = Promise.reject(error);
    }
    sent.then(
      (answers) => chunk.forEach((pending, i) => pending.resolve(answers[i])),
      (error: unknown) => chunk.forEach((pending) => pending.reject(error)),
    );
  }
}

/**
 * SameTickBatches per session (or connection): requests made on different ones never share a
 * call, and a session's batches go with it.
 */
export class SameTickBatchesPer<Session extends object, Request, Answer> {
  private readonly bySession = new WeakMap<Session, SameTickBatches<Request, Answer>>();

  constructor(
    private readonly maxPerCall: number,
    private readonly sendMany: (session: Session, requests: Request[]) => Promise<readonly Answer[]>,
  ) {}

  add(session: Session, request: Request): Promise<Answer> {
    let batches = this.bySession.get(session);
    if (!batches) {
      batches = new SameTickBatches(this.maxPerCall, (requests) => this.sendMany(session, requests));
      this.bySession.set(session, batches);
    }
    return batches.add(request);
  }
}
