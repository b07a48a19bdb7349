import type { EntryMode } from './lock-backend.interface';

/**
 * The one grant rule of every backend, over the entries ahead of an entry in its name's queue:
 * a write goes when none is ahead, a read when no write is ahead, a permit when fewer than
 * `limit` are ahead. Backends whose server evaluates it (a Lua script, a SQL statement) say the
 * same thing in the server's language.
 */
export function mayGo(mode: EntryMode, limit: number, ahead: number, writesAhead: number): boolean {
  if (mode === 'write') return ahead === 0;
  if (mode === 'read') return writesAhead === 0;
  return ahead < limit;
}
