/** The consumer apps the package test installs the packed tarball into: one ESM on Nest 12, one CommonJS on Nest 11. */

export interface ConsumerApp {
  readonly name: string;
  readonly packageJson: object;
  readonly tsconfig: object;
  readonly source: string;
}

/** The same app for both: @WithLock on a provider, the memory backend, the public types only. */
function appSource(esm: boolean): string {
  return `import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockService, WithLock, currentLock, LockTimeoutError } from 'nest-distributed-lock';

@Injectable()
class Job {
  @WithLock('job:<0>', { waitTimeoutMs: 50 })
  async run(id: string): Promise<string> {
    const lock = currentLock()!;
    return lock.key + ' ' + lock.fencingToken + ' ' + lock.isHeld;
  }
}

@Module({ imports: [DistributedLockModule.forRoot()], providers: [Job] })
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const first = await app.get(Job).run('42');
  const second = await app.get(Job).run('42');
  const busy = await app.get(LockService).acquire('job:42');
  const timedOut = await app.get(Job).run('42').catch((error: unknown) => error instanceof LockTimeoutError);
  await busy.release();
  // @ts-expect-error LockService.forDecorator is an internal, not in the public types
  void LockService.forDecorator;
  await app.close();
  console.log(JSON.stringify({ first, second, timedOutIsTyped: timedOut }));
}

${esm ? 'await main();' : 'void main();'}
`;
}

const compilerOptions = {
  target: 'ES2022',
  strict: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  skipLibCheck: true,
  outDir: 'dist',
  rootDir: 'src',
  types: [],
  // console, without @types/node
  lib: ['ES2022', 'DOM'],
};

export const CONSUMER_APPS: ConsumerApp[] = [
  {
    name: 'nest12-esm',
    packageJson: {
      name: 'consumer-esm',
      private: true,
      type: 'module',
      dependencies: { '@nestjs/common': '^12.0.0', '@nestjs/core': '^12.0.0', 'reflect-metadata': '^0.2.2', rxjs: '^7.8.0' },
    },
    tsconfig: { compilerOptions: { ...compilerOptions, module: 'nodenext', moduleResolution: 'nodenext' }, include: ['src'] },
    source: appSource(true),
  },
  {
    name: 'nest11-commonjs',
    packageJson: {
      name: 'consumer-cjs',
      private: true,
      dependencies: { '@nestjs/common': '^11.0.0', '@nestjs/core': '^11.0.0', 'reflect-metadata': '^0.2.2', rxjs: '^7.8.0' },
    },
    tsconfig: { compilerOptions: { ...compilerOptions, module: 'commonjs', moduleResolution: 'node10' }, include: ['src'] },
    source: appSource(false),
  },
];
