/** Where the backend keeps its locks: `schema`.`table`, and the objects named after the table. */
export interface PostgresNames {
  readonly schema: string;
  readonly table: string;
}

export const DEFAULT_NAMES: PostgresNames = { schema: 'public', table: 'distributed_locks' };

/** The SQL names of every object, quoted: derived from the table so that two tables never share one. */
export function sqlNames({ schema, table }: PostgresNames) {
  const name = (suffix: string) => `"${schema}"."${table}${suffix}"`;
  return {
    locks: name(''),
    queue: name('_queue'),
    fence: name('_fence'),
    /** For nextval(): a string literal naming the sequence. */
    fenceLiteral: `'${name('_fence').replace(/'/g, "''")}'`,
    grantNext: name('_grant_next'),
    acquire: name('_acquire'),
    release: name('_release'),
    holders: name('_holders'),
    clients: name('_clients'),
    hold: name('_hold'),
    admit: name('_admit'),
    settle: name('_settle'),
    acquireShared: name('_acquire_shared'),
    releaseShared: name('_release_shared'),
    renewShared: name('_renew_shared'),
    forceRelease: name('_force_release'),
  };
}
