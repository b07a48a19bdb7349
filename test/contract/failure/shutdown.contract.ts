import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { eventually, sleep } from '../../support/timing';
import { GRACE_MS, Services, describeError, settled, withinBound, type FailureContext } from './failure-target';

/** How long the in-flight request holds its lock; SIGTERM arrives in its middle. */
const HOLD_MS = 1_500;
/**
 * The background job's lease: at shutdown a holder keeps its lock until it releases or its lease
 * ends (renewal stops), so this bounds how long the job's lock outlives the shutdown.
 */
const JOB_TTL_MS = 2_000;
/** From the response to the waiter's grant, when the server pushes the release to the waiter. */
const HAND_ON_BOUND_MS = 1_000;
/** From SIGTERM to the process's end: the request's remaining time, the job's lease, and the close. */
const EXIT_BOUND_MS = HOLD_MS + JOB_TTL_MS + 3_000;

const worker = path.join(__dirname, '../../support/shutdown-app.worker.js');

/**
 * Contract point 8: an application with `enableShutdownHooks()` that gets SIGTERM while a request
 * holds a lock finishes the request, releases its lock once, hands it to a waiter in another
 * process promptly, and logs nothing at warn or error level. A background job still holding its
 * lock at shutdown is told it lost the lock ('backend-closed') when its lease ends (renewal
 * stops at shutdown), and that lock too is released once and handed on.
 */
export function shutdownCases(context: FailureContext): void {
  describe('SIGTERM with a request in flight (enableShutdownHooks)', () => {
    const services = new Services();
    let child: ChildProcess | undefined;

    after(async () => {
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child!.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
      await services.closeAll();
    });

    it('the request finishes, its lock is released once, a waiter in another process gets it promptly, nothing is logged at warn/error', { timeout: 40_000 }, async (t) => {
      const { backend } = context.target().direct;
      const name = context.newKey();
      const jobName = context.newKey();
      child = spawn(process.execPath, [worker], {
        env: {
          ...process.env,
          NO_COLOR: '1',
          SHUTDOWN_APP_LOCK: name,
          SHUTDOWN_APP_JOB_LOCK: jobName,
          SHUTDOWN_APP_JOB_TTL_MS: String(JOB_TTL_MS),
          SHUTDOWN_APP_HOLD_MS: String(HOLD_MS),
          // The test servers run without persistence on purpose: the doctor would warn of it, and
          // this app must log nothing at warn. The doctor has its own tests (test/doctor).
          SHUTDOWN_APP_MODULE_OPTIONS: JSON.stringify({ backend, doctor: 'off' }),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child!.once('exit', (code, signal) => resolve({ code, signal })),
      );
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (chunk) => (stdout += chunk));
      child.stderr!.on('data', (chunk) => (stderr += chunk));
      const probes = () => stdout.split('\n').filter((line) => line.startsWith('[probe] '));
      await eventually(() => probes().some((line) => line.startsWith('[probe] listening ')), 30_000, () => `the app to listen; its output: ${stdout}${stderr}`, 20);
      const port = Number(probes().find((line) => line.startsWith('[probe] listening '))!.split(' ')[2]);

      const response = get(port, '/work');
      response.catch(() => undefined); // awaited below
      await eventually(
        () => probes().includes('[probe] entered') && probes().includes('[probe] job entered'),
        10_000,
        () => `the request and the job to take their locks; the app's output: ${stdout}${stderr}`,
        5,
      );
      const waiter = await services.add({ backend });
      let jobGrantedAt = Infinity;
      const jobWaiting = waiter.acquire(jobName, { waitTimeoutMs: 20_000 }).then((lock) => {
        jobGrantedAt = performance.now();
        return lock;
      });
      jobWaiting.catch(() => undefined); // awaited below
      let grantedAt = Infinity;
      const waiting = waiter.acquire(name, { waitTimeoutMs: 20_000 }).then((lock) => {
        grantedAt = performance.now();
        return lock;
      });
      waiting.catch(() => undefined); // awaited below; a rejection before then is not unhandled
      await sleep(200);
      assert.equal(grantedAt, Infinity, 'the waiter got the lock while the request held it');
      assert.equal(jobGrantedAt, Infinity, "the job's waiter got the lock while the job held it");
      const terminatedAt = performance.now();
      child.kill('SIGTERM');

      const answered = await settled(response, terminatedAt, EXIT_BOUND_MS);
      const respondedAt = performance.now();
      const granted = await settled(waiting, respondedAt, HAND_ON_BOUND_MS + GRACE_MS);
      const jobGranted = await settled(jobWaiting, respondedAt, JOB_TTL_MS + HAND_ON_BOUND_MS + GRACE_MS);
      const { code, signal } = await Promise.race([exited, sleep(EXIT_BOUND_MS).then(() => ({ code: null, signal: null }))]);
      const exitedAfterMs = performance.now() - terminatedAt;

      t.diagnostic(`response: ${answered.error ? describeError(answered.error) : JSON.stringify(answered.value)}`);
      t.diagnostic(`waiter: ${describeError(granted.error ?? `granted token ${granted.value?.fencingToken}`)}; exit: code ${code}, signal ${signal}`);
      t.diagnostic(`the job's waiter: ${describeError(jobGranted.error ?? `granted token ${jobGranted.value?.fencingToken}`)}`);
      t.diagnostic(`the app's output:\n${stdout}${stderr}`);
      assert.equal(answered.error, undefined, 'the request in flight did not finish');
      assert.equal(answered.value!.status, 200, `the request in flight answered ${answered.value!.status}: ${answered.value!.body}`);
      assert.equal(granted.error, undefined, "the waiter in another process did not get the lock");
      const requestToken = BigInt(JSON.parse(answered.value!.body).fencingToken);
      if (context.options.fencing !== false) assert.ok(granted.value!.fencingToken > requestToken);
      await granted.value!.release();
      assert.equal(jobGranted.error, undefined, "the waiter in another process did not get the job's lock");
      await jobGranted.value!.release();

      for (const lock of [name, jobName]) {
        const releases = probes().filter((line) => line.startsWith('[probe] release ') && line.endsWith(lock));
        assert.equal(releases.length, 1, `${lock} was released ${releases.length} times: ${releases.join('; ')}`);
      }
      assert.ok(probes().includes('[probe] job ended with LockLostError backend-closed'), "the job was not told it lost its lock with reason 'backend-closed'");
      const loud = `${stdout}\n${stderr}`.split('\n').filter((line) => /\b(WARN|ERROR|FATAL)\b/.test(line));
      assert.deepEqual(loud, [], 'the app logged at warn/error level');
      assert.equal(stderr, '', 'the app wrote to stderr');
      assert.ok(code === 0 || signal === 'SIGTERM', `the app ended with code ${code}, signal ${signal}`);
      // The lock is released before the response is sent: the waiter is granted by then, or soon after.
      const handOnBound = context.options.nativeWait === false ? 5_000 : HAND_ON_BOUND_MS;
      withinBound(t, 'waiter granted after the response', grantedAt - respondedAt, handOnBound);
      // The job's lock goes when its lease ends, counted at most from the shutdown, which follows the response.
      withinBound(t, "job's waiter granted after the response", jobGrantedAt - respondedAt, JOB_TTL_MS + handOnBound);
      withinBound(t, 'the app exited after SIGTERM', exitedAfterMs, EXIT_BOUND_MS);
    });
  });
}

/** A GET on its own connection (no keep-alive, so the server's close waits on nothing else). */
function get(port: number, urlPath: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: urlPath, headers: { connection: 'close' }, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
