import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { TcpProxy } from '../support/tcp-proxy';
import { sleep } from '../support/timing';

/** The failure contract's black-hole cases prove nothing unless the proxy really goes silent. */
describe('TcpProxy', () => {
  let echo: Server;
  let proxy: TcpProxy;

  before(async () => {
    echo = createServer((socket) => socket.pipe(socket));
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    proxy = await TcpProxy.start((echo.address() as { port: number }).port);
  });

  after(async () => {
    await proxy.stop();
    echo.close();
  });

  async function open(): Promise<Socket> {
    const socket = connect({ host: '127.0.0.1', port: proxy.port });
    await once(socket, 'connect');
    return socket;
  }

  /** What comes back within `ms` of sending `text`. */
  async function roundTrip(socket: Socket, text: string, ms = 200): Promise<string> {
    let received = '';
    const keep = (chunk: Buffer) => (received += chunk.toString());
    socket.on('data', keep);
    socket.write(text);
    await sleep(ms);
    socket.off('data', keep);
    return received;
  }

  it('forwards both ways, black-holes open and new connections without closing them, and heals', async () => {
    const opened = await open();
    assert.equal(await roundTrip(opened, 'ping'), 'ping');

    proxy.blackHole();
    const during = await open();
    assert.equal(await roundTrip(opened, 'lost'), '', 'an open connection carried bytes while black-holed');
    assert.equal(await roundTrip(during, 'lost'), '', 'a new connection carried bytes while black-holed');
    assert.equal(opened.destroyed || during.destroyed, false, 'a black-holed connection was closed');

    const closed = Promise.all([once(opened, 'close'), once(during, 'close')]);
    proxy.heal();
    await closed;
    const afterHeal = await open();
    assert.equal(await roundTrip(afterHeal, 'pong'), 'pong');
    afterHeal.destroy();
  });
});
