import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

// A merge's conflict markers once landed in the README's Backends table unseen: the compiler
// checks the code, nothing checked the documents users read.
const root = path.resolve(__dirname, '..', '..', '..');
const MARKER = /^(<{7}|>{7}) /m;

function filesUnder(dir: string, ends: string[]): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const file = path.join(dir, entry);
    if (statSync(file).isDirectory()) return filesUnder(file, ends);
    return ends.some((end) => entry.endsWith(end)) ? [file] : [];
  });
}

describe('the documents and sources users read', () => {
  it('carry no merge conflict markers', () => {
    const files = [
      ...['README.md', 'BENCHMARKS.md'].map((name) => path.join(root, name)),
      ...filesUnder(path.join(root, 'docs'), ['.md']),
      ...filesUnder(path.join(root, 'lib'), ['.ts']),
      ...filesUnder(path.join(root, 'sql'), ['.sql']),
    ];
    assert.ok(files.length > 20, `found only ${files.length} files under ${root}`);
    const marked = files.filter((file) => MARKER.test(readFileSync(file, 'utf8'))).map((file) => path.relative(root, file));
    assert.deepEqual(marked, []);
  });
});
