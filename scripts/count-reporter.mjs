// A node:test reporter that records each finished test as one line in $TEST_COUNTS_FILE, written
// at once: --test-force-exit can end the process before a reporter's closing summary is written.
// A failure's line also carries what failed and the first lines of its error, so the suite's
// last lines say what failed (CI keeps only the end of the output): a test, a suite's hook, or
// an error thrown outside any test.
import { appendFileSync } from 'node:fs';

const ERROR_LINES = 6;

export default async function* countReporter(source) {
  for await (const event of source) {
    if (event.type === 'test:diagnostic' && /^\w*Error\b/.test(event.data.message)) {
      // An error outside any test (asynchronous activity after a test ended): it fails the file.
      record('note', { name: 'outside any test', error: firstLines(event.data.message) });
      continue;
    }
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const error = event.data.details?.error;
    if (event.data.details?.type === 'suite') {
      // A suite fails with its tests (counted there) or on its own, when a hook throws.
      if (event.type === 'test:fail' && error?.failureType !== 'subtestsFailed') record('failed', { name: `${event.data.name} (${error?.failureType})`, error: errorText(error) });
      continue;
    }
    const outcome = event.data.skip || event.data.todo ? 'skipped' : event.type === 'test:pass' ? 'passed' : 'failed';
    if (outcome === 'failed') record(outcome, { name: event.data.name, error: errorText(error) });
    else record(outcome);
  }
}

function record(outcome, failure) {
  appendFileSync(process.env.TEST_COUNTS_FILE, failure ? `${outcome}\t${JSON.stringify(failure)}\n` : `${outcome}\n`);
}

/** The failure's message, unwrapped from node:test's "test failed" wrapper, shortened. */
function errorText(error) {
  const cause = error?.cause ?? error;
  return firstLines(String(cause?.message ?? cause ?? 'no error given'));
}

function firstLines(text) {
  return text.split('\n').slice(0, ERROR_LINES).join('\n').trimEnd();
}
