import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EtcdCluster } from '../../servers/etcd-server';
import { freePort } from '../../servers/free-port';
import { doctorJson, findingsOf, runDoctorCli } from '../support/doctor-cli';

describe('lock doctor: etcd', () => {
  let cluster: EtcdCluster;

  before(async () => {
    cluster = await EtcdCluster.start(1);
  });
  after(async () => {
    await cluster?.stop();
  });

  it('etcd 3.4.23 as installed: the three known bugs of its version, and lease checkpointing as not checkable', async (t) => {
    const host = cluster.hostOf(0).replace(/^http:\/\//, '');
    const { code, report } = await doctorJson([`etcd://${host}`]);
    t.diagnostic(JSON.stringify(report, null, 2));
    assert.equal(code, 1);
    assert.match(report.notes[0], new RegExp(`^${host.replace(/\./g, '\\.')}: etcd 3\\.4\\.23,`));
    assert.deepEqual(findingsOf(report), ['etcd-11456:warning', 'etcd-17465:warning', 'etcd-21423:warning', 'lease-checkpoint:unchecked']);
    const byCheck = Object.fromEntries(report.findings.map((finding) => [finding.check, finding]));
    assert.match(byCheck['etcd-11456'].consequence, /this library checks its own key after every wait/);
    assert.match(byCheck['etcd-11456'].fix, /3\.5\.0 or later/);
    assert.match(byCheck['etcd-17465'].fix, /3\.4\.31 or later/);
    assert.match(byCheck['etcd-21423'].fix, /3\.4\.42 or later/);
    assert.match(byCheck['lease-checkpoint'].fix, /--experimental-enable-lease-checkpoint/);
    assert.match(byCheck['lease-checkpoint'].found, /could not check lease-checkpoint/);
  });

  it('JSON module options: the same checks, through the backend options the module takes', async () => {
    const { code, stdout } = await runDoctorCli([JSON.stringify({ backend: { type: 'etcd', hosts: [cluster.hostOf(0)] }, ttlMs: 10_000 })]);
    assert.equal(code, 1);
    assert.match(stdout, /WARNING etcd-11456/);
    assert.match(stdout, /UNCHECKED lease-checkpoint/);
  });

  it('an address nothing listens on: exit status 2 within serverTimeoutMs', async () => {
    const port = await freePort();
    const started = performance.now();
    const { code, stdout } = await runDoctorCli([`etcd://127.0.0.1:${port}`, '--server-timeout-ms', '1500']);
    assert.equal(code, 2, stdout);
    assert.match(stdout, new RegExp(`UNREACHABLE 127\\.0\\.0\\.1:${port}: `));
    assert.ok(performance.now() - started < 6_000, `took ${Math.round(performance.now() - started)} ms`);
  });
});
