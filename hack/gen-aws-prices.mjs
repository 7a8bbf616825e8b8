// @ts-check
// Writes lib/providers/aws/prices/ondemand-table.generated.ts, the AWS provider's on-demand Linux
// list prices, from the reference TSVs (one per region, `instance_type<TAB>price_per_hour` after
// `#` header lines; see shared/reference/aws-prices/README.md for where the figures come from).
//
//   npm run gen:aws-prices [-- [<directory of ondemand-*.tsv>] [--check]]
//
// The directory defaults to ../shared/reference/aws-prices beside the repository. --check writes
// nothing and fails when the generated file differs from what the TSVs give. The unit test
// test/unit/providers/aws/prices.test.ts imports renderTable() and does the same comparison.
//
// Each region is one string of `type=price` pairs joined by `;`: a module of four constant strings
// costs the manager little to load (the provider turns a region into a map when it is first asked
// about it), where an object literal of ~3,000 properties would be compiled and kept as one.

import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
export const DEFAULT_DIR = path.resolve(root, '..', 'shared', 'reference', 'aws-prices');
export const OUTPUT = path.join(root, 'lib', 'providers', 'aws', 'prices', 'ondemand-table.generated.ts');

/**
 * @typedef {{ region: string, currency: string, generatedAt: string, source: string,
 *   prices: [string, string][] }} RegionTable
 */

/**
 * One region's TSV: its header facts and its prices (as decimal strings without trailing zeros).
 * @param {string} file
 * @returns {RegionTable}
 */
export function parseTsv(file) {
  const name = path.basename(file);
  const fromName = /^ondemand-(.+)\.tsv$/.exec(name)?.[1];
  if (fromName === undefined) throw new Error(`${name}: not an ondemand-<region>.tsv file`);
  /** @type {Record<string, string>} */
  const header = {};
  /** @type {[string, string][]} */
  const prices = [];
  const lines = readFileSync(file, 'utf8').split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    if (line.startsWith('#')) {
      const m = /^#\s*([A-Za-z][\w /]*?):\s*(.*)$/.exec(line);
      if (m?.[1] !== undefined && m[2] !== undefined) header[m[1]] ??= m[2].trim();
      return;
    }
    const [type, price, ...rest] = line.split('\t');
    if (type === undefined || price === undefined || rest.length > 0 || !/^[a-z0-9][\w.-]*$/.test(type)) {
      throw new Error(
        `${name}:${i + 1}: expected instance_type<TAB>price_per_hour, got ${JSON.stringify(line)}`,
      );
    }
    const value = Number(price);
    if (!/^\d+(\.\d+)?$/.test(price) || !(value > 0)) {
      throw new Error(
        `${name}:${i + 1}: ${type}: the price ${JSON.stringify(price)} is not a positive number`,
      );
    }
    // Number → string drops trailing zeros and keeps the figure exact (6 decimals at most).
    prices.push([type, String(value)]);
  });
  const region = header.Region ?? '';
  if (region !== fromName) throw new Error(`${name}: the header names region ${JSON.stringify(region)}`);
  const currency = /^([A-Z]{3}) per hour/.exec(header['Currency/unit'] ?? '')?.[1] ?? '';
  const expected = region.startsWith('cn-') ? 'CNY' : 'USD';
  if (currency !== expected) {
    throw new Error(
      `${name}: currency ${JSON.stringify(currency)}; a ${region} table must be in ${expected}`,
    );
  }
  const generatedAt =
    /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)/.exec(header['Generation date stated in the file'] ?? '')?.[1] ?? '';
  if (generatedAt === '') throw new Error(`${name}: no "Generation date stated in the file" header line`);
  const sourcePath = (header['Source path'] ?? '').split(' ')[0] ?? '';
  const commit = (header['Commit read'] ?? '').split(' ')[0] ?? '';
  if (sourcePath === '' || commit === '')
    throw new Error(`${name}: no "Source path" or "Commit read" header line`);
  const declared = Number(header['Instance types']);
  if (declared !== prices.length) {
    throw new Error(
      `${name}: ${prices.length} prices, the header says ${header['Instance types'] ?? 'nothing'}`,
    );
  }
  prices.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (let i = 1; i < prices.length; i++) {
    if (prices[i]?.[0] === prices[i - 1]?.[0])
      throw new Error(`${name}: ${prices[i]?.[0] ?? ''} is listed twice`);
  }
  const source = `karpenter-provider-aws ${sourcePath} at ${commit.slice(0, 12)} (Linux, on-demand, shared tenancy)`;
  return { region, currency, generatedAt, source, prices };
}

/**
 * The tables of every ondemand-*.tsv in a directory, by region.
 * @param {string} dir
 * @returns {RegionTable[]}
 */
export function readTables(dir) {
  const files = readdirSync(dir)
    .filter((f) => /^ondemand-.+\.tsv$/.test(f))
    .sort();
  if (files.length === 0) throw new Error(`${dir}: no ondemand-<region>.tsv file`);
  return files.map((f) => parseTsv(path.join(dir, f)));
}

/**
 * The generated module's text, formatted as prettier formats it (the file is checked by `npm run
 * lint` like any other).
 * @param {RegionTable[]} tables
 * @returns {string}
 */
export function renderTable(tables) {
  const q = (/** @type {string} */ s) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  const out = [
    '// Generated by hack/gen-aws-prices.mjs from the reference TSVs (shared/reference/aws-prices/ondemand-*.tsv):',
    '// do not edit. Regenerate with `npm run gen:aws-prices` (or `node hack/gen-aws-prices.mjs <dir>`).',
    '',
    '/** One region\'s on-demand Linux list prices: `type=price` pairs joined by ";", sorted by type. */',
    'export interface OnDemandRegionTable {',
    '  /** Per hour: USD, or CNY in the China regions. */',
    '  currency: string;',
    '  /** When the figures were taken from the Pricing API. */',
    '  generatedAt: string;',
    '  source: string;',
    '  prices: string;',
    '}',
    '',
    'export const ON_DEMAND_TABLES: Readonly<Record<string, OnDemandRegionTable>> = {',
  ];
  // A property on one line when it fits prettier's width (110), else its value on the next.
  const prop = (/** @type {string} */ key, /** @type {string} */ value) => {
    const line = `    ${key}: ${q(value)},`;
    return line.length <= 110 ? [line] : [`    ${key}:`, `      ${q(value)},`];
  };
  for (const t of [...tables].sort((a, b) => (a.region < b.region ? -1 : 1))) {
    out.push(
      `  ${q(t.region)}: {`,
      ...prop('currency', t.currency),
      ...prop('generatedAt', t.generatedAt),
      ...prop('source', t.source),
      ...prop('prices', t.prices.map(([type, price]) => `${type}=${price}`).join(';')),
      '  },',
    );
  }
  out.push('};', '');
  return out.join('\n');
}

function main() {
  const args = process.argv.slice(2);
  const check = args.includes('--check');
  const dir = path.resolve(args.find((a) => !a.startsWith('--')) ?? DEFAULT_DIR);
  const text = renderTable(readTables(dir));
  if (check) {
    let current = '';
    try {
      current = readFileSync(OUTPUT, 'utf8');
    } catch {
      // absent: stale
    }
    if (current !== text) {
      process.stderr.write(
        `${path.relative(root, OUTPUT)} is not what ${dir} gives: run npm run gen:aws-prices\n`,
      );
      process.exitCode = 1;
    }
    return;
  }
  writeFileSync(OUTPUT, text);
  process.stdout.write(`wrote ${path.relative(root, OUTPUT)} from ${dir}\n`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main();
}
