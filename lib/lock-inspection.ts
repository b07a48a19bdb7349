import type { LockHolder, LockInspection } from './backends/lock-backend.interface';

/** What LockService.inspect resolves to: the backend's view of the lock `name`, with a JSON form. */
export type LockInspectionResult = { readonly name: string } & LockInspection & {
  /** JSON has no bigint: JSON.stringify (and so a Nest controller) shows fencing tokens as decimal strings. */
  toJSON(): LockInspectionJson;
};

/** A holder as JSON: its fencing token as a decimal string (a number would lose digits). */
export type LockHolderJson = Omit<LockHolder, 'fencingToken'> & { readonly fencingToken: string };

/** An inspection as JSON (see LockInspectionResult.toJSON). */
export type LockInspectionJson = { readonly name: string } & Omit<LockInspection, 'holder' | 'holders'> & {
  readonly holder?: LockHolderJson;
  readonly holders?: readonly LockHolderJson[];
};

/** The result of inspect(`name`), with a toJSON that is not enumerable (spreads and deepEqual see the data alone). */
export function inspectionResult(name: string, inspection: LockInspection): LockInspectionResult {
  const result = { name, ...inspection };
  Object.defineProperty(result, 'toJSON', { value: () => inspectionJson(result), enumerable: false });
  return result as LockInspectionResult;
}

function inspectionJson(result: { readonly name: string } & LockInspection): LockInspectionJson {
  const { holder, holders, ...rest } = result;
  return {
    ...rest,
    ...(holder ? { holder: holderJson(holder) } : {}),
    ...(holders ? { holders: holders.map(holderJson) } : {}),
  };
}

function holderJson(holder: LockHolder): LockHolderJson {
  return { ...holder, fencingToken: holder.fencingToken.toString() };
}
