import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../servers/free-port';
import { runSql, startPostgresServer, type PostgresServer } from '../../servers/postgres-server';
import { doctorJson, findingsOf, runDoctorCli } from '../support/doctor-cli';

/** PostgreSQL's own defaults, over the test helper's fast unsafe ones (later -c settings win). */
const DEFAULT_DURABILITY = ['-c', 'fsync=on', '-c', 'synchronous_commit=on', '-c', 'full_page_writes=on'];

describe('lock doctor: postgres', () => {
  let noFsync: PostgresServer;
  let durable: PostgresServer;

  before(async () => {
    noFsync = await startPostgresServer(['-c', 'synchronous_commit=on', '-c', 'full_page_writes=on', '-c', 'fsync=off']);
    durable = await startPostgresServer(DEFAULT_DURABILITY);
    // A role whose sessions commit without waiting for the disk: what the backend's sessions would see.
    await runSql(durable.url, 'CREATE ROLE lax LOGIN');
    await runSql(durable.url, 'ALTER ROLE lax SET synchronous_commit = off');
  });
  after(async () => {
    await Promise.all([noFsync?.stop(), durable?.stop()]);
  });

  it('fsync = off: an error naming the setting; exit status 1', async (t) => {
    const { code, report } = await doctorJson([noFsync.url]);
    t.diagnostic(JSON.stringify(report.findings, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['fsync:error']);
    assert.match(report.findings[0].consequence, /lose committed grants and sequence values/);
    assert.match(report.findings[0].fix, /^fsync = on/);
  });

  it('synchronous_commit = off for the role the backend connects as: no finding, the lock statements set it on for themselves', async () => {
    const { code, report } = await doctorJson([durable.url.replace('postgres@', 'lax@')]);
    assert.deepEqual(report.findings, []);
    assert.ok(report.passed.some((line) => line.startsWith('synchronous_commit is off for these sessions, and every lock statement sets it on')), JSON.stringify(report.passed));
    assert.equal(code, 0);
  });

  it("PostgreSQL's defaults: a clean report with the clock compared, exit status 0", async () => {
    const { code, report } = await doctorJson([durable.url]);
    assert.deepEqual(report.findings, []);
    for (const passed of ['fsync is on', 'synchronous_commit is on', 'full_page_writes is on', 'clock:']) {
      assert.ok(report.passed.some((line) => line.startsWith(passed)), `${passed} is not among ${JSON.stringify(report.passed)}`);
    }
    assert.equal(code, 0);
  });

  it('an address nothing listens on: exit status 2', async () => {
    const port = await freePort();
    const { code, stdout } = await runDoctorCli([`postgres://postgres@127.0.0.1:${port}/postgres`]);
    assert.equal(code, 2, stdout);
    assert.match(stdout, new RegExp(`UNREACHABLE 127\\.0\\.0\\.1:${port}: connect ECONNREFUSED`));
  });
});
