import type { Pool, PoolClient, QueryConfig } from 'pg';

/** pg's Client.query as a hook sees it: promise form, or with the callback pg-pool's query passes. */
export type ClientQuery = (config: string | QueryConfig, values?: unknown, callback?: unknown) => unknown;

/**
 * Replaces `query` of each connection of `pool` with `hook(query)`, once per connection, as it is
 * first checked out. The backend sends statements through pool.query or on a connection it keeps
 * between back-to-back statements; both run on a pooled connection's own query.
 */
export function hookPooledQueries(pool: Pool, hook: (query: ClientQuery) => ClientQuery): void {
  const hooked = new WeakSet<PoolClient>();
  pool.on('acquire', (client) => {
    if (hooked.has(client)) return;
    hooked.add(client);
    (client as unknown as { query: ClientQuery }).query = hook(client.query.bind(client) as ClientQuery);
  });
}
