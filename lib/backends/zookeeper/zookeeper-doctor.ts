import { connect } from 'node:net';
import type { BackendSettings } from '../backend-definition';
import { Diagnosis, type DoctorReport } from '../backend-doctor';
import { loadPeer } from '../load-peer';
import { closeClient, type ZkModule } from './zookeeper-client';
import { resolveZooKeeperOptions, type ZooKeeperBackendOptions } from './zookeeper-options';

/**
 * The session timeout the server grants against the one the backend asks for (the module's ttlMs
 * unless `sessionTimeoutMs` is set): the server clamps it to [minSessionTimeout,
 * maxSessionTimeout], by default [2, 20] x tickTime, and says nothing. The `srvr` and `conf`
 * four-letter words add the version and the bounds to change, where the server allows them.
 */
export async function doctorZooKeeper(options: ZooKeeperBackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const resolved = resolveZooKeeperOptions(options);
  const diagnosis = new Diagnosis('zookeeper', resolved.address);
  const requestedMs = resolved.sessionTimeoutMs ?? Math.ceil(settings.ttlMs);
  let grantedMs: number;
  try {
    grantedMs = await negotiatedTimeout(resolved.connectionString, resolved.address, requestedMs, settings.serverTimeoutMs);
  } catch (error) {
    diagnosis.unreachable(resolved.address, error);
    return diagnosis.report();
  }
  const bounds = await serverBounds(diagnosis, resolved.address.split(','), settings.serverTimeoutMs);
  const asked = resolved.sessionTimeoutMs === undefined ? `ttlMs (${requestedMs} ms)` : `backend.sessionTimeoutMs (${requestedMs} ms)`;
  const known = bounds ? ` (tickTime ${bounds.tickTime}, minSessionTimeout ${bounds.min}, maxSessionTimeout ${bounds.max})` : '';
  if (grantedMs === requestedMs) {
    diagnosis.pass(resolved.address, `session timeout granted as asked: ${grantedMs} ms`);
  } else if (grantedMs < requestedMs) {
    diagnosis.find({
      check: 'session-timeout',
      severity: 'warning',
      server: resolved.address,
      found: `the server cut the session timeout asked for by ${asked} to ${grantedMs} ms${known}`,
      consequence: `a pause or a network cut longer than ${grantedMs} ms, though shorter than the ${requestedMs} ms asked for, ends the session and every lock this process holds`,
      fix: `maxSessionTimeout=${requestedMs} or more in zoo.cfg on every server (its default is 20 x tickTime), or ask for at most ${grantedMs} ms (ttlMs, or backend.sessionTimeoutMs)`,
    });
  } else {
    diagnosis.find({
      check: 'session-timeout',
      severity: 'warning',
      server: resolved.address,
      found: `the server raised the session timeout asked for by ${asked} to ${grantedMs} ms${known}`,
      consequence: `a crashed holder's locks stay until its session expires, ${grantedMs} ms later, not within ttlMs: every waiter waits that long`,
      fix: `minSessionTimeout=${requestedMs} or less in zoo.cfg on every server (its default is 2 x tickTime), or ask for at least ${grantedMs} ms (ttlMs, or backend.sessionTimeoutMs)`,
    });
  }
  diagnosis.note('ZooKeeper has no clock a client can read: the clock check is not made');
  return diagnosis.report();
}

/** Opens a session asking for `requestedMs` and reads what the server granted; closes it at once. */
function negotiatedTimeout(connectionString: string, address: string, requestedMs: number, serverTimeoutMs: number): Promise<number> {
  const zk = loadPeer<ZkModule>('node-zookeeper-client', 'zookeeper');
  const client = zk.createClient(connectionString, { sessionTimeout: requestedMs, spinDelay: 100, retries: 0 });
  return new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      closeClient(client);
      reject(new Error(`no ZooKeeper session from ${address} within ${serverTimeoutMs} ms`));
    }, serverTimeoutMs);
    client.on('connected', () => {
      clearTimeout(timer);
      const granted = client.getSessionTimeout();
      closeClient(client);
      resolve(granted);
    });
    client.connect();
  });
}

/**
 * tickTime and the session bounds from `conf`, and the version and mode from `srvr`, of the first
 * server that answers them. Servers allow only the words in 4lw.commands.whitelist (srvr alone by
 * default): what they refuse is noted, the granted timeout above already being the check.
 */
async function serverBounds(diagnosis: Diagnosis, servers: string[], timeoutMs: number): Promise<{ tickTime: string; min: string; max: string } | undefined> {
  let bounds: { tickTime: string; min: string; max: string } | undefined;
  for (const server of servers) {
    const srvr = await fourLetterWord(server, 'srvr', timeoutMs);
    const version = /Zookeeper version: ([^,\n]+)/.exec(srvr ?? '')?.[1];
    const mode = /Mode: (\S+)/.exec(srvr ?? '')?.[1];
    diagnosis.note(`${server}: ${version ? `ZooKeeper ${version}, mode ${mode ?? '?'}` : `srvr not answered${srvr ? ` (${srvr.trim()})` : ''}`}`);
    if (bounds) continue;
    const conf = await fourLetterWord(server, 'conf', timeoutMs);
    const field = (name: string) => new RegExp(`^${name}=(\\d+)`, 'm').exec(conf ?? '')?.[1];
    const [tickTime, min, max] = [field('tickTime'), field('minSessionTimeout'), field('maxSessionTimeout')];
    if (tickTime && min && max) bounds = { tickTime, min, max };
    else diagnosis.note(`${server}: conf not answered${conf ? ` (${conf.trim()})` : ''}: add conf to 4lw.commands.whitelist to see tickTime and the session bounds`);
  }
  return bounds;
}

/** A four-letter word's answer, or undefined when the server could not be asked. */
function fourLetterWord(server: string, word: string, timeoutMs: number): Promise<string | undefined> {
  const colon = server.lastIndexOf(':');
  return new Promise((resolve) => {
    const socket = connect({ host: server.slice(0, colon), port: Number(server.slice(colon + 1)) });
    let answer = '';
    socket.setTimeout(timeoutMs, () => socket.destroy());
    socket.on('connect', () => socket.write(word));
    socket.on('data', (chunk) => (answer += chunk.toString()));
    socket.on('close', () => resolve(answer === '' ? undefined : answer));
    socket.on('error', () => undefined);
  });
}
