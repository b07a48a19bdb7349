import { Catch, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { DistributedLockError, LockBackendError, LockKeyError, LockLostError, LockTimeoutError } from '../../lib';
import { StaleFencingTokenError } from './stock-store';

/**
 * Lock errors become HTTP answers here, in the app: the library throws typed errors and knows
 * nothing of HTTP. 423 = busy, try again; 409 = the lock was lost mid-purchase (its write may or
 * may not have landed) or the store refused a stale holder's write; 503 = the lock server is
 * unreachable; 400 = the sku makes no lock name.
 */
@Catch(DistributedLockError, StaleFencingTokenError)
export class LockExceptionFilter implements ExceptionFilter {
  catch(error: Error, host: ArgumentsHost): void {
    const status =
      error instanceof LockKeyError
        ? HttpStatus.BAD_REQUEST
        : error instanceof LockTimeoutError
          ? HttpStatus.LOCKED
          : error instanceof LockLostError || error instanceof StaleFencingTokenError
            ? HttpStatus.CONFLICT
            : error instanceof LockBackendError
              ? HttpStatus.SERVICE_UNAVAILABLE
              : HttpStatus.INTERNAL_SERVER_ERROR;
    const response = host.switchToHttp().getResponse<Response>();
    if (status === HttpStatus.LOCKED) response.setHeader('Retry-After', '1');
    response.status(status).json({ statusCode: status, error: error.name, message: error.message });
  }
}
