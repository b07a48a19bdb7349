import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startRedisServer, type RedisServer } from '../../servers/redis-server';
import { doctorJson, findingsOf } from '../support/doctor-cli';

const DURABLE = ['--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction'];

describe('lock doctor: redlock', () => {
  /** Three independent durable masters, and a primary whose replica is the fifth server. */
  let servers: RedisServer[] = [];
  let primary: RedisServer;
  let replica: RedisServer;

  before(async () => {
    servers = await Promise.all([startRedisServer(DURABLE), startRedisServer(DURABLE), startRedisServer(DURABLE)]);
    primary = await startRedisServer(DURABLE);
    replica = await startRedisServer([...DURABLE, '--replicaof', '127.0.0.1', String(primary.port)]);
  });
  after(async () => {
    await Promise.all([...servers, primary, replica].map((server) => server?.stop()));
  });

  it('three independent, durable masters: a clean report, exit status 0', async () => {
    const { code, report } = await doctorJson(servers.map((server) => server.url));
    assert.deepEqual(report.findings, []);
    assert.ok(report.passed.includes('3 independent masters (distinct run_id and replication id) (every master)'), JSON.stringify(report.passed));
    assert.equal(code, 0);
  });

  it('two "masters" that are one server under two URLs (db 0 and db 1): an error naming both', async (t) => {
    const { code, report } = await doctorJson([servers[0].url, `${servers[0].url}/1`, servers[1].url]);
    t.diagnostic(JSON.stringify(report.findings, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['redlock-independence:error']);
    const [finding] = report.findings;
    assert.equal(finding.server, `127.0.0.1:${servers[0].port} and 127.0.0.1:${servers[0].port}/1`);
    assert.match(finding.found, /are one server \(run_id [0-9a-f]{40}\)/);
    assert.match(finding.consequence, /casts 2 of the 2 votes a majority of 3 needs/);
  });

  it('a master and its replica: an error, they replicate each other', async (t) => {
    const { code, report } = await doctorJson([servers[0].url, primary.url, replica.url]);
    t.diagnostic(JSON.stringify(report.findings, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['redlock-independence:error', 'replication:warning', 'role:error']);
    const independence = report.findings.find((finding) => finding.check === 'redlock-independence')!;
    assert.match(independence.found, new RegExp(`127\\.0\\.0\\.1:${replica.port} \\(replica of 127\\.0\\.0\\.1:${primary.port}\\)`));
    assert.match(independence.found, /replicate each other$/);
  });
});
