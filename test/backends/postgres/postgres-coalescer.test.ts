import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_ROWS_PER_STATEMENT, StatementCoalescer } from '../../../lib/backends/postgres/postgres-coalescer';

/** A statement of the fake: the rows it carried, answered when the test says so. */
interface Sent {
  readonly rows: number[];
  readonly answer: () => void;
  readonly fail: (error: Error) => void;
}

/** A StatementCoalescer whose statements the test answers one by one; no server. */
function coalescer() {
  const sent: Sent[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const statement = <T>(rows: number[], output: () => T) =>
    new Promise<T>((resolve, reject) => {
      mostInFlight = Math.max(mostInFlight, ++inFlight);
      const settle = () => inFlight--;
      sent.push({
        rows,
        answer: () => (settle(), resolve(output())),
        fail: (error) => (settle(), reject(error)),
      });
    });
  const statements = new StatementCoalescer<number, string>(
    (row) => statement([row], () => `one:${row}`),
    (rows) => statement(rows, () => rows.map((row) => `many:${row}`)),
  );
  return { statements, sent, mostInFlight: () => mostInFlight };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('postgres statement coalescer', () => {
  it('sends a lone row at once, in the caller\'s own call, as the single-row statement', async () => {
    const { statements, sent } = coalescer();
    const answered = statements.run(7);
    assert.equal(sent.length, 1, 'the row waited for a later tick');
    assert.deepEqual(sent[0].rows, [7]);
    sent[0].answer();
    assert.equal(await answered, 'one:7');
  });

  it('sends a burst of 1000 rows as a handful of statements, at most 3 on their way, each row answered with its own output', async () => {
    const { statements, sent, mostInFlight } = coalescer();
    const answers = Array.from({ length: 1000 }, (_, row) => statements.run(row));
    // Answer whatever is on its way until every row went out.
    let answered = 0;
    const rowsSent = () => sent.reduce((rows, statement) => rows + statement.rows.length, 0);
    while (rowsSent() < 1000 || answered < sent.length) {
      await settle();
      while (answered < sent.length) sent[answered++].answer();
    }
    const outputs = await Promise.all(answers);
    const expectedStatements = 1 + Math.ceil(999 / MAX_ROWS_PER_STATEMENT);
    assert.equal(sent.length, expectedStatements, `1000 rows took ${sent.length} statements`);
    assert.ok(mostInFlight() <= 3, `${mostInFlight()} statements were on their way at once`);
    assert.deepEqual(
      sent.flatMap((statement) => statement.rows),
      Array.from({ length: 1000 }, (_, row) => row),
      'rows went out out of order or twice',
    );
    assert.equal(outputs[0], 'one:0');
    outputs.slice(1).forEach((output, i) => assert.equal(output, `many:${i + 1}`));
  });

  it("fails only the rows of a statement that failed, and sends the rows that waited behind it", async () => {
    const { statements, sent } = coalescer();
    const first = statements.run(1);
    const second = statements.run(2);
    const third = statements.run(3);
    await settle();
    assert.equal(sent.length, 2, 'the rows after the first one did not share a statement');
    sent[0].fail(new Error('connection lost'));
    await assert.rejects(first, /connection lost/);
    sent[1].answer();
    assert.deepEqual(await Promise.all([second, third]), ['many:2', 'many:3']);
  });
});
