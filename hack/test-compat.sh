#!/usr/bin/env bash
# `npm run test:compat`: the compatibility suites on each older Kubernetes release still maintained
# (KUBERNETES_COMPAT_VERSIONS in hack/versions.env; every other suite runs on KUBERNETES_VERSION).
# For each release, its control plane (kube-apiserver, kube-scheduler, kube-controller-manager,
# kubectl; `hack/tools.sh kube-v1.NN.P`, cached) and:
#   integration-k8s<version>  the integration suite's compatibility subset (.mocharc.compat.json):
#                             the CRDs applied and served with their admission rules, kubectl's
#                             columns and /scale, a MachineDeployment scaled up and down, the drain
#                             (evictions, PodDisruptionBudgets, volumes), leader election on a Lease,
#                             and the switch from gardener's stack on its CRDs to ours and back
#   e2e-k8s<version>          with --full, the whole e2e suite; otherwise the e2e tests of the
#                             cluster-autoscaler release of the same minor (or the newest older one
#                             pinned): scale-up from zero with a group out of capacity, scale-down of
#                             exactly the idle machines, scale-up during a rollout
# Each suite runs even when an earlier one failed; like `npm test`, on the image's Node.js. Prints a
# line per suite and the total unless the caller collects results (MCM_TEST_RESULTS, .ci/run).
#   bash hack/test-compat.sh [--full]
set -uo pipefail
cd "$(dirname "$0")/.."

full=0
[ "${1:-}" = "--full" ] && full=1

own_results=""
if [ -z "${MCM_TEST_RESULTS:-}" ]; then
  own_results="$(mktemp)"
  export MCM_TEST_RESULTS="$own_results"
fi

# shellcheck source=versions.env
source hack/versions.env
IFS=',' read -r -a versions <<<"$KUBERNETES_COMPAT_VERSIONS"
IFS=',' read -r -a autoscalers <<<"$CLUSTER_AUTOSCALER_VERSION,$CLUSTER_AUTOSCALER_SOURCE_VERSIONS"
suites=()
for v in "${versions[@]}"; do suites+=("integration-k8s${v#v}" "e2e-k8s${v#v}"); done

status=0
started=$SECONDS
stage() { echo "== $* (at $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s)"; }

# shellcheck source=node-image.sh
source hack/node-image.sh
if ! use_image_node; then
  [ -z "$own_results" ] || node test/summary.cjs "$own_results" "${suites[@]}"
  rm -f "$own_results"
  exit 1
fi
stage "npm run build"
if ! npm run --silent build; then
  echo "build failed: no compatibility suite can run"
  [ -z "$own_results" ] || node test/summary.cjs "$own_results" "${suites[@]}"
  rm -f "$own_results"
  exit 1
fi

# The pinned cluster-autoscaler of a Kubernetes minor, or the newest older one (pins are oldest first).
autoscaler_for() {
  local minor=$1 best="" a
  for a in "${autoscalers[@]}"; do
    if [ "$(printf '%s\n%s\n' "${a%.*}" "$minor" | sort -V | head -n 1)" = "${a%.*}" ]; then best=$a; fi
  done
  echo "$best"
}

for v in "${versions[@]}"; do
  minor=$(echo "${v#v}" | cut -d. -f1-2)
  stage "bash hack/tools.sh kube-$v"
  bash hack/tools.sh "kube-$v" || status=1
  stage "integration compatibility subset on Kubernetes $v"
  MCM_KUBERNETES_VERSION="$v" MCM_TEST_SUITE="integration-k8s${v#v}" \
    node node_modules/mocha/bin/mocha.js --config .mocharc.compat.json || status=1
  if ((full)); then
    stage "e2e suite on Kubernetes $v"
    MCM_KUBERNETES_VERSION="$v" MCM_TEST_SUITE="e2e-k8s${v#v}" \
      node node_modules/mocha/bin/mocha.js --config .mocharc.e2e.json || status=1
  else
    ca=$(autoscaler_for "$minor")
    stage "e2e tests of cluster-autoscaler $ca on Kubernetes $v"
    MCM_KUBERNETES_VERSION="$v" MCM_TEST_SUITE="e2e-k8s${v#v}" \
      node node_modules/mocha/bin/mocha.js --config .mocharc.e2e.json \
      --grep "^cluster-autoscaler e2e \\(real autoscaler, kube-scheduler, kwok\\) cluster-autoscaler ${ca//./\\.} " || status=1
  fi
done

if [ -n "$own_results" ]; then
  stage "results"
  node test/summary.cjs "$own_results" "${suites[@]}" || status=1
  rm -f "$own_results"
fi
exit "$status"
