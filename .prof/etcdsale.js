require('/work/main/node_modules/reflect-metadata');
const { EtcdCluster } = require('/work/main/dist/test/support/etcd-server');
const { createEtcdBackend } = require('/work/main/dist/lib/backends/etcd/etcd.backend');
const { lockServiceOver } = require('/work/main/dist/test/support/lock-service-factory');
const { flashSale } = require('/work/main/dist/bench/workloads');
async function metrics(url) {
  const text = await (await fetch(url + '/metrics')).text();
  const pick = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^(grpc_server_handled_total\{grpc_code="OK",grpc_method="(\w+)"[^}]*\}|etcd_disk_wal_fsync_duration_seconds_count|etcd_mvcc_(txn|range|put|delete)_total[^ ]*) (\S+)/);
    if (m) pick[m[2] || m[1]] = +m[4];
  }
  return pick;
}
(async () => {
  const cluster = await EtcdCluster.start(1);
  const url = cluster.hosts[0];
  const services = Array.from({ length: 4 }, () => lockServiceOver(createEtcdBackend({ type: 'etcd', hosts: cluster.hosts })));
  const times = [];
  const runners = services.map((s, i) => (name, section) => s.withLock(name, () => { times.push([performance.now(), i]); return section(); }, { waitTimeoutMs: 120000 }));
  await flashSale(runners, 50, 150);
  const before = await metrics(url);
  times.length = 0; const t0 = performance.now();
  const r = await flashSale(runners, 50, 150);
  console.log('first grant at', (times[0][0]-t0).toFixed(1));
  const gaps = times.slice(1).map((t, i) => [t[0] - times[i][0], times[i][1], t[1]]);
  const same = gaps.filter(g => g[1] === g[2]), cross = gaps.filter(g => g[1] !== g[2]);
  const sum = (a) => a.reduce((x, g) => x + g[0], 0);
  console.log('same-process handoffs', same.length, 'total ms', sum(same).toFixed(1), ' cross', cross.length, 'total ms', sum(cross).toFixed(1));
  console.log('largest gaps', gaps.sort((a,b)=>b[0]-a[0]).slice(0,8).map(g=>g[0].toFixed(1)+(g[1]===g[2]?'s':'x')).join(' '));
  const after = await metrics(url);
  console.log('makespan', r.makespanMs.toFixed(0));
  for (const k in after) if (after[k] - (before[k] || 0)) console.log(k, after[k] - (before[k] || 0));
  await Promise.all(services.map((s) => s.onApplicationShutdown()));
  await cluster.stop(); process.exit(0);
})();
