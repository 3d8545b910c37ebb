import type { DoctorResult } from './doctor-host';

/** The doctor's output: text or JSON, and its exit code. */

function tag(r: DoctorResult): string {
  if (r.ok) return 'ok';
  if (r.level === 'info') return 'info';
  if (r.level === 'optional') return 'warn';
  return r.found === false ? 'MISSING' : 'FAIL';
}

/** One line per result, then a summary line. */
export function formatDoctorReport(results: readonly DoctorResult[]): string {
  const lines = results.map((r) => `${tag(r).padEnd(7)} ${r.name} ${r.detail}${!r.ok && r.fix ? ` — fix: ${r.fix}` : ''}`);
  const failed = results.filter((r) => !r.ok && r.level === 'required').length;
  const warned = results.filter((r) => !r.ok && r.level === 'optional').length;
  const warnings = warned ? ` (${warned} optional item${warned === 1 ? '' : 's'} missing)` : '';
  lines.push(
    failed
      ? `srpo doctor: ${failed} required item${failed === 1 ? '' : 's'} missing or wrong${warnings}`
      : `srpo doctor: all required items present${warnings}`,
  );
  return lines.join('\n') + '\n';
}

/** `[{name, level, ok, detail, fix}]`; fix is null for passed checks. */
export function formatDoctorJson(results: readonly DoctorResult[]): string {
  const plain = results.map((r) => ({ name: r.name, level: r.level, ok: r.ok, detail: r.detail, fix: r.ok ? null : (r.fix ?? null) }));
  return JSON.stringify(plain, null, 2) + '\n';
}

/** 1 when a required check failed, else 0: optional and informational items never fail the doctor. */
export function doctorExitCode(results: readonly DoctorResult[]): number {
  return results.some((r) => !r.ok && r.level === 'required') ? 1 : 0;
}
