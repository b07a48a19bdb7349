import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { freePort } from '../../servers/free-port';
import { startRedisServer, type RedisServer } from '../../servers/redis-server';
import { doctorJson, findingsOf, runDoctorCli } from '../support/doctor-cli';

/** What a correctly configured Redis for locks is started with. */
const DURABLE = ['--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction'];

describe('lock doctor: redis', () => {
  let misconfigured: RedisServer;
  let durable: RedisServer;
  let noConfig: RedisServer;
  let primary: RedisServer;
  let replica: RedisServer;

  before(async () => {
    [misconfigured, durable, noConfig, primary] = await Promise.all([
      startRedisServer(['--maxmemory-policy', 'allkeys-lru', '--maxmemory', '64mb']),
      startRedisServer(DURABLE),
      // A managed Redis that hides CONFIG: renamed to nothing.
      startRedisServer([...DURABLE, '--rename-command', 'CONFIG', '""']),
      startRedisServer(DURABLE),
    ]);
    replica = await startRedisServer([...DURABLE, '--replicaof', '127.0.0.1', String(primary.port)]);
    const client = new Redis(replica.url);
    try {
      // Ready once the replica has synced: its INFO then says so.
      for (let i = 0; i < 100 && !/master_link_status:up/.test(await client.info('replication')); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      client.disconnect();
    }
  });
  after(async () => {
    await Promise.all([misconfigured, durable, noConfig, primary, replica].map((server) => server?.stop()));
  });

  it("allkeys-lru and appendonly no: each a finding with its consequence and setting; exit status 1", async (t) => {
    const { code, report } = await doctorJson([misconfigured.url]);
    t.diagnostic(JSON.stringify(report.findings, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['appendonly:error', 'maxmemory-policy:error']);
    const eviction = report.findings.find((finding) => finding.check === 'maxmemory-policy')!;
    assert.equal(eviction.server, `127.0.0.1:${misconfigured.port}`);
    assert.match(eviction.found, /maxmemory-policy is allkeys-lru/);
    assert.match(eviction.consequence, /lock is granted to another caller/);
    assert.match(eviction.fix, /maxmemory-policy noeviction/);
    assert.match(report.findings.find((finding) => finding.check === 'appendonly')!.fix, /appendonly yes and appendfsync always/);
    assert.ok(report.passed.some((line) => line.startsWith('clock:')), 'the clock was compared');
  });

  it('the text report names each finding, its consequence and the fix', async () => {
    const { code, stdout } = await runDoctorCli([misconfigured.url]);
    assert.equal(code, 1);
    assert.match(stdout, /ERROR maxmemory-policy \(127\.0\.0\.1:\d+\)\n {2}found: {7}maxmemory-policy is allkeys-lru/);
    assert.match(stdout, /ERROR appendonly/);
    assert.match(stdout, /fix: {9}appendonly yes and appendfsync always/);
    assert.match(stdout, /2 finding\(s\): 2 error\(s\), 0 warning\(s\), 0 not checkable\./);
  });

  it('appendonly yes, appendfsync always, noeviction: a clean report, exit status 0', async () => {
    const { code, report } = await doctorJson([durable.url]);
    assert.deepEqual(report.findings, []);
    assert.deepEqual(report.unreachable, []);
    assert.equal(code, 0);
    for (const passed of ['maxmemory-policy is noeviction', 'appendonly is yes', 'appendfsync is always']) {
      assert.ok(report.passed.some((line) => line.startsWith(passed)), `${passed} is not among ${JSON.stringify(report.passed)}`);
    }
  });

  it('CONFIG renamed away: what INFO tells is checked, appendfsync is reported as not checked, never passed', async (t) => {
    const { code, report } = await doctorJson([noConfig.url]);
    t.diagnostic(JSON.stringify(report.findings, null, 2));
    assert.equal(code, 1, 'a report with a check that could not be made is not clean');
    assert.deepEqual(findingsOf(report), ['appendfsync:unchecked']);
    assert.match(report.findings[0].found, /could not check appendfsync: CONFIG GET was refused \(ERR unknown command 'CONFIG'/);
    assert.ok(report.passed.some((line) => line.startsWith('maxmemory-policy is noeviction')), 'INFO memory still tells the policy');
    assert.ok(!report.passed.some((line) => line.startsWith('appendfsync')));
  });

  it('a replica: an error naming its primary; its primary: a warning that replication is asynchronous', async () => {
    const onReplica = await doctorJson([replica.url]);
    const role = onReplica.report.findings.find((finding) => finding.check === 'role');
    assert.ok(role, JSON.stringify(onReplica.report.findings));
    assert.equal(role.severity, 'error');
    assert.match(role.found, new RegExp(`replica of 127\\.0\\.0\\.1:${primary.port}`));
    const onPrimary = await doctorJson([primary.url]);
    assert.deepEqual(findingsOf(onPrimary.report), ['replication:warning']);
  });

  it('an address nothing listens on: exit status 2, naming the address and the refusal', async () => {
    const port = await freePort();
    const { code, stdout } = await runDoctorCli([`redis://127.0.0.1:${port}`]);
    assert.equal(code, 2);
    assert.match(stdout, new RegExp(`UNREACHABLE 127\\.0\\.0\\.1:${port}: connect ECONNREFUSED`));
  });

  it('arguments that name no backend: exit status 3 with the usage', async () => {
    const { code, stderr } = await runDoctorCli(['http://example.invalid']);
    assert.equal(code, 3);
    assert.match(stderr, /cannot tell the backend of "http:\/\/example\.invalid"/);
    assert.match(stderr, /Usage: nest-distributed-lock doctor/);
  });

  it('memory: nothing to check, said so; exit status 0', async () => {
    const { code, stdout } = await runDoctorCli(['memory']);
    assert.equal(code, 0);
    assert.match(stdout, /process-local: there is no server to check/);
  });
});
