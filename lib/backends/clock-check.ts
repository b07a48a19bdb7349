import type { Diagnosis } from './backend-doctor';
import { driftAllowanceMs } from '../lock-defaults';

/**
 * The server's wall clock against ours, from one request that read it (Redis TIME, PostgreSQL
 * clock_timestamp()): the server read it between `sentAt` and `receivedAt` (our Date.now()), so
 * the clocks are at least `|offset| - half the round trip` apart. A lease is timed by both clocks
 * (the server expires it, we stop trusting it at our local deadline), and the library allows
 * their rates to differ by the drift allowance (1% of ttlMs + 2 ms). Wall clocks that far apart
 * mean at least one is not synchronised, and a clock nobody synchronises runs at its own rate too.
 */
export function checkClock(diagnosis: Diagnosis, server: string, serverMs: number, sentAt: number, receivedAt: number, ttlMs: number): void {
  const halfTripMs = (receivedAt - sentAt) / 2;
  const offsetMs = serverMs - (sentAt + halfTripMs);
  const apartMs = Math.max(0, Math.abs(offsetMs) - halfTripMs);
  const allowanceMs = driftAllowanceMs(ttlMs);
  const ahead = `the server's clock is ${Math.round(Math.abs(offsetMs))} ms ${offsetMs > 0 ? 'ahead of' : 'behind'} ours (±${Math.ceil(halfTripMs)} ms)`;
  if (apartMs <= allowanceMs) return diagnosis.pass(server, `clock: ${ahead}, within the drift allowance of ${allowanceMs} ms for ttlMs ${ttlMs}`);
  diagnosis.find({
    check: 'clock',
    severity: 'warning',
    server,
    found: ahead,
    consequence:
      `more than the drift allowance (1% of ttlMs + 2 ms = ${allowanceMs} ms): at least one clock is not synchronised, and an unsynchronised clock ` +
      'also runs at its own rate, so a lease can end on the server before our local deadline for it (two holders), or later (a dead holder blocks longer)',
    fix: 'run NTP (chrony, systemd-timesyncd) on this host and on the server host; a clock that slews more than 1% cannot be allowed for',
  });
}
