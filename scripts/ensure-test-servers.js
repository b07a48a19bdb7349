// The servers the tests run, from Debian's packages. Missing ones are installed with apt-get
// when we are root; otherwise the run stops with the exact command to type.
'use strict';
const { execFileSync, execSync } = require('node:child_process');
const { existsSync } = require('node:fs');

/** package -> how to tell it is installed. Backends add their server here. */
const SERVERS = [
  { package: 'zookeeper', installed: () => existsSync('/usr/share/java/zookeeper.jar') && onPath('java') },
  // Apache Curator (recipes, with framework and client as its dependencies) and a compiler: the
  // other side of the protocol 'curator' tests is a small Java program compiled at test time.
  { package: 'libcurator-recipes-java', installed: () => existsSync('/usr/share/java/curator-recipes.jar') },
  { package: 'libcurator-framework-java', installed: () => existsSync('/usr/share/java/curator-framework.jar') },
  { package: 'libcurator-client-java', installed: () => existsSync('/usr/share/java/curator-client.jar') },
  { package: 'default-jdk-headless', installed: () => onPath('javac') },
  { package: 'redis-server', installed: () => onPath('redis-server') },
  { package: 'etcd-server', installed: () => onPath('etcd') },
  // etcdctl: the other side of the etcd interoperability tests (its `lock` is Go's concurrency.Mutex).
  { package: 'etcd-client', installed: () => onPath('etcdctl') },
  // Debian 12's postgresql (15); servers/postgres-server.ts runs initdb and postgres from here.
  { package: 'postgresql', installed: () => existsSync('/usr/lib/postgresql/15/bin/postgres') },
  // PgBouncer, for the transaction-mode test (servers/pgbouncer-server.ts).
  { package: 'pgbouncer', installed: () => existsSync('/usr/sbin/pgbouncer') },
  // Makes the throwaway CA and certificates of the TLS tests (servers/test-certificates.ts).
  { package: 'openssl', installed: () => onPath('openssl') },
];

function ensureTestServers() {
  const missing = SERVERS.filter((server) => !server.installed());
  if (missing.length === 0) return;
  const packages = missing.map((server) => server.package);
  const command = `apt-get update && apt-get install -y ${packages.join(' ')}`;
  if (process.getuid?.() !== 0) {
    console.error(`The tests need ${packages.join(', ')}. Install them with:\n  sudo ${command}`);
    process.exit(1);
  }
  console.log(`Installing test servers: ${packages.join(' ')}`);
  execSync(command, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
}

function onPath(binary) {
  try {
    execFileSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

module.exports = { ensureTestServers, SERVERS, onPath, existsSync };
