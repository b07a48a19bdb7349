import type { InventoryService } from '../inventory/inventory.service';

export interface BuyerResults {
  /** The buyers who were told they got one. */
  winners: string[];
  losers: number;
  /** Time from a buyer's arrival to entering the critical section, in ms. */
  waitsMs: number[];
  /** Failed purchases by error name (e.g. LockTimeoutError). */
  errors: Record<string, number>;
}

/** Fires every buyer at once and waits for all of them; a failed purchase is not a win. */
export async function runBuyers(inventory: InventoryService, sku: string, users: string[], useLock: boolean): Promise<BuyerResults> {
  const results: BuyerResults = { winners: [], losers: 0, waitsMs: [], errors: {} };
  await Promise.all(
    users.map(async (user) => {
      const arrived = performance.now();
      try {
        const purchase = useLock ? await inventory.buy(sku, user) : await inventory.buyWithoutLock(sku, user);
        results.waitsMs.push(purchase.enteredAt - arrived);
        if (purchase.won) results.winners.push(user);
        else results.losers++;
      } catch (error) {
        const name = (error as Error).name ?? 'Error';
        results.errors[name] = (results.errors[name] ?? 0) + 1;
      }
    }),
  );
  return results;
}

export function mergeResults(all: BuyerResults[]): BuyerResults {
  const merged: BuyerResults = { winners: [], losers: 0, waitsMs: [], errors: {} };
  for (const part of all) {
    merged.winners.push(...part.winners);
    merged.losers += part.losers;
    merged.waitsMs.push(...part.waitsMs);
    for (const [name, count] of Object.entries(part.errors)) merged.errors[name] = (merged.errors[name] ?? 0) + count;
  }
  return merged;
}

/** Which buyers (by global index) process `index` of `processes` runs. */
export function usersOf(index: number, processes: number, buyers: number): string[] {
  const users: string[] = [];
  for (let i = index; i < buyers; i += processes) users.push(`buyer-${i}`);
  return users;
}
