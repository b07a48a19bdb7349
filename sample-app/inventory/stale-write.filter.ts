import { Catch, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { StaleFencingTokenError } from './stock-store';

/**
 * The store refused a stale holder's write (its fencing token is older than one it accepted):
 * 409, as a lost lock is. The lock's own errors are the library's LockExceptionFilter's.
 */
@Catch(StaleFencingTokenError)
export class StaleWriteFilter implements ExceptionFilter {
  catch(error: StaleFencingTokenError, host: ArgumentsHost): void {
    const status = HttpStatus.CONFLICT;
    const message = `${error.message}: a newer lock holder wrote first; read the stock before retrying.`;
    host.switchToHttp().getResponse<Response>().status(status).json({ statusCode: status, error: error.name, message });
  }
}
