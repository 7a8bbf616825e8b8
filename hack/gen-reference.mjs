// @ts-check
// Writes the reference pages of docs/reference/ (flags, metrics, annotation keys, chart values)
// from the compiled code: `npm run gen:reference` builds, then runs this. The rendering lives in
// hack/reference.ts, which test/unit/docs/reference.test.ts also runs to catch a stale page.

import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const compiled = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  'dist',
  'hack',
  'reference.js',
);
if (!existsSync(compiled)) {
  process.stderr.write(
    'dist/hack/reference.js is missing: run `npm run build` first (or `npm run gen:reference`)\n',
  );
  process.exit(1);
}
// Typed by the source, hack/reference.ts, so that linting needs no build.
/** @type {typeof import('./reference.js')} */
// eslint-disable-next-line @typescript-eslint/no-unsafe-assignment -- import() of a computed path is any
const reference = await import(pathToFileURL(compiled).href);
const pages = await reference.renderReference();

for (const page of pages) {
  const file = path.join(reference.REPO_ROOT, page.path);
  mkdirSync(path.dirname(file), { recursive: true });
  let before = '';
  try {
    before = readFileSync(file, 'utf8');
  } catch {
    // A new page.
  }
  if (before === page.text) {
    process.stdout.write(`${page.path} is up to date\n`);
    continue;
  }
  writeFileSync(file, page.text);
  process.stdout.write(`wrote ${page.path}\n`);
}

// A page this generator no longer writes would stay behind, stale; say so (the unit test fails on it).
const generated = new Set(pages.map((p) => path.basename(p.path)));
for (const name of readdirSync(path.join(reference.REPO_ROOT, reference.REFERENCE_DIR))) {
  if (!generated.has(name)) {
    process.stderr.write(`${reference.REFERENCE_DIR}/${name} is not generated: delete it or generate it\n`);
    process.exitCode = 1;
  }
}
