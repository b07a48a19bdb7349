// A node:test reporter that records each finished test as one line in $TEST_COUNTS_FILE, written
// at once: --test-force-exit can end the process before a reporter's closing summary is written.
import { appendFileSync } from 'node:fs';

export default async function* countReporter(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    if (event.data.details?.type === 'suite') continue;
    const outcome = event.data.skip || event.data.todo ? 'skipped' : event.type === 'test:pass' ? 'passed' : 'failed';
    appendFileSync(process.env.TEST_COUNTS_FILE, `${outcome}\n`);
  }
}
