import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockKeyError, WithLock } from '../../lib';
import { compileLockKey, toBackendKey } from '../../lib/lock-key';

describe('lock key templates', () => {
  const resolve = (template: Parameters<typeof compileLockKey>[0], ...args: unknown[]) => compileLockKey(template, 'Test.method')(args);

  it('resolves argument indexes, property paths, literals and key functions', () => {
    assert.equal(resolve('stock:<0>', 'apple'), 'stock:apple');
    assert.equal(resolve('order:<1.customer.id>/<0>', 7, { customer: { id: 'c-9' } }), 'order:c-9/7');
    assert.equal(resolve('list:<0.1>', ['a', 'b']), 'list:b');
    assert.equal(resolve('static-name'), 'static-name');
    assert.equal(resolve('<0>:<1>:<2>', 12n, true, -0.5), '12:true:-0.5');
    assert.equal(resolve((sku: string, n: number) => `${sku}#${n}`, 'pear', 3), 'pear#3');
  });

  it('rejects every value without one obvious spelling, naming template, method and part', () => {
    for (const bad of [undefined, null, '', Number.NaN, Infinity, {}, [], ['x'], () => 1, Symbol('s')]) {
      assert.throws(
        () => resolve('stock:<0>', bad),
        (error: unknown) =>
          error instanceof LockKeyError &&
          error.template === 'stock:<0>' &&
          error.method === 'Test.method' &&
          error.part === '<0>' &&
          error.message.includes('Test.method'),
        `accepted ${String(typeof bad === 'symbol' ? 'a symbol' : bad)}`,
      );
    }
    assert.throws(() => resolve('order:<0.id>', { other: 1 }), /<0\.id> in lock template "order:<0.id>" resolved to undefined/);
    assert.throws(() => resolve('order:<0.a.b>', { a: null }), /cannot read "b" of <0\.a> \(null\)/);
    assert.throws(() => resolve((x: unknown) => x, undefined), LockKeyError);
  });

  it('fails when the class is defined for a malformed template', () => {
    for (const template of ['stock:<', 'stock:<>', 'stock:<a>', 'stock:<0.>', 'stock:<0..a>', 'stock:<-1>', '']) {
      assert.throws(
        () => {
          class Inventory {
            @WithLock(template)
            buy(_sku: string) {}
          }
          return Inventory;
        },
        (error: unknown) => error instanceof LockKeyError && error.method === 'Inventory.buy',
        `accepted template "${template}"`,
      );
    }
  });
});

describe('backend keys', () => {
  it('prefixes short names as they are', () => {
    assert.equal(toBackendKey('lock:', 'stock:apple', 512), 'lock:stock:apple');
  });

  it('hashes long names stably, distinctly and within the limit, keeping a readable head', () => {
    const long = 'é'.repeat(600);
    const key = toBackendKey('lock:', long, 256);
    assert.ok(Buffer.byteLength(key) <= 256);
    assert.equal(key, toBackendKey('lock:', long, 256));
    assert.ok(key.startsWith('lock:éé'));
    assert.match(key, /~[0-9a-f]{64}$/);
    assert.notEqual(toBackendKey('lock:', `${long}x`, 256), key);
  });

  it('never gives a short name that is spelled like a hashed key the key of that long name', () => {
    const long = 'x'.repeat(600);
    const hashed = toBackendKey('lock:', long, 256);
    const lookalike = hashed.slice('lock:'.length);
    assert.notEqual(toBackendKey('lock:', lookalike, 256), hashed);
    assert.match(toBackendKey('lock:', lookalike, 256), /~[0-9a-f]{64}$/);
  });
});
