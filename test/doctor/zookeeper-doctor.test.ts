import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../servers/free-port';
import { startZooKeeperServer, type ZooKeeperServer } from '../../servers/zookeeper-server';
import { doctorJson, findingsOf, runDoctorCli } from '../support/doctor-cli';

describe('lock doctor: zookeeper', () => {
  /** maxSessionTimeout 1 s, below the ttl asked for; `conf` allowed. */
  let capped: ZooKeeperServer;
  /** minSessionTimeout 8 s, above the ttl asked for; `conf` not allowed (the helper's whitelist: ruok, srvr). */
  let floored: ZooKeeperServer;

  before(async () => {
    // One after the other: two JVMs starting at once on a 2-core machine.
    capped = await startZooKeeperServer({ config: ['maxSessionTimeout=1000', '4lw.commands.whitelist=ruok,srvr,conf'] });
    floored = await startZooKeeperServer({ config: ['minSessionTimeout=8000'] });
  });
  after(async () => {
    await Promise.all([capped?.stop(), floored?.stop()]);
  });

  it('maxSessionTimeout below the ttl: the cut timeout, the bounds from conf and the zoo.cfg line to change', async (t) => {
    const { code, report } = await doctorJson([`zookeeper://${capped.connectionString}`, '--ttl-ms', '5000']);
    t.diagnostic(JSON.stringify(report, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['session-timeout:warning']);
    const [finding] = report.findings;
    assert.match(finding.found, /the server cut the session timeout asked for by ttlMs \(5000 ms\) to 1000 ms \(tickTime 100, minSessionTimeout 200, maxSessionTimeout 1000\)/);
    assert.match(finding.consequence, /longer than 1000 ms, though shorter than the 5000 ms asked for, ends the session and every lock/);
    assert.match(finding.fix, /maxSessionTimeout=5000 or more in zoo\.cfg/);
    assert.ok(report.notes.some((note) => /ZooKeeper 3\.8\.\d+.*, mode standalone/.test(note)), JSON.stringify(report.notes));
  });

  it('minSessionTimeout above the ttl: the raised timeout; conf refused by the whitelist is said, not guessed', async (t) => {
    const { code, report } = await doctorJson([JSON.stringify({ type: 'zookeeper', connectionString: floored.connectionString, sessionTimeoutMs: 2000 })]);
    t.diagnostic(JSON.stringify(report, null, 2));
    assert.equal(code, 1);
    assert.deepEqual(findingsOf(report), ['session-timeout:warning']);
    assert.match(report.findings[0].found, /raised the session timeout asked for by backend\.sessionTimeoutMs \(2000 ms\) to 8000 ms$/);
    assert.match(report.findings[0].fix, /minSessionTimeout=2000 or less in zoo\.cfg/);
    assert.ok(report.notes.some((note) => note.includes('conf not answered (conf is not executed because it is not in the whitelist.)')), JSON.stringify(report.notes));
  });

  it('a ttl within the bounds: a clean report, exit status 0', async () => {
    const { code, report } = await doctorJson([`zk://${capped.connectionString}`, '--ttl-ms', '800']);
    assert.deepEqual(report.findings, []);
    assert.ok(report.passed.includes(`session timeout granted as asked: 800 ms (${capped.connectionString})`), JSON.stringify(report.passed));
    assert.equal(code, 0);
  });

  it('an address nothing listens on: exit status 2 within serverTimeoutMs', async () => {
    const port = await freePort();
    const started = performance.now();
    const { code, stdout } = await runDoctorCli([`zookeeper://127.0.0.1:${port}`, '--server-timeout-ms', '1000']);
    assert.equal(code, 2, stdout);
    assert.match(stdout, new RegExp(`UNREACHABLE 127\\.0\\.0\\.1:${port}: no ZooKeeper session from 127\\.0\\.0\\.1:${port} within 1000 ms`));
    assert.ok(performance.now() - started < 5_000, `took ${Math.round(performance.now() - started)} ms`);
  });
});
