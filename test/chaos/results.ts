// The fault suite's results table: one row per measured operation, printed at the end of the run
// and written to test/chaos/results.md (the section of the run's mode, full or reduced).

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { repoRoot } from '../harness/tools.js';

export interface ResultRow {
  id: string;
  title: string;
  /** undefined: did not converge within timeoutMs. */
  convergeMs: number | undefined;
  timeoutMs: number;
  beyondLimit: number;
  /** undefined: not counted (no convergence). */
  orphans: number | undefined;
  wronglyDeleted: number;
  notes: string;
  /** Set when the scenario could not run (the suite fails then). */
  notRun?: string;
}

const rows: ResultRow[] = [];

export function recordRow(row: ResultRow): void {
  rows.push(row);
}

export function recordNotRun(id: string, title: string, reason: string): void {
  rows.push({
    id,
    title,
    convergeMs: undefined,
    timeoutMs: 0,
    beyondLimit: 0,
    orphans: undefined,
    wronglyDeleted: 0,
    notes: '',
    notRun: reason,
  });
}

export function recordedRows(): readonly ResultRow[] {
  return rows;
}

function cell(s: string): string {
  return s.replace(/\|/g, '\\|');
}

/** The table as Markdown (also readable as plain text). */
export function renderTable(list: readonly ResultRow[]): string {
  const out = [
    '| scenario | converge time | beyond limit | orphans | wrongly deleted | notes |',
    '| --- | --: | --: | --: | --: | --- |',
  ];
  for (const r of [...list].sort((a, b) => a.id.localeCompare(b.id, 'en', { numeric: true }))) {
    if (r.notRun !== undefined) {
      out.push(`| ${cell(`${r.id} ${r.title}`)} | NOT RUN | – | – | – | ${cell(r.notRun)} |`);
      continue;
    }
    const converge =
      r.convergeMs === undefined
        ? `NOT CONVERGED (${(r.timeoutMs / 1000).toFixed(0)} s)`
        : `${(r.convergeMs / 1000).toFixed(1)} s`;
    out.push(
      `| ${cell(`${r.id} ${r.title}`)} | ${converge} | ${r.beyondLimit} | ${r.orphans ?? '–'} | ${r.wronglyDeleted} | ${cell(r.notes)} |`,
    );
  }
  return out.join('\n');
}

const RESULTS_FILE = path.join(repoRoot, 'test', 'chaos', 'results.md');

const HEADER = `# Fault suite results

Written by \`npm run test:chaos\` (full run) and \`MCM_CHAOS_REDUCED=1 npm run test:chaos\` (reduced run);
each run replaces its own section. Columns: time from the write that started the operation until
the MachineDeployment was complete with every machine Running; the most machines seen beyond
replicas + maxSurge at any moment (must be 0); VMs without a machine after convergence (must be
0); machines deleted that no scale-down, rollout or autoscaler decision chose (must be 0). The
definitions are in test/chaos/analysis.ts and docs/testing.md ("Fault suite").
`;

/** Replaces the section of this mode in results.md, keeping the other one. */
export function writeResults(mode: 'full' | 'reduced', wallMs: number, list: readonly ResultRow[]): string {
  const title = mode === 'full' ? '## Full run' : '## Reduced run (MCM_CHAOS_REDUCED=1)';
  const section = [
    title,
    '',
    `${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, wall time ${(wallMs / 1000).toFixed(0)} s, ` +
      `node ${process.version}, ${list.length} rows.`,
    '',
    renderTable(list),
    '',
  ].join('\n');
  const old = existsSync(RESULTS_FILE) ? readFileSync(RESULTS_FILE, 'utf8') : '';
  const sections = new Map<string, string>();
  for (const part of old.split(/^(?=## )/m).slice(1)) {
    const heading = part.split('\n', 1)[0] ?? '';
    sections.set(heading, part.trimEnd() + '\n');
  }
  sections.set(title, section);
  const order = ['## Full run', '## Reduced run (MCM_CHAOS_REDUCED=1)'];
  const body = order
    .filter((h) => sections.has(h))
    .map((h) => sections.get(h))
    .join('\n');
  writeFileSync(RESULTS_FILE, `${HEADER}\n${body}`);
  return RESULTS_FILE;
}
