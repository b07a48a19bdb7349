import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { invalidPathReason, lockNodeName, MAX_ENCODED_NAME_CHARS } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { ZooKeeperInspector } from './zookeeper-inspect';

/** Names a path-based store could get wrong: separators, relative segments, the reserved node, bytes ZooKeeper refuses. */
const HOSTILE = [
  '/',
  '//',
  '.',
  '..',
  '../etc',
  'a/b',
  'a%2Fb',
  'a%2fb',
  '%',
  '#',
  '~',
  'zookeeper',
  '/zookeeper',
  '\u0000',
  '\u0001\n\t\u007f\u0085',
  ' ',
  '\u00e9', // é, composed
  'e\u0301', // é, decomposed: a different name
  '\u{1F512}', // 🔒, outside the BMP: ZooKeeper refuses surrogates in paths
  '\ud800', // a lone surrogate: UTF-8 would make it U+FFFD
  '\ufffd',
  '\uffff',
  '\ue000', // private use area
  '\u65e5\u672c\u8a9e',
  '\u202eevil', // right-to-left override
  'x'.repeat(300),
  'x'.repeat(301),
  'x'.repeat(5_000),
  'x'.repeat(5_000) + 'y',
  '%'.repeat(100),
];

/** The inverse of lockNodeName for names it did not hash: that it exists is what makes the encoding injective. */
function decode(nodeName: string): string {
  let out = '';
  const bytes: number[] = [];
  const flush = () => {
    out += Buffer.from(bytes.splice(0)).toString('utf8');
  };
  for (let i = 0; i < nodeName.length; ) {
    if (nodeName.startsWith('%u', i)) {
      flush();
      out += String.fromCharCode(parseInt(nodeName.slice(i + 2, i + 6), 16));
      i += 6;
    } else if (nodeName[i] === '%') {
      bytes.push(parseInt(nodeName.slice(i + 1, i + 3), 16));
      i += 3;
    } else {
      flush();
      out += nodeName[i++];
    }
  }
  flush();
  return out;
}

describe('ZooKeeper lock names', () => {
  it('maps every hostile name to a distinct, valid node name; short ones decode back, long ones are hashed', () => {
    const nodes = HOSTILE.map((name) => lockNodeName(`lock:${name}`));
    assert.equal(new Set(nodes).size, HOSTILE.length, 'two names share a node');
    HOSTILE.forEach((name, i) => {
      const node = nodes[i];
      assert.equal(invalidPathReason(`/distributed-lock/${node}`), undefined, `${JSON.stringify(name)} -> ${node}`);
      assert.ok(node.length <= 1 + MAX_ENCODED_NAME_CHARS + 1 + 64, `${node.length} chars`);
      if (node.startsWith('#')) assert.match(node, /~[0-9a-f]{64}$/);
      else assert.equal(decode(node), `lock:${name}`);
    });
    assert.equal(lockNodeName('same'), lockNodeName('same'), 'not stable');
  });

  describe('on a server', () => {
    let zookeeper: ZooKeeperServer;
    before(async () => {
      zookeeper = await startZooKeeperServer();
    });
    after(async () => {
      await zookeeper?.stop();
    });

    it('fencing tokens keep growing when the empty parent is deleted and recreated (the sequence number restarts, czxid does not)', async () => {
      const options = { type: 'zookeeper', connectionString: zookeeper.connectionString } as const;
      const service = lockServiceOver(createZooKeeperBackend(options));
      const inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
      const parent = `/distributed-lock/${lockNodeName('lock:recycled')}`;
      try {
        const tokens: bigint[] = [];
        for (let i = 0; i < 3; i++) {
          const lock = await service.acquire('recycled');
          tokens.push(lock.fencingToken);
          assert.deepEqual(await inspector.children(parent), [(await inspector.children(parent))[0]]);
          assert.match((await inspector.children(parent))[0], /-lock-0000000000$/, 'the parent was not recreated: its sequence did not restart');
          await lock.release();
          const deadline = Date.now() + 5_000;
          while ((await inspector.children('/distributed-lock')).includes(lockNodeName('lock:recycled')) && Date.now() < deadline) {
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        }
        assert.ok(tokens[0] < tokens[1] && tokens[1] < tokens[2], `tokens ${tokens.join(', ')}`);
      } finally {
        inspector.close();
        await service.onApplicationShutdown();
      }
    });

    it('holds all of them at once (no two share a lock), each really held, and leaves no node behind', async () => {
      const rootPath = '/apps/shop/locks';
      const options = { type: 'zookeeper', connectionString: zookeeper.connectionString, rootPath } as const;
      const [a, b] = [lockServiceOver(createZooKeeperBackend(options)), lockServiceOver(createZooKeeperBackend(options))];
      const inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
      try {
        // A collision would make one of these wait for the other, and time out.
        const held = await Promise.all(HOSTILE.map((name) => a.acquire(name, { waitTimeoutMs: 5_000 })));
        assert.equal((await inspector.children(rootPath)).length, HOSTILE.length);
        assert.equal((await inspector.lockNodes(rootPath)).length, HOSTILE.length);
        for (const name of HOSTILE) assert.equal(await b.tryAcquire(name), null, `${JSON.stringify(name)} was not held`);
        await Promise.all(held.map((lock) => lock.release()));
        for (const name of HOSTILE) {
          const lock = await b.tryAcquire(name);
          assert.ok(lock, `${JSON.stringify(name)} stayed locked`);
          await lock.release();
        }
        // Empty parents are removed with their last lock node.
        const deadline = Date.now() + 5_000;
        while ((await inspector.children(rootPath)).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        assert.deepEqual(await inspector.children(rootPath), [], 'empty parent nodes were left');
      } finally {
        inspector.close();
        await Promise.all([a.onApplicationShutdown(), b.onApplicationShutdown()]);
      }
    });
  });
});
