'use strict';
// Mocha reporter: prints like "spec" and, when MCM_TEST_RESULTS is set, appends the run's real
// counts as one JSON line to that file, so .ci/run can print "N passed, N failed, N skipped", with
// the names of the skipped and failed tests (a failure is named again at the end of a long log),
// and the Node.js and Kubernetes releases it ran on.
const fs = require('node:fs');
const Mocha = require('mocha');

const { EVENT_RUN_END, EVENT_TEST_PASS, EVENT_TEST_FAIL, EVENT_TEST_PENDING } = Mocha.Runner.constants;

class SummaryReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const counts = { passed: 0, failed: 0, skipped: 0 };
    /** The full titles of the skipped tests, so the summary can name them. */
    const skippedTests = [];
    /** The full titles of the failed tests (hooks included) and the first line of each error. */
    const failedTests = [];
    runner.on(EVENT_TEST_PASS, () => counts.passed++);
    runner.on(EVENT_TEST_FAIL, (test, err) => {
      counts.failed++;
      const message = String((err && err.message) || err || '')
        .split('\n')[0]
        .slice(0, 300);
      failedTests.push(`${test.fullTitle()}: ${message}`);
    });
    runner.on(EVENT_TEST_PENDING, (test) => {
      counts.skipped++;
      skippedTests.push(test.fullTitle());
    });
    runner.once(EVENT_RUN_END, () => {
      const file = process.env.MCM_TEST_RESULTS;
      if (file) {
        const suite = process.env.MCM_TEST_SUITE || 'tests';
        // What the suite ran on: this process's Node.js, and the Kubernetes release of the control
        // planes it started (the test harness records it when it starts a kube-apiserver).
        // In parallel mode the control planes start in worker processes, which leave the release
        // in a file beside the results (test/harness/controlplane.ts).
        const versionFile = `${file}.${suite}.kubernetes`;
        let kubernetes = process.env.MCM_CONTROL_PLANE_VERSION || undefined;
        if (fs.existsSync(versionFile)) {
          kubernetes = kubernetes || fs.readFileSync(versionFile, 'utf8').trim() || undefined;
          fs.rmSync(versionFile, { force: true });
        }
        const platform = { node: process.version, kubernetes };
        fs.appendFileSync(
          file,
          JSON.stringify({ suite, ...counts, ...platform, skippedTests, failedTests }) + '\n',
        );
      }
    });
  }
}

module.exports = SummaryReporter;
