/**
 * The inventory app over HTTP: `npm run start:http -- [--backend B] [--port P]`.
 *   PUT  /inventory/:sku      {"stock": 300}   seed (stock, lucky counter and winners start over)
 *   POST /inventory/:sku/buy  {"user": "ann"}  201 won, 410 sold out, 423 busy, 409 lock lost or stale write,
 *                                              503 lock server down, 400 blank sku or user
 *   GET  /inventory/:sku                       {"stock", "lucky", "winners": ["ann", ...]}
 *   GET  /health                               200 up / 503 down (terminus), with the lock backend's round trip
 *   GET  /metrics                              Prometheus text: distributed_lock_* metrics
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module';
import { sampleBackend } from './backends';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const flag = (name: string, fallback: string) => {
    const index = args.indexOf(name);
    return index === -1 ? fallback : args[index + 1];
  };
  const backend = sampleBackend(flag('--backend', 'memory'));
  const server = await backend.provision();
  const store = await backend.stockStore(server.connection);
  const app = await NestFactory.create(AppModule.register(backend.lockBackend(server.connection), store));
  app.enableShutdownHooks();
  await app.listen(Number(flag('--port', '3000')), '127.0.0.1');
  console.log(`inventory app on ${await app.getUrl()}`);
  process.once('SIGINT', () => void app.close().then(() => store.close()).then(() => server.stop()));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
