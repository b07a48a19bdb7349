#!/usr/bin/env node
// The whole test suite: make sure the test servers are installed, compile, run every test file
// with node's own test runner, one file at a time, and end with one summary line.
// `node scripts/test.js <substring>` runs only the files whose path contains it.
'use strict';
const { spawnSync } = require('node:child_process');
const { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } = require('node:fs');
const os = require('node:os');
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
// and the machine has two cores. A test that hangs fails after TEST_TIMEOUT_MS; a file that
// hangs outside any test is stopped after FILE_TIMEOUT_MS (its servers die with it).
const TEST_TIMEOUT_MS = 120_000;
const FILE_TIMEOUT_MS = 240_000;
const BACKENDS = ['memory', 'redis', 'etcd', 'zookeeper', 'postgres', 'redlock'];
const totals = { passed: 0, failed: 0, skipped: 0 };
/** Per backend (or test folder): files, outcomes and time, for the table at the end. */
const areas = new Map();
const failedFiles = [];
/** What failed in each failed file (a test, a hook, an error outside any test) and its message, repeated at the end. */
const failedTests = [];
const scratch = mkdtempSync(path.join(os.tmpdir(), 'lock-tests-'));
const started = Date.now();

files.forEach((file, index) => {
  const relative = path.relative(testRoot, file);
  const area = BACKENDS.find((backend) => relative.includes(backend)) ?? relative.split(path.sep)[0];
  console.log(`\n── file ${index + 1} of ${files.length} · ${area} · ${relative} · ${elapsed(started)} in`);
  const fileStarted = Date.now();
  const countsFile = path.join(scratch, `${index}.counts`);
  const run = spawnSync(
    process.execPath,
    [
      '--test',
      `--test-timeout=${TEST_TIMEOUT_MS}`,
      '--test-force-exit',
      '--test-reporter=spec',
      '--test-reporter-destination=stdout',
      `--test-reporter=${path.join(__dirname, 'count-reporter.mjs')}`,
      '--test-reporter-destination=stdout',
      file,
    ],
    { stdio: 'inherit', cwd: root, timeout: FILE_TIMEOUT_MS, killSignal: 'SIGTERM', env: { ...process.env, TEST_COUNTS_FILE: countsFile } },
  );
  const counts = countsOf(countsFile);
  for (const outcome of Object.keys(totals)) totals[outcome] += counts[outcome];
  const byArea = areas.get(area) ?? { files: 0, passed: 0, failed: 0, skipped: 0, ms: 0 };
  areas.set(area, byArea);
  byArea.files++;
  byArea.ms += Date.now() - fileStarted;
  for (const outcome of Object.keys(totals)) byArea[outcome] += counts[outcome];
  if (run.status !== 0 || counts.failed > 0) {
    const why = run.error ? `stopped: ${run.error.message}` : run.signal ? `killed by ${run.signal}` : `exit ${run.status}`;
    failedFiles.push(`${relative} (${why})`);
    for (const failure of counts.failures) failedTests.push({ file: relative, ...failure });
    // A file that died before reporting a failed test still counts as one failure.
    if (counts.failed === 0) {
      totals.failed++;
      byArea.failed++;
    }
  }
});
rmSync(scratch, { recursive: true, force: true });

printAreaTable();
console.log(`\n${files.length} test files in ${Math.round((Date.now() - started) / 1000)} s`);
for (const { file, name, error } of failedTests) console.log(`\nfailed: ${file} › ${name}\n${error.replace(/^/gm, '    ')}`);
for (const failed of failedFiles) console.log(`failed: ${failed}`);
console.log(`${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(failedFiles.length === 0 ? 0 : 1);

function elapsed(since) {
  const seconds = Math.round((Date.now() - since) / 1000);
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

function printAreaTable() {
  const rows = [['area', 'files', 'passed', 'failed', 'skipped', 'time']];
  for (const [area, a] of areas) rows.push([area, a.files, a.passed, a.failed, a.skipped, `${Math.round(a.ms / 1000)} s`].map(String));
  const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => row[column].length)));
  console.log('');
  rows.forEach((row, i) => {
    console.log(`| ${row.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join(' | ')} |`);
    if (i === 0) console.log(`|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`);
  });
}

/** The file's outcomes, one line per finished test, and its failures (see count-reporter.mjs). */
function countsOf(countsFile) {
  const counts = { passed: 0, failed: 0, skipped: 0, failures: [] };
  let text = '';
  try {
    text = readFileSync(countsFile, 'utf8');
  } catch {
    return counts;
  }
  for (const line of text.split('\n')) {
    const [outcome, failure] = line.split('\t');
    if (failure) counts.failures.push(JSON.parse(failure));
    if (outcome in totals) counts[outcome]++;
  }
  return counts;
}

function findTests(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((entry) => {
      const full = path.join(dir, entry);
      if (statSync(full).isDirectory()) return findTests(full);
      return entry.endsWith('.test.js') ? [full] : [];
    });
}
