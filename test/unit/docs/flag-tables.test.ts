import { expect } from 'chai';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

import { REPO_ROOT, flagRows } from '../../../hack/reference.js';
import { parseDuration } from '../../../lib/config.js';

/**
 * The hand-written flag tables of the topic pages (a flag in the first column, its default in
 * the column headed "Default"), each flag and default checked against the code, as
 * docs/reference/flags.md is generated from it: a renamed flag or a changed default fails here.
 */
interface DocFlag {
  page: string;
  line: number;
  flags: string[];
  defaultCell: string;
}

const DOCS = path.join(REPO_ROOT, 'docs');

function docFlagTables(): DocFlag[] {
  const out: DocFlag[] = [];
  for (const file of readdirSync(DOCS).filter((f) => f.endsWith('.md'))) {
    const lines = readFileSync(path.join(DOCS, file), 'utf8').split('\n');
    let defaultColumn: number | undefined;
    lines.forEach((text, i) => {
      if (!text.startsWith('|')) {
        defaultColumn = undefined;
        return;
      }
      const cells = text
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim());
      if (defaultColumn === undefined) {
        // A table's header: the flags of its rows are ours only when the first column is "Flag".
        const d = cells.findIndex((c) => c === 'Default');
        defaultColumn = cells[0] === 'Flag' && d > 0 ? d : -1;
        return;
      }
      if (defaultColumn < 0 || /^-+$/.test(cells[0] ?? '')) return;
      const flags = [...(cells[0] ?? '').matchAll(/`--([a-z0-9-]+)`/g)].map((m) => m[1] ?? '');
      if (flags.length === 0) return;
      out.push({ page: `docs/${file}`, line: i + 1, flags, defaultCell: cells[defaultColumn] ?? '' });
    });
  }
  return out;
}

/** The default a table cell states, as the flag takes it (`""` and `"" (off)` are empty). */
function statedDefaults(cell: string): string[] {
  const bare = cell.replace(/\s*\([^)]*\)\s*$/, '').trim();
  if (bare === '') return [];
  return bare.split(/,\s*/).map((v) =>
    v
      .replace(/^`|`$/g, '')
      .replace(/^""$/, '')
      .replace(/^none$/, ''),
  );
}

/** Equal as the flag reads them: durations by their length (`60s` is `1m`), the rest as text. */
function sameDefault(stated: string, code: string, type: string): boolean {
  if (stated === code) return true;
  if (type !== 'duration') return false;
  try {
    return parseDuration(stated) === parseDuration(code);
  } catch {
    return false;
  }
}

describe('flag tables of the topic pages', () => {
  const { rows } = flagRows();
  const byName = new Map(rows.map((r) => [r.name, r]));
  const tables = docFlagTables();

  it('finds the tables (the gRPC server flags, the AWS status-check flags)', () => {
    const pages = new Set(tables.map((t) => t.page));
    expect([...pages]).to.include.members(['docs/cluster-autoscaler.md', 'docs/spot-interruptions.md']);
  });

  it('names only flags the manager has, with the defaults the code has', () => {
    const wrong: string[] = [];
    for (const t of tables) {
      const stated = statedDefaults(t.defaultCell);
      t.flags.forEach((name, i) => {
        const row = byName.get(name);
        if (row === undefined) {
          wrong.push(`${t.page}:${String(t.line)}: --${name} is not a flag of the manager`);
          return;
        }
        // One default for several flags applies to each; else the i-th.
        const want = stated.length === 0 ? undefined : stated.length === 1 ? stated[0] : stated[i];
        if (want === undefined) return;
        if (!sameDefault(want, row.defaultText ?? '', row.type)) {
          wrong.push(
            `${t.page}:${String(t.line)}: --${name} default "${want}", the code's is "${row.defaultText ?? ''}"`,
          );
        }
      });
    }
    expect(wrong).to.deep.equal([]);
  });
});
