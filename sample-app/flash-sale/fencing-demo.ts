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
  const steps = new DemoSteps(`stock:${demoSku}`);
  await store.seed(demoSku, 1);
  const stale = await steps.step('the stale holder acquires', () => locks.acquire(`stock:${demoSku}`, { ttlMs: 500, renew: false }));
  const lostBy = await lossOf(stale.signal, 5_000);
  const fresh = await steps.step(`a fresh holder acquires (the stale lease ${lostBy})`, () => locks.acquire(`stock:${demoSku}`));
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

/** Resolves once `signal` fires (at once if it already has), or after `giveUpMs`: how it ended, for the report of a failure. */
function lossOf(signal: AbortSignal, giveUpMs: number): Promise<string> {
  const started = performance.now();
  if (signal.aborted) return Promise.resolve('was already lost');
  return new Promise((resolve) => {
    const giveUp = setTimeout(() => resolve(`was not reported lost within ${giveUpMs} ms`), giveUpMs);
    signal.addEventListener('abort', () => (clearTimeout(giveUp), resolve(`was lost after ${Math.round(performance.now() - started)} ms`)), { once: true });
  });
}

/** The demo's steps, timed: a step that fails says which it was and when, since the demo runs at the end of every sale. */
class DemoSteps {
  private readonly started = performance.now();

  constructor(private readonly name: string) {}

  async step<T>(what: string, run: () => Promise<T>): Promise<T> {
    const at = performance.now();
    try {
      return await run();
    } catch (error) {
      const since = (from: number) => Math.round(performance.now() - from);
      throw new Error(`The fencing demo on "${this.name}" failed where ${what}, after ${since(at)} ms (${since(this.started)} ms into the demo): ${(error as Error).message}`, { cause: error });
    }
  }
}
