import { execFile } from 'node:child_process';
import path from 'node:path';
import type { DoctorReport } from '../../lib';

/** The compiled CLI, as the package's bin entry points at it. */
const CLI = path.resolve(__dirname, '..', '..', 'lib', 'doctor', 'cli.js');

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** `nest-distributed-lock doctor <args>` in a child process, as a user runs it. */
export function runDoctorCli(args: string[], timeoutMs = 30_000): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'doctor', ...args], { timeout: timeoutMs }, (error, stdout, stderr) => {
      const code: unknown = error ? (error as { code?: unknown }).code : 0;
      resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
    });
  });
}

/** The CLI's --json report. */
export async function doctorJson(args: string[]): Promise<{ code: number | null; report: DoctorReport; stderr: string }> {
  const run = await runDoctorCli([...args, '--json']);
  let report: DoctorReport;
  try {
    report = JSON.parse(run.stdout) as DoctorReport;
  } catch {
    throw new Error(`the CLI printed no JSON report (exit ${run.code}):\n${run.stdout}\n${run.stderr}`);
  }
  return { code: run.code, report, stderr: run.stderr };
}

/** The checks found, as `check:severity`, sorted: what a test compares. */
export function findingsOf(report: DoctorReport): string[] {
  return report.findings.map((finding) => `${finding.check}:${finding.severity}`).sort();
}
