import { Body, Controller, Get, HttpCode, HttpException, HttpStatus, Param, Post, Put } from '@nestjs/common';
import { InventoryService } from './inventory.service';

/**
 * The `:sku` route parameter without surrounding blanks, so ` pear` is `pear`. A blank sku is
 * then empty, and the lock refuses to build `stock:` from it (LockKeyError, answered 400).
 */
const Sku = () => Param('sku', { transform: (sku: string) => sku.trim() });

@Controller('inventory')
export class InventoryController {
  constructor(private readonly inventory: InventoryService) {}

  @Get(':sku')
  stock(@Sku() sku: string) {
    return this.inventory.stockOf(sku);
  }

  @Put(':sku')
  @HttpCode(HttpStatus.NO_CONTENT)
  async seed(@Sku() sku: string, @Body() body: { stock?: unknown }) {
    if (!Number.isInteger(body?.stock) || (body.stock as number) < 0) {
      throw new HttpException('body.stock must be a whole number of 0 or more', HttpStatus.BAD_REQUEST);
    }
    await this.inventory.seed(sku, body.stock as number);
  }

  @Post(':sku/buy')
  async buy(@Sku() sku: string, @Body() body: { user?: unknown }) {
    const user = body?.user ?? 'anonymous';
    // The name is recorded among the winners: it must be one.
    if (typeof user !== 'string' || user === '') throw new HttpException('body.user must be a non-empty string', HttpStatus.BAD_REQUEST);
    const { won } = await this.inventory.buy(sku, user);
    if (!won) throw new HttpException(`"${sku}" is sold out`, HttpStatus.GONE);
    return { sku, won };
  }
}
