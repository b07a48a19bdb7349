import type { BackendSettings } from '../backends/backend-definition';
import type { DoctorFinding, DoctorReport } from '../backends/backend-doctor';
import { backendDefinition, type BackendOptions } from '../backends/registry';

export type { DoctorFinding, DoctorReport, DoctorSeverity } from '../backends/backend-doctor';

/**
 * The lock doctor: the checks of the backend `options` names (its definition's `doctor`), after
 * the same validation the module does, so a typo is a LockConfigError before any connection.
 */
export async function runDoctor(options: BackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const definition = backendDefinition(options);
  definition.validate(options);
  return definition.doctor(options, settings);
}

/** The CLI's exit status: 2 when a server could not be reached, 1 with any finding, 0 when clean. */
export function doctorExitCode(report: DoctorReport): 0 | 1 | 2 {
  if (report.unreachable.length > 0) return 2;
  return report.findings.length > 0 ? 1 : 0;
}

/** One finding on one line, as the boot log and the CLI show it. */
export function findingLine(finding: DoctorFinding): string {
  return `[${finding.severity}] ${finding.check} on ${finding.server}: ${finding.found}. Consequence: ${finding.consequence}. Fix: ${finding.fix}.`;
}
