/**
 * What a backend offers beyond mutual exclusion, so that each contract suite tests a backend for
 * what it honestly offers. Every flag defaults to true: a backend opts out, and says why.
 */
export interface BackendCapabilities {
  /** Waiters are granted in the order they queued, across clients. */
  fifo?: boolean;
  /** Fencing tokens strictly increase over the grants of a key, across clients. */
  fencing?: boolean;
  /** A waiter is woken by the server (push) when the lock is freed, not by polling on a timer. */
  nativeWait?: boolean;
  /** Read locks and semaphores (LockBackend.modes lists 'read' and 'permit'). */
  modes?: boolean;
}

/** `false` for a capability the backend offers, else the reason node:test shows for the skip. */
export function unless(capabilities: BackendCapabilities, capability: keyof BackendCapabilities): false | string {
  return capabilities[capability] === false ? `the backend does not offer ${capability}` : false;
}
