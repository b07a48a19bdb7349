import type { TimedCommand } from './command-timeouts';

/** An ioredis Command, as our own connection sends them (see RedisConnections.runScript). */
export interface OwnCommand extends TimedCommand {
  readonly promise: Promise<unknown>;
  args: unknown[];
  resolve(value: unknown): void;
  /** ioredis' conversion of a raw reply (buffers) into what its promise resolves with. */
  transformReply(value: unknown): unknown;
}

export interface OwnCommandOptions {
  readonly replyEncoding: 'utf8';
  readonly keyPrefix?: string;
}

export type OwnCommandClass = new (name: string, args: (string | number)[], options: OwnCommandOptions) => OwnCommand;
export type EncodedCommandClass = new (name: string, args: (string | number)[], options: OwnCommandOptions, encoded: string) => OwnCommand;

const NO_WORDS: never[] = [];

/**
 * ioredis' Command, written as we encoded it (resp-encoding.ts): ioredis writes whatever a
 * command's toWritable returns, and its own Script subclasses Command the same way. The words
 * are handed to ioredis unflattened and unconverted: they are already what was encoded. Not for
 * a client with a keyPrefix, which ioredis applies while it encodes.
 */
export function encodedCommandClass(Command: OwnCommandClass): EncodedCommandClass {
  return class EncodedCommand extends Command {
    constructor(
      name: string,
      args: (string | number)[],
      options: OwnCommandOptions,
      private readonly encoded: string,
    ) {
      super(name, NO_WORDS, options);
      this.args = args;
    }

    toWritable(): string {
      return this.encoded;
    }
  };
}
