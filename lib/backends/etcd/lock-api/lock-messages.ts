/**
 * The two messages of etcd's `v3lockpb.Lock/Lock` call, encoded by hand: the etcd3 package ships
 * neither the service nor its protos, and a .proto loaded at runtime would cost a dependency and
 * a file to ship for one request and one reply.
 *
 *   LockRequest  { bytes name = 1; int64 lease = 2; }
 *   LockResponse { ResponseHeader header = 1; bytes key = 2; }   ResponseHeader { ...; int64 revision = 3; ... }
 */

export interface LockRequest {
  /** The name the server's Mutex puts its key under (`name + "/" + lease hex`). */
  readonly name: Buffer;
  /** The session lease, as etcd3 gives it (a decimal string). */
  readonly lease: string;
}

export interface LockResponse {
  /** The key the server's Mutex owns the lock with. */
  readonly key: Buffer;
  /** The response header's revision: the store's, not the key's create revision once the lock was contended. */
  readonly headerRevision: bigint;
}

const NAME = (1 << 3) | 2;
const LEASE = (2 << 3) | 0;

export function encodeLockRequest({ name, lease }: LockRequest): Buffer {
  return Buffer.concat([Buffer.from([NAME]), varint(BigInt(name.length)), name, Buffer.from([LEASE]), varint(BigInt(lease))]);
}

export function decodeLockResponse(bytes: Buffer): LockResponse {
  let key = Buffer.alloc(0);
  let headerRevision = 0n;
  for (const field of fields(bytes)) {
    if (field.number === 1 && field.bytes) {
      for (const inner of fields(field.bytes)) if (inner.number === 3 && inner.value !== undefined) headerRevision = inner.value;
    } else if (field.number === 2 && field.bytes) {
      key = Buffer.from(field.bytes);
    }
  }
  return { key, headerRevision };
}

function varint(value: bigint): Buffer {
  const out: number[] = [];
  do {
    let byte = Number(value & 0x7fn);
    value >>= 7n;
    if (value > 0n) byte |= 0x80;
    out.push(byte);
  } while (value > 0n);
  return Buffer.from(out);
}

interface Field {
  readonly number: number;
  /** A varint field's value. */
  readonly value?: bigint;
  /** A length-delimited field's bytes. */
  readonly bytes?: Buffer;
}

/** The fields of a message: varints and length-delimited ones (the only wire types these messages use; others are skipped by their size). */
function* fields(bytes: Buffer): Generator<Field> {
  let at = 0;
  const readVarint = (): bigint => {
    let result = 0n;
    for (let shift = 0n; ; shift += 7n) {
      if (at >= bytes.length) throw new Error('truncated etcd Lock response');
      const byte = bytes[at++];
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
    }
  };
  while (at < bytes.length) {
    const tag = Number(readVarint());
    const number = tag >>> 3;
    switch (tag & 7) {
      case 0:
        yield { number, value: readVarint() };
        break;
      case 2: {
        const length = Number(readVarint());
        yield { number, bytes: bytes.subarray(at, at + length) };
        at += length;
        break;
      }
      case 1:
        at += 8;
        break;
      case 5:
        at += 4;
        break;
      default:
        throw new Error(`unexpected wire type in an etcd Lock response: ${tag & 7}`);
    }
  }
}
