'use strict';
// Prints the test results that summary-reporter.cjs appended to a file (one JSON line per mocha
// run): one line per expected suite ("unit: 849 passed, 0 failed, 0 skipped", or "e2e: not run"
// when the suite left no result because it could not start or crashed before its end; then, in
// brackets, the Kubernetes and Node.js releases it ran on), each followed
// by the names of its skipped and failed tests, then the total as the last line: "N passed, N failed[, N skipped]". Exits 1 when a suite failed, did
// not run, or ran no test. Plain CommonJS with no dependency, so it works even when the build did not.
//   node test/summary.cjs <results-file> <suite> [<suite> …]
const fs = require('node:fs');

const [file, ...suites] = process.argv.slice(2);
if (file === undefined || suites.length === 0) {
  console.error('usage: node test/summary.cjs <results-file> <suite> [<suite> …]');
  process.exit(2);
}
const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
const bySuite = new Map();
for (const line of text.split('\n').filter(Boolean)) {
  const r = JSON.parse(line);
  const t = bySuite.get(r.suite) ?? {
    passed: 0,
    failed: 0,
    skipped: 0,
    skippedTests: [],
    failedTests: [],
    node: new Set(),
    kubernetes: new Set(),
  };
  if (r.node) t.node.add(r.node);
  if (r.kubernetes) t.kubernetes.add(r.kubernetes);
  t.passed += r.passed;
  t.failed += r.failed;
  t.skipped += r.skipped;
  t.skippedTests.push(...(r.skippedTests ?? []));
  t.failedTests.push(...(r.failedTests ?? []));
  bySuite.set(r.suite, t);
}
const total = { passed: 0, failed: 0, skipped: 0 };
let ok = true;
for (const suite of [...suites, ...[...bySuite.keys()].filter((s) => !suites.includes(s))]) {
  const t = bySuite.get(suite);
  if (t === undefined) {
    console.log(`${suite}: not run`);
    ok = false;
    continue;
  }
  // A suite that ran no test at all (a wrong spec glob, a build that emitted nothing) proves
  // nothing: it fails, and says so.
  const empty = t.passed + t.failed + t.skipped === 0;
  // What it ran on, as the suite's own processes reported it.
  const on = [...[...t.kubernetes].map((v) => `Kubernetes ${v}`), ...[...t.node].map((v) => `Node.js ${v}`)];
  console.log(
    `${suite}: ${t.passed} passed, ${t.failed} failed, ${t.skipped} skipped` +
      (empty ? ' (no test ran)' : '') +
      (on.length > 0 ? ` [${on.join(', ')}]` : ''),
  );
  if (empty) ok = false;
  // A skip is never silent: each skipped test is named under its suite's line.
  for (const title of t.skippedTests) console.log(`  skipped: ${title}`);
  // A failure is named again here, at the end of a long log, with its error's first line.
  for (const title of t.failedTests) console.log(`  failed: ${title}`);
  if (t.failed > 0) ok = false;
  total.passed += t.passed;
  total.failed += t.failed;
  total.skipped += t.skipped;
}
console.log(
  `${total.passed} passed, ${total.failed} failed` + (total.skipped > 0 ? `, ${total.skipped} skipped` : ''),
);
process.exit(ok ? 0 : 1);
