import { LockConfigError } from '../errors';
import { rejectUnknownFields } from '../option-checks';

/** A backend's options may hold `type` and `allowed`, nothing else. */
export function allowOnlyFields(backendType: string, options: object, allowed: readonly string[]): void {
  rejectUnknownFields(options, ['type', ...allowed], `a ${backendType} backend`, 'backend.');
}

/**
 * A supplied client is used as it is, so it excludes the fields that would build one; and it
 * must have the methods the backend calls (duck-typed, so the published types never import
 * the optional client library).
 */
export function checkSuppliedClient(
  options: Record<string, unknown>,
  buildFields: readonly string[],
  methods: readonly string[],
  what: string,
  /** The option that holds the client: 'client', or 'pool' for PostgreSQL. */
  field = 'client',
): void {
  const client = options[field];
  if (client === undefined) return;
  const clashing = buildFields.filter((name) => options[name] !== undefined);
  if (clashing.length > 0) {
    throw new LockConfigError(`backend.${field}`, `give either ${field} or ${clashing.join('/')}, not both: a supplied client is used as it is.`);
  }
  const candidate = client as Record<string, unknown> | null;
  if (typeof candidate !== 'object' || candidate === null || !methods.every((method) => typeof candidate[method] === 'function')) {
    throw new LockConfigError(`backend.${field}`, `must be ${what}.`);
  }
}
