import { Body, Controller, Get, HttpCode, HttpException, HttpStatus, Param, Post, Put } from '@nestjs/common';
import { InventoryService } from './inventory.service';

@Controller('inventory')
export class InventoryController {
  constructor(private readonly inventory: InventoryService) {}

  @Get(':sku')
  stock(@Param('sku') sku: string) {
    return this.inventory.stockOf(sku);
  }

  @Put(':sku')
  @HttpCode(HttpStatus.NO_CONTENT)
  async seed(@Param('sku') sku: string, @Body() body: { stock?: unknown }) {
    if (!Number.isInteger(body?.stock) || (body.stock as number) < 0) {
      throw new HttpException('body.stock must be a whole number of 0 or more', HttpStatus.BAD_REQUEST);
    }
    await this.inventory.seed(sku, body.stock as number);
  }

  @Post(':sku/buy')
  async buy(@Param('sku') sku: string, @Body() body: { user?: string }) {
    const { won } = await this.inventory.buy(sku, body?.user ?? 'anonymous');
    if (!won) throw new HttpException(`"${sku}" is sold out`, HttpStatus.GONE);
    return { sku, won };
  }
}
