#!/usr/bin/env node
// The whole test suite: make sure the test servers are installed, compile, run every test file
// with node's own test runner. `node scripts/test.js <substring>` runs only matching files.
'use strict';
const { spawnSync } = require('node:child_process');
const { readdirSync, statSync } = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
require('./ensure-test-servers').ensureTestServers();

const compiled = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.json')], {
  stdio: 'inherit',
  cwd: root,
});
if (compiled.status !== 0) process.exit(compiled.status ?? 1);

const filter = process.argv[2];
const files = findTests(path.join(root, 'dist', 'test')).filter((file) => !filter || file.includes(filter));
if (files.length === 0) {
  console.error(`no test files${filter ? ` matching "${filter}"` : ''} under dist/test`);
  process.exit(1);
}
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...files], { stdio: 'inherit', cwd: root });
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
