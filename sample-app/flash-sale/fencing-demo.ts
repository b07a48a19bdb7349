import type { LockService } from '../../lib';
import { StaleFencingTokenError, type StockStore } from '../inventory/stock-store';

export interface FencingDemo {
  staleWriteRefused: boolean;
  /** The refused write's buyer is listed among the winners anyway: recorded outside the fenced write. */
  staleWinnerRecorded: boolean;
  staleToken: string;
  acceptedToken: string;
}

/**
 * What fencing tokens are for: a holder whose lease ran out (as after a long GC pause) still
 * tries its write after a newer holder wrote; the store refuses the lower token, and with it
 * the winner that write would have recorded.
 */
export async function demonstrateFencing(locks: LockService, store: StockStore, sku: string): Promise<FencingDemo> {
  const demoSku = `${sku}:fencing-demo`;
  await store.seed(demoSku, 1);
  const stale = await locks.acquire(`stock:${demoSku}`, { ttlMs: 500, renew: false });
  await new Promise<void>((resolve) => {
    const giveUp = setTimeout(resolve, 5_000);
    stale.signal.addEventListener('abort', () => (clearTimeout(giveUp), resolve()), { once: true });
  });
  const fresh = await locks.acquire(`stock:${demoSku}`);
  await store.write(demoSku, { stock: 0, lucky: 1, winner: 'fresh holder' }, fresh.fencingToken);
  await fresh.release();
  let staleWriteRefused = false;
  try {
    await store.write(demoSku, { stock: 0, lucky: 2, winner: 'stale holder' }, stale.fencingToken);
  } catch (error) {
    if (!(error instanceof StaleFencingTokenError)) throw error;
    staleWriteRefused = true;
  } finally {
    await stale.release();
  }
  return {
    staleWriteRefused,
    staleWinnerRecorded: (await store.winners(demoSku)).includes('stale holder'),
    staleToken: stale.fencingToken.toString(),
    acceptedToken: fresh.fencingToken.toString(),
  };
}
