import type { DoctorReport } from '../backends/backend-doctor';

/** The CLI's human-readable report: what the servers are, what is wrong and what to set, what passed. */
export function doctorText(report: DoctorReport): string {
  const lines = [`Lock doctor: ${report.backend} backend${report.address ? ` at ${report.address}` : ''}`];
  for (const note of report.notes) lines.push(`  ${note}`);
  for (const { server, error } of report.unreachable) lines.push('', `UNREACHABLE ${server}: ${error}`);
  for (const finding of report.findings) {
    lines.push(
      '',
      `${finding.severity.toUpperCase()} ${finding.check} (${finding.server})`,
      `  found:       ${finding.found}`,
      `  consequence: ${finding.consequence}`,
      `  fix:         ${finding.fix}`,
    );
  }
  if (report.passed.length > 0) lines.push('', 'passed:', ...report.passed.map((line) => `  ok ${line}`));
  const errors = report.findings.filter((finding) => finding.severity === 'error').length;
  const unchecked = report.findings.filter((finding) => finding.severity === 'unchecked').length;
  lines.push(
    '',
    report.unreachable.length > 0
      ? `${report.unreachable.length} server(s) could not be reached: the report is incomplete.`
      : report.findings.length === 0
        ? 'No findings.'
        : `${report.findings.length} finding(s): ${errors} error(s), ${report.findings.length - errors - unchecked} warning(s), ${unchecked} not checkable.`,
  );
  return lines.join('\n');
}
