// Writes the machine.sapcloud.io CRDs from lib/api/crds.ts into the Helm chart.
// Usage: npm run crds (builds, then runs node dist/hack/gen-crds.js).

import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { CRD_CHART_DIR, crdYamlFiles } from '../lib/api/crds.js';

// Compiled to dist/hack/gen-crds.js, so the repository root is two levels up from here.
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const outDir = path.join(repoRoot, CRD_CHART_DIR);

mkdirSync(outDir, { recursive: true });
const files = crdYamlFiles();
// Remove CRD files this generator no longer produces, so a renamed kind cannot linger in the chart.
for (const existing of readdirSync(outDir)) {
  if (existing.startsWith('machine.sapcloud.io_') && !files.has(existing))
    rmSync(path.join(outDir, existing));
}
for (const [name, text] of files) {
  writeFileSync(path.join(outDir, name), text);
  console.log(`wrote ${path.join(CRD_CHART_DIR, name)}`);
}
