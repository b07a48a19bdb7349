import { LockConfigError } from '../errors';

/**
 * The lock doctor's vocabulary, shared by the per-backend checks (`<backend>-doctor.ts`) and the
 * CLI and boot check that run them (lib/doctor/). Here, the lowest file that needs it, so that
 * backends and lib/doctor import it without importing each other.
 */

/**
 * - 'error': locks can be lost, or held by two at once, on a bad day this setting allows;
 * - 'warning': a narrower window, or a promise weakened rather than broken;
 * - 'unchecked': the server would not let a client read this: it is not known to be right.
 */
export type DoctorSeverity = 'error' | 'warning' | 'unchecked';

/** One thing the doctor found about a server's configuration. */
export interface DoctorFinding {
  /** A short stable name: 'maxmemory-policy', 'appendfsync', 'etcd-11456', 'session-timeout'. */
  readonly check: string;
  readonly severity: DoctorSeverity;
  /** The server it is about, as errors name it ('127.0.0.1:6379'). */
  readonly server: string;
  /** What the server said: 'maxmemory-policy is allkeys-lru'. */
  readonly found: string;
  /** What it means for locks. */
  readonly consequence: string;
  /** The exact setting to change (or, for 'unchecked', how to check it yourself). */
  readonly fix: string;
}

/** What the doctor found about one backend's servers. */
export interface DoctorReport {
  readonly backend: string;
  /** The server(s), as errors name them; omitted for an in-process backend. */
  readonly address?: string;
  /** Checks made and found right: 'maxmemory-policy is noeviction (127.0.0.1:6379)'. */
  readonly passed: readonly string[];
  readonly findings: readonly DoctorFinding[];
  /** Servers that could not be asked at all, with the client's error. */
  readonly unreachable: readonly { readonly server: string; readonly error: string }[];
  /** What the servers are (versions, roles, ids), for the reader: no verdict. */
  readonly notes: readonly string[];
}

/** Collects one run's results; the per-backend checks fill it, `report()` hands it out. */
export class Diagnosis {
  private readonly passedChecks: string[] = [];
  private readonly found: DoctorFinding[] = [];
  private readonly down: { server: string; error: string }[] = [];
  private readonly noted: string[] = [];

  constructor(
    readonly backend: string,
    readonly address?: string,
  ) {}

  pass(server: string, what: string): void {
    this.passedChecks.push(`${what} (${server})`);
  }

  find(finding: DoctorFinding): void {
    this.found.push(finding);
  }

  /** A check the server refused to answer: reported, never passed. */
  unchecked(check: string, server: string, why: string, howToCheck: string, consequence: string): void {
    this.find({ check, severity: 'unchecked', server, found: `could not check ${check}: ${why}`, consequence, fix: howToCheck });
  }

  /** A server that could not be asked. A LockConfigError (a client library not installed) is rethrown: no server is at fault. */
  unreachable(server: string, error: unknown): void {
    if (error instanceof LockConfigError) throw error;
    this.down.push({ server, error: error instanceof Error ? error.message : String(error) });
  }

  note(line: string): void {
    this.noted.push(line);
  }

  report(): DoctorReport {
    return {
      backend: this.backend,
      ...(this.address !== undefined ? { address: this.address } : {}),
      passed: this.passedChecks,
      findings: this.found,
      unreachable: this.down,
      notes: this.noted,
    };
  }
}
