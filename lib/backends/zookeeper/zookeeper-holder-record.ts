import { ZkCode, zkCode } from './zookeeper-client';
import type { LockNodes } from './zookeeper-lock-nodes';
import { holderRecordName } from './zookeeper-paths';
import type { ZooKeeperSession } from './zookeeper-session';
import { repeatOnConnectionLoss } from './zookeeper-wait';

/**
 * Puts this process's holder description in an ephemeral node of the new session, once per
 * session and off every lock's path (no acquisition waits for it): inspect() shows it for the
 * session's lock nodes (their ephemeralOwner), and it goes with the session. Best effort: without
 * it, inspect shows no description.
 */
export function recordHolder(session: ZooKeeperSession, nodes: LockNodes, rootPath: string, description: string): void {
  const path = `${rootPath}/${holderRecordName(session.id)}`;
  const create = () => repeatOnConnectionLoss(() => session.createEphemeral(path, Buffer.from(description)));
  create()
    .catch(async (error: unknown) => {
      if (zkCode(error) !== ZkCode.NO_NODE) throw error;
      // The first lock of a fresh server makes the root too; the record may come first.
      await nodes.createRoot(session);
      await create();
    })
    .catch(() => undefined);
}

/** The holder description kept for the session `sessionIdHex`, or undefined when it has none. */
export async function holderDescription(session: ZooKeeperSession, rootPath: string, sessionIdHex: string): Promise<string | undefined> {
  const node = await repeatOnConnectionLoss(() => session.read(`${rootPath}/${holderRecordName(sessionIdHex)}`));
  return node === null ? undefined : node.data.toString();
}
