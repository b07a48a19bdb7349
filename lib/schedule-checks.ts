import { optionalPeer } from './backends/load-peer';

/** A decorated method with a minHoldMs, noted when its class is defined, checked once at boot. */
interface HeldMethod {
  readonly owner: object;
  readonly key: string | symbol;
  readonly method: string;
  readonly minHoldMs: number;
}

const heldMethods: HeldMethod[] = [];

/** @WithLock / @WithSemaphore with `minHoldMs` on `owner[key]`: checked against its schedule at boot. */
export function noteMinHold(owner: object, key: string | symbol, method: string, minHoldMs: number | undefined): void {
  if (minHoldMs !== undefined && minHoldMs > 0) heldMethods.push({ owner, key, method, minHoldMs });
}

/**
 * The run-once job that skips silently: a @Cron or @Interval method (@nestjs/schedule) whose
 * period is not longer than its minHoldMs finds its own lock still kept at the next tick, so
 * ticks are skipped. Warned once per method per process, at the first application's boot.
 */
export function warnShortSchedules(warn: (message: string) => void): void {
  for (const { owner, key, method, minHoldMs } of heldMethods.splice(0)) {
    const fn = (owner as Record<string | symbol, unknown>)[key];
    if (typeof fn !== 'function') continue;
    const schedule = scheduleOf(fn);
    if (!schedule || schedule.periodMs > minHoldMs) continue;
    warn(
      `${schedule.decorator} on ${method} fires every ${schedule.periodMs} ms, not longer than its minHoldMs (${minHoldMs} ms): ` +
        `the lock is still kept at the next tick, so ticks are skipped. Set minHoldMs below ${schedule.periodMs} ms (a little less than the period).`,
    );
  }
}

/** The shortest period of the method's @Cron or @Interval, read from @nestjs/schedule's metadata. */
function scheduleOf(fn: object): { decorator: string; periodMs: number } | undefined {
  const interval = Reflect.getMetadata?.('SCHEDULE_INTERVAL_OPTIONS', fn) as { timeout?: number } | undefined;
  if (typeof interval?.timeout === 'number') return { decorator: `@Interval(${interval.timeout})`, periodMs: interval.timeout };
  const cron = Reflect.getMetadata?.('SCHEDULE_CRON_OPTIONS', fn) as { cronTime?: unknown; timeZone?: string } | undefined;
  if (typeof cron?.cronTime !== 'string') return undefined;
  const periodMs = cronPeriodMs(cron.cronTime, cron.timeZone);
  return periodMs === undefined ? undefined : { decorator: `@Cron('${cron.cronTime}')`, periodMs };
}

type CronPackage = { CronTime: new (time: string, zone?: string) => { sendAt(count: number): { toMillis(): number }[] } };

/** `cron`, as this package or @nestjs/schedule (whose dependency it is) resolves it; undefined when neither can. */
function cronPackage(): CronPackage | undefined {
  const own = optionalPeer<CronPackage>('cron');
  if (own) return own;
  try {
    return require(require.resolve('cron', { paths: [require.resolve('@nestjs/schedule')] })) as CronPackage;
  } catch {
    return undefined;
  }
}

/** The shortest gap between the next few firings, by the `cron` package @nestjs/schedule runs on. */
function cronPeriodMs(expression: string, timeZone?: string): number | undefined {
  const cron = cronPackage();
  if (!cron) return undefined;
  try {
    const times = new cron.CronTime(expression, timeZone).sendAt(5).map((time) => time.toMillis());
    let shortest = Infinity;
    for (let i = 1; i < times.length; i++) shortest = Math.min(shortest, times[i] - times[i - 1]);
    return Number.isFinite(shortest) ? shortest : undefined;
  } catch {
    // An expression the scheduler itself will reject: not ours to report.
    return undefined;
  }
}
