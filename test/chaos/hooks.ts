// Mocha root hooks of the fault suite (loaded by .mocharc.chaos.json): at the end of the run, print
// the results table and write it to test/chaos/results.md.

import { REDUCED } from './env.js';
import { recordedRows, renderTable, writeResults } from './results.js';

let startedAt = 0;

export const mochaHooks = {
  beforeAll(): void {
    startedAt = Date.now();
  },
  afterAll(): void {
    const rows = recordedRows();
    if (rows.length === 0) return;
    const wallMs = Date.now() - startedAt;
    const file =
      process.env.MCM_CHAOS_RESULTS_FILE === '0'
        ? undefined
        : writeResults(REDUCED ? 'reduced' : 'full', wallMs, rows);
    console.log(
      `\n  Fault suite (${REDUCED ? 'reduced' : 'full'} run, ${(wallMs / 1000).toFixed(0)} s)\n\n${renderTable(rows)}\n${file === undefined ? '' : `\n  written to ${file}\n`}`,
    );
  },
};
