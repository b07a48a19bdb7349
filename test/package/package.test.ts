import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { CONSUMER_APPS } from './package-apps';

const run = promisify(execFile);
const root = path.resolve(__dirname, '..', '..', '..');
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const npx = process.platform === 'win32' ? 'npx.cmd' : 'npx';

/** npm with the registry's answers cached (the project's own installs fill the cache). */
async function npmIn(cwd: string, args: string[]): Promise<string> {
  const { stdout } = await run(npm, [...args, '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'], { cwd, maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

describe('the published package: packed, installed into fresh apps, booted', { timeout: 600_000 }, () => {
  let scratch: string;
  let tarball: string;
  let files: string[];

  before(async () => {
    scratch = await mkdtemp(path.join(os.tmpdir(), 'lock-package-'));
    // Packed from a copy: `prepack` rebuilds dist/lib, which the running suite uses.
    const source = path.join(scratch, 'source');
    await mkdir(source);
    for (const entry of ['package.json', 'README.md', 'LICENSE', 'BENCHMARKS.md', 'tsconfig.json', 'tsconfig.build.json', 'docs', 'lib']) {
      await cp(path.join(root, entry), path.join(source, entry), { recursive: true });
    }
    await symlink(path.join(root, 'node_modules'), path.join(source, 'node_modules'), 'dir');
    const packed = JSON.parse(await npmIn(source, ['pack', '--json', '--pack-destination', scratch])) as Array<{ filename: string; files: Array<{ path: string }> }>;
    tarball = path.join(scratch, packed[0].filename);
    files = packed[0].files.map((file) => file.path);
  });
  after(async () => {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it('ships the build, its types, LICENSE and the docs the README links to; no source maps, no tests', async () => {
    for (const needed of ['LICENSE', 'README.md', 'package.json', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'dist/lib/doctor/cli.js']) assert.ok(files.includes(needed), `${needed} is not in the package`);
    assert.deepEqual(files.filter((file) => file.endsWith('.map')), [], 'source maps would point at sources that are not shipped');
    assert.deepEqual(files.filter((file) => /^(test|bench|sample-app|servers|scripts)\//.test(file)), []);
    const readme = await readFile(path.join(root, 'README.md'), 'utf8');
    const relativeLinks = [...readme.matchAll(/\]\(([^)#]+)(#[^)]*)?\)/g)].map((match) => match[1]).filter((link) => !/^[a-z]+:/.test(link));
    assert.ok(relativeLinks.length > 0);
    for (const link of relativeLinks) assert.ok(files.includes(link), `the README links to ${link}, which the package does not ship`);
    const types = await readFile(path.join(scratch, 'source', 'dist', 'lib', 'lock.service.d.ts'), 'utf8');
    assert.doesNotMatch(types, /forDecorator\(|runForDecorator\(/, 'internals must not be in the public types');
    // Every declaration file a user's compiler reads, from the entry along relative imports.
    const distLib = path.join(scratch, 'source', 'dist', 'lib');
    const reachable = new Set<string>();
    const visit = async (file: string): Promise<void> => {
      if (reachable.has(file)) return;
      reachable.add(file);
      const text = await readFile(file, 'utf8');
      assert.doesNotMatch(text, /from ['"](prom-client|@opentelemetry\/api|@nestjs\/terminus|@nestjs\/schedule|ioredis|etcd3|node-zookeeper-client)['"]/, `${path.relative(distLib, file)} imports an optional package`);
      for (const match of text.matchAll(/from ['"](\.[^'"]+)['"]/g)) await visit(path.resolve(path.dirname(file), `${match[1]}.d.ts`));
    };
    await visit(path.join(distLib, 'index.d.ts'));
    console.log(`${reachable.size} declaration files reachable from index.d.ts, none importing an optional package`);
  });

  for (const app of CONSUMER_APPS) {
    it(`${app.name}: installs the tarball, compiles against its types, boots on the memory backend and takes a lock through @WithLock`, async () => {
      const dir = path.join(scratch, app.name);
      await mkdir(path.join(dir, 'src'), { recursive: true });
      await writeFile(path.join(dir, 'package.json'), JSON.stringify(app.packageJson, null, 2));
      await writeFile(path.join(dir, 'tsconfig.json'), JSON.stringify(app.tsconfig, null, 2));
      await writeFile(path.join(dir, 'src', 'main.ts'), app.source);
      const started = performance.now();
      await npmIn(dir, ['install', tarball]);
      console.log(`${app.name}: npm install took ${Math.round(performance.now() - started)} ms`);
      const nest = (await run(process.execPath, ['-p', "require('@nestjs/core/package.json').version"], { cwd: dir })).stdout.trim();
      console.log(`${app.name}: @nestjs/core ${nest}`);
      await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: dir }).catch((error) => assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`));
      const { stdout } = await run(process.execPath, ['dist/main.js'], { cwd: dir });
      const result = JSON.parse(stdout.trim().split('\n').pop()!) as { first: string; second: string; timedOutIsTyped: boolean };
      assert.match(result.first, /^job:42 \d+ true$/);
      const [firstToken, secondToken] = [result.first, result.second].map((line) => BigInt(line.split(' ')[1]));
      assert.ok(secondToken > firstToken, 'fencing tokens increase');
      assert.equal(result.timedOutIsTyped, true, 'a busy lock rejects with the exported LockTimeoutError');
      // The exports map: the entry and package.json, not the internals.
      await run(process.execPath, ['-e', "require('nest-distributed-lock/package.json')"], { cwd: dir });
      await assert.rejects(run(process.execPath, ['-e', "require('nest-distributed-lock/dist/lib/lock-lease.js')"], { cwd: dir }), /ERR_PACKAGE_PATH_NOT_EXPORTED/);
      // The bin entry: `npx nest-distributed-lock doctor`, from the installed package only.
      const doctor = await run(npx, ['--offline', 'nest-distributed-lock', 'doctor', 'memory'], { cwd: dir });
      assert.match(doctor.stdout, /Lock doctor: memory backend\n {2}the memory backend is process-local/);
      // This app has no ioredis: the doctor says what to install (exit 3), not that the server is down.
      const noClient = await run(npx, ['--offline', 'nest-distributed-lock', 'doctor', 'redis://127.0.0.1:1'], { cwd: dir }).then(
        () => assert.fail('the doctor succeeded without ioredis'),
        (error: { code?: unknown; stderr?: string }) => error,
      );
      assert.equal(noClient.code, 3);
      assert.match(noClient.stderr ?? '', /needs the "ioredis" package: npm install ioredis/);
    });
  }
});
