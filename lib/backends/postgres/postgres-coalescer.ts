/** Rows one coalesced statement carries at most: a burst of a thousand names costs a handful of statements. */
export const MAX_ROWS_PER_STATEMENT = 250;
/** Coalesced statements of one kind at PostgreSQL at once; more rows wait and go in the next one. */
const MAX_STATEMENTS_IN_FLIGHT = 3;

interface Pending<Input, Output> {
  readonly input: Input;
  readonly resolve: (output: Output) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Sends many rows of one statement kind (queue for a name, release a name) as one statement.
 * A row that finds nothing of its kind on its way goes out at once, in its caller's own call, so
 * an uncontended lock waits for no tick; rows that arrive while statements are on their way, or
 * in the same turn after such a row, share the next statement. So a lone caller pays no delay,
 * and a burst of a thousand callers of distinct names costs a few statements instead of a thousand.
 */
export class StatementCoalescer<Input, Output> {
  private pending: Array<Pending<Input, Output>> = [];
  private inFlight = 0;
  private flushScheduled = false;

  constructor(
    /** The statement for one row: the common case, without arrays (they cost the server more than the row). */
    private readonly sendOne: (input: Input) => Promise<Output>,
    /** One statement for many rows, answering one output per input, in the inputs' order. */
    private readonly sendMany: (inputs: Input[]) => Promise<Output[]>,
  ) {}

  run(input: Input): Promise<Output> {
    if (this.inFlight === 0 && this.pending.length === 0) {
      // Alone: its caller awaits the statement itself, one promise layer less.
      this.inFlight++;
      const sent = this.sendOne(input);
      sent.then(this.answered, this.answered);
      return sent;
    }
    return new Promise<Output>((resolve, reject) => {
      this.pending.push({ input, resolve, reject });
      if (this.flushScheduled) return;
      // The rows added in this same turn (one caller's synchronous loop) go together.
      this.flushScheduled = true;
      queueMicrotask(() => {
        this.flushScheduled = false;
        this.flush();
      });
    });
  }

  private flush(): void {
    while (this.pending.length > 0 && this.inFlight < MAX_STATEMENTS_IN_FLIGHT) {
      const rows = this.pending.splice(0, MAX_ROWS_PER_STATEMENT);
      this.inFlight++;
      // One row goes as the single-row statement: arrays cost the server more than the row.
      const sent = rows.length === 1 ? this.sendOne(rows[0].input).then((output) => [output]) : this.sendMany(rows.map((row) => row.input));
      sent.then(
        (outputs) => {
          this.answered();
          rows.forEach((row, i) => row.resolve(outputs[i]));
        },
        (error) => {
          this.answered();
          rows.forEach((row) => row.reject(error));
        },
      );
    }
  }

  /** A statement was answered: the next may go. */
  private readonly answered = (): void => {
    this.inFlight--;
    this.flush();
  };
}
