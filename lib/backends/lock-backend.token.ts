/** Injection token of the LockBackend the module built from its `backend` option. */
export const LOCK_BACKEND = Symbol('LOCK_BACKEND');
