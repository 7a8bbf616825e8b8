#!/usr/bin/env bash
# The README's test command (`npm test`): builds the test binaries (cached) and the project, then
# runs the named suites (default: unit integration e2e) one after another, each even when an
# earlier one failed, and prints a line per suite and the total (test/summary.cjs). A suite that
# could not start is reported as "not run" and fails the command. Everything runs on the Node.js
# release the image ships (NODE_IMAGE_VERSION in hack/versions.env, the official build from the
# npm registry, cached with the other tools), put first on PATH, whatever Node runs npm.
#   bash hack/test.sh [suite …]
set -uo pipefail
cd "$(dirname "$0")/.."

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(unit integration e2e)

# When the caller collects results itself (.ci/run sets MCM_TEST_RESULTS), it also prints them.
own_results=""
if [ -z "${MCM_TEST_RESULTS:-}" ]; then
  own_results="$(mktemp)"
  export MCM_TEST_RESULTS="$own_results"
fi

status=0
started=$SECONDS
# "== <step> (at MmSSs)": when each step starts, counted from the start of this command.
stage() { echo "== $* (at $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s)"; }

# shellcheck source=node-image.sh
source hack/node-image.sh
stage "the image's Node.js"
if ! use_image_node; then
  [ -z "$own_results" ] || node test/summary.cjs "$own_results" "${suites[@]}"
  rm -f "$own_results"
  exit 1
fi

stage "npm run tools:test"
# A tools failure is reported by the suites that need the missing binary; unit tests still run.
npm run --silent tools:test || status=1
stage "npm run build"
if npm run --silent build; then
  for suite in "${suites[@]}"; do
    stage "npm run test:$suite"
    npm run --silent "test:$suite" || status=1
  done
else
  echo "build failed: no test suite can run"
  status=1
fi

if [ -n "$own_results" ]; then
  stage "results"
  node test/summary.cjs "$own_results" "${suites[@]}" || status=1
  rm -f "$own_results"
fi
exit "$status"
