import { signalOf, type StopSignal } from '../../lazy-abort';
import { ZkCode, zkCode, type ZkStat } from './zookeeper-client';
import type { ZooKeeperSession } from './zookeeper-session';
import { pause, repeatOnConnectionLoss } from './zookeeper-wait';

/**
 * Lock-delay on ZooKeeper (README, "Lock-delay"). An ephemeral lock node vanishes with its
 * session, leaving no trace of how its holder ended, so a holder with a lock-delay keeps a
 * persistent record beside its node, `<node>~delay` (data: the delay in ms), made when the node
 * heads the queue and deleted with the node, in one transaction, by a release. A record whose node
 * is gone is a holder whose session expired: the first contender to find it marks it (a write, so
 * the server stamps the time), and nobody is granted the name until the server's clock, read from
 * the stamp of a later write, is the delay past that mark. A node with a delay says so in its name
 * (`~d` after its attempt id), so that a waiter behind it lists the queue rather than take its
 * deletion as a release.
 *
 * Record data: '<delayMs>' (holding), '<delayMs> ?' (marked: the stamp is the record's mtime), then
 * '<delayMs> <markMs>'. Marks and stamps are the ZooKeeper leader's wall clock (txn time).
 */
export const RECORD_SUFFIX = '~delay';
/** In a lock node's name, after its attempt id: the node's holder keeps a delay record. */
export const DELAY_MARK = '~d';

/** The record of the lock node named `nodeName`. */
export const recordOf = (nodeName: string) => `${nodeName}${RECORD_SUFFIX}`;

/** A child of a lock name's parent that is a lock-delay record, not a lock node. */
export const isRecord = (child: string) => child.endsWith(RECORD_SUFFIX);

/** Whether a lock node's holder keeps a delay record (see DELAY_MARK). */
export const hasDelay = (nodeName: string) => nodeName.includes(`${DELAY_MARK}-`);

/** Made when a node with a delay heads the queue: before its callers run under the lock. */
export async function putRecord(session: ZooKeeperSession, parent: string, nodeName: string, lockDelayMs: number): Promise<void> {
  try {
    await repeatOnConnectionLoss(() => session.createRecord(`${parent}/${recordOf(nodeName)}`, Buffer.from(String(Math.ceil(lockDelayMs)))));
  } catch (error) {
    // A repeat after a lost reply finds the record it made.
    if (zkCode(error) !== ZkCode.NODE_EXISTS) throw error;
  }
}

/**
 * Waits until no record among `children` (a listing of the name's parent) belongs to a node that
 * is gone: each such record is held for its delay from its mark, on the server's clock, then
 * deleted. A record whose node is still listed belongs to a live holder, which cannot be ahead of
 * the head of the queue: it is left alone.
 */
export async function waitOutRecords(session: ZooKeeperSession, parent: string, children: readonly string[], stop: StopSignal): Promise<void> {
  for (const child of children) {
    if (!isRecord(child) || children.includes(child.slice(0, -RECORD_SUFFIX.length))) continue;
    await waitOut(session, `${parent}/${child}`, stop);
  }
}

async function waitOut(session: ZooKeeperSession, path: string, stop: StopSignal): Promise<void> {
  for (;;) {
    stop.throwIfAborted();
    const read = await repeatOnConnectionLoss(() => session.read(path));
    if (!read) return;
    const [delayText, markText] = read.data.toString().split(' ');
    const delayMs = Number(delayText);
    let markMs: number;
    if (markText === undefined) {
      const marked = await setData(session, path, `${delayMs} ?`, read.stat.version);
      if (!marked) continue;
      markMs = msOf(marked);
    } else {
      markMs = markText === '?' ? msOf(read.stat) : Number(markText);
    }
    // Writes the mark into the data: the stamp of this write is the server's time now.
    const now = await setData(session, path, `${delayMs} ${markMs}`, -1);
    if (!now) return;
    const leftMs = markMs + delayMs - msOf(now);
    if (!(leftMs > 0)) {
      await remove(session, path);
      return;
    }
    await pause(leftMs, signalOf(stop));
  }
}

/** The new stat, or undefined when the record is gone or was changed meanwhile (look again). */
async function setData(session: ZooKeeperSession, path: string, data: string, version: number): Promise<ZkStat | undefined> {
  try {
    return await repeatOnConnectionLoss(() => session.setData(path, Buffer.from(data), version));
  } catch (error) {
    const code = zkCode(error);
    if (code === ZkCode.NO_NODE || code === ZkCode.BAD_VERSION) return undefined;
    throw error;
  }
}

async function remove(session: ZooKeeperSession, path: string): Promise<void> {
  try {
    await repeatOnConnectionLoss(() => session.remove(path));
  } catch (error) {
    if (zkCode(error) !== ZkCode.NO_NODE) throw error;
  }
}

const msOf = (stat: ZkStat) => Number(stat.mtime.readBigInt64BE(0));
