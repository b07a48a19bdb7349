import { Injectable } from '@nestjs/common';
import { WithSemaphore } from '../../lib';
import { ConcurrencyGauge, pause } from './concurrency-gauge';

/** The payment provider allows 4 calls at once per merchant, across every replica. */
export const PAYMENT_PROVIDER_LIMIT = 4;

@Injectable()
export class CheckoutService {
  readonly providerCalls = new ConcurrencyGauge();

  @WithSemaphore('payment-provider', PAYMENT_PROVIDER_LIMIT)
  async pay(order: string): Promise<string> {
    // The simulated provider call: long enough that four permits granted one after another
    // overlap even on a loaded machine.
    return this.providerCalls.around(async () => {
      await pause(50);
      return `paid ${order}`;
    });
  }
}
