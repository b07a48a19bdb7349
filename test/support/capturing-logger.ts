import type { LoggerService } from '@nestjs/common';

export interface LogEntry {
  level: string;
  message: string;
  context?: string;
  /** performance.now() when it was logged. */
  at: number;
}

/** Keeps what the application logs, to check what a user would read. */
export class CapturingLogger implements LoggerService {
  readonly entries: LogEntry[] = [];
  log = (message: unknown, context?: string) => this.keep('log', message, context);
  error = (message: unknown, ...rest: unknown[]) => this.keep('error', message, rest[rest.length - 1] as string);
  warn = (message: unknown, context?: string) => this.keep('warn', message, context);
  debug = (message: unknown, context?: string) => this.keep('debug', message, context);
  verbose = (message: unknown, context?: string) => this.keep('verbose', message, context);
  fatal = (message: unknown, context?: string) => this.keep('fatal', message, context);

  private keep(level: string, message: unknown, context?: string): void {
    this.entries.push({ level, message: String(message), context, at: performance.now() });
  }
}
