import { Catch, HttpStatus, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DistributedLockError, LockBackendError, LockConfigError, LockKeyError, LockLostError, LockTimeoutError } from '../errors';

/** The JSON body LockExceptionFilter answers with. */
export interface LockErrorBody {
  statusCode: number;
  /** The error's class name: 'LockTimeoutError', ... */
  error: string;
  /** The lock's name, when the error knows it. */
  lock?: string;
  /** What happened and what the client can do. */
  message: string;
}

/** Seconds a client should wait before retrying a busy lock or an unreachable lock server. */
const RETRY_AFTER_SECONDS = 1;

const logger = new Logger('DistributedLock');

/**
 * Maps the library's errors to HTTP answers, opt-in (`app.useGlobalFilters(new
 * LockExceptionFilter(app.get(HttpAdapterHost)))` or `{ provide: APP_FILTER, useClass:
 * LockExceptionFilter }`), on Express or Fastify:
 * - 423 Locked + Retry-After: LockTimeoutError, the lock stayed busy past waitTimeoutMs;
 * - 409 Conflict: LockLostError, the lock was lost mid-operation (its writes may have landed);
 * - 400 Bad Request: LockKeyError, the request's parameters make no lock name;
 * - 503 Service Unavailable + Retry-After: LockBackendError, the lock server cannot be reached
 *   (the body leaves out the server's address; the full error is logged);
 * - 500: any other DistributedLockError (a configuration or programming error), logged too.
 */
@Catch(DistributedLockError)
export class LockExceptionFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: DistributedLockError, host: ArgumentsHost): void {
    const { status, body } = lockErrorResponse(error);
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse();
    if (status === HttpStatus.LOCKED || status === HttpStatus.SERVICE_UNAVAILABLE) adapter.setHeader(response, 'Retry-After', String(RETRY_AFTER_SECONDS));
    if (status >= 500) logger.warn(`${error.name} answered ${status}: ${error.message}`);
    adapter.reply(response, body, status);
  }
}

/** The status and body for a lock error: what the filter answers, usable outside HTTP too. */
export function lockErrorResponse(error: DistributedLockError): { status: number; body: LockErrorBody } {
  const answer = (status: number, message: string, lock?: string) => ({
    status,
    body: { statusCode: status, error: error.name, ...(lock === undefined ? {} : { lock }), message },
  });
  if (error instanceof LockTimeoutError) {
    return answer(HttpStatus.LOCKED, `The resource is busy (lock "${error.lockName}"); retry after ${RETRY_AFTER_SECONDS} s.`, error.lockName);
  }
  if (error instanceof LockLostError) {
    return answer(
      HttpStatus.CONFLICT,
      `The lock "${error.lockName}" was lost before the operation finished (${error.reason}); it may or may not have taken effect: read the resource before retrying.`,
      error.lockName,
    );
  }
  if (error instanceof LockKeyError) {
    return answer(HttpStatus.BAD_REQUEST, `The request's parameters make no valid lock name: ${error.message}`);
  }
  if (error instanceof LockBackendError) {
    return answer(HttpStatus.SERVICE_UNAVAILABLE, `The lock server (${error.backend}) could not be reached; retry after ${RETRY_AFTER_SECONDS} s.`);
  }
  const problem = error instanceof LockConfigError ? 'The lock is misconfigured' : 'The lock could not be used';
  return answer(HttpStatus.INTERNAL_SERVER_ERROR, `${problem}; the server's log has the details.`);
}
