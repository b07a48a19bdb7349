/** A later error on a socket whose connection already failed: the first one was reported. */
const ignoreLaterError = (): void => undefined;

/**
 * ioredis' connector for one server, with a listener of our own on every socket it opens.
 * ioredis 5 and 6 listen to a socket's 'error' only once (`stream.once('error')`), and a TLS
 * socket can fail twice (a refused handshake, then the alert it reads while closing): the second
 * error would be uncaught and end the process. The first still reaches ioredis, and through it
 * the backend. Undefined when ioredis' internals are not where this expects them.
 */
export function guardedConnector(): unknown {
  let Standalone: (new (options: unknown) => { connect(callback: unknown): Promise<unknown> }) | undefined;
  try {
    Standalone = require('ioredis/built/connectors/StandaloneConnector').default;
  } catch {
    return undefined;
  }
  if (typeof Standalone !== 'function') return undefined;
  return class GuardedConnector extends Standalone {
    override connect(callback: unknown): Promise<unknown> {
      return super.connect(callback).then((stream) => {
        (stream as { on?: (event: string, listener: () => void) => unknown } | undefined)?.on?.('error', ignoreLaterError);
        return stream;
      });
    }
  };
}
