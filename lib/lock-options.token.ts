/** Injection token of the validated module options (ResolvedModuleOptions). */
export const RESOLVED_LOCK_OPTIONS = Symbol('RESOLVED_LOCK_OPTIONS');
