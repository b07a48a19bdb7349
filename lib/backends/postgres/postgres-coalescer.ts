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
 * Sends many rows of one statement kind (queue for a name, release a name) as one statement:
 * a row goes out at once while few statements of its kind are on their way, and rows that
 * arrive meanwhile share the next statement. So a lone caller pays no delay, and a burst of a
 * thousand callers of distinct names costs a few statements instead of a thousand.
 */
export class StatementCoalescer<Input, Output> {
  private pending: Array<Pending<Input, Output>> = [];
  private inFlight = 0;
  private flushScheduled = false;

  constructor(
    /** One statement for the rows, answering one output per input, in the inputs' order. */
    private readonly send: (inputs: Input[]) => Promise<Output[]>,
  ) {}

  run(input: Input): Promise<Output> {
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
      this.send(rows.map((row) => row.input)).then(
        (outputs) => rows.forEach((row, i) => row.resolve(outputs[i])),
        (error) => rows.forEach((row) => row.reject(error)),
      ).finally(() => {
        this.inFlight--;
        this.flush();
      });
    }
  }
}
