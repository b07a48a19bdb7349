#!/usr/bin/env node
// The whole test suite: make sure the test servers are installed, compile, run every test file
// with node's own test runner. `node scripts/test.js <substring>` runs only matching files.
'use strict';
const { spawnSync } = require('node:child_process');
const { readdirSync, rmSync, statSync } = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
require('./ensure-test-servers').ensureTestServers();

// A clean build: compiled files of renamed or deleted tests must not run.
rmSync(path.join(root, 'dist'), { recursive: true, force: true });
const compiled = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.json')], {
  stdio: 'inherit',
  cwd: root,
});
if (compiled.status !== 0) process.exit(compiled.status ?? 1);

const filter = process.argv[2];
const testRoot = path.join(root, 'dist', 'test');
// Matched against the path under dist/test, so a filter never matches the checkout's own path.
const files = findTests(testRoot).filter((file) => !filter || path.relative(testRoot, file).includes(filter));
if (files.length === 0) {
  console.error(`no test files${filter ? ` matching "${filter}"` : ''} under dist/test`);
  process.exit(1);
}
// One file at a time: the fault tests kill, pause and restart servers and measure time bounds,
// and the machine has two cores. A test that hangs fails after TEST_TIMEOUT_MS instead of
// holding the run until CI's own limit.
const TEST_TIMEOUT_MS = 120_000;
const result = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=1', `--test-timeout=${TEST_TIMEOUT_MS}`, '--test-force-exit', '--test-reporter=spec', ...files],
  // The whole run's own bound, well inside CI's 90 minutes (it takes about 2 minutes).
  { stdio: 'inherit', cwd: root, timeout: 30 * 60_000, killSignal: 'SIGKILL' },
);
if (result.error) console.error(`test run stopped: ${result.error.message}`);
process.exit(result.status ?? 1);

function findTests(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((entry) => {
      const full = path.join(dir, entry);
      if (statSync(full).isDirectory()) return findTests(full);
      return entry.endsWith('.test.js') ? [full] : [];
    });
}
