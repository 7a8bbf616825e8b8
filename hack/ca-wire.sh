#!/usr/bin/env bash
# Records the externalgrpc wire of every pinned cluster-autoscaler version with that version's own
# client code, into test/fixtures/externalgrpc/<version>/ (the unit test
# test/unit/autoscaler/wire-versions.test.ts reads them; see the README there).
#
# For each version it builds hack/ca-wire/ (a Go main package) inside the version's Go module, as
# hack/tools.sh unpacked or assembled it, so the generator links exactly the release's
# cloudprovider/externalgrpc client, generated protos and Kubernetes types. The module sources stay
# untouched: 1.34+ are built with `go build -overlay` (the package appears as zz_ca_wire/ in the
# module only for the compiler), 1.33 (a wrapper module around the proxy's release) from a
# temporary copy of the wrapper's go.mod and go.sum. Each binary is cached per version and source
# hash in $TOOLS_DIR/ca-wire-<version>/ (outside the repository).
#
# The generator answers the client with the bytes our encoders write today (hack/ca-wire/responses.ts,
# from dist/: this script runs `npm run build` first), records every request's bytes and what the
# client read back.
#
# When to rerun: after a change of protos/externalgrpc.proto, of the response encoders
# (lib/autoscaler/options-wire.ts, encodeResponse in lib/autoscaler/proto.ts), of hack/ca-wire/, or
# of a pinned autoscaler version (hack/versions.env). The unit test fails when our encoders no
# longer write the bytes in responses/*.bin, because read-back.json would then describe answers we
# do not send. Review the fixtures' diff before committing: read-back.json is the evidence. Map
# entries (the node's labels) are written in Go's random map order, so their bytes may move between
# runs; nothing else does. Not run by CI or the tests (the fixtures are committed).
#
# Needs: Go >= 1.26, node, and the autoscaler sources: hack/tools.sh cluster-autoscaler.
# Usage: hack/ca-wire.sh [VERSION ...]   (default: every pinned version, e.g. 1.33.0 1.36.1)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$ROOT/hack/versions.env"
TOOLS_DIR="$(bash "$ROOT/hack/tools.sh" --print-dir)"
FIXTURES="$ROOT/test/fixtures/externalgrpc"

# The same Go settings as hack/tools.sh, so the autoscaler packages come from the build cache.
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOWORK=off
export GOFLAGS="-trimpath -buildvcs=false"
export GONOSUMDB="k8s.io/externaljwt,k8s.io/autoscaler"

if (($# > 0)); then
  VERSIONS=("$@")
else
  IFS=',' read -r -a VERSIONS <<<"$CLUSTER_AUTOSCALER_VERSION,$CLUSTER_AUTOSCALER_SOURCE_VERSIONS"
fi

log() { printf '[ca-wire %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

SOURCE_HASH=$(cd "$ROOT/hack/ca-wire" && cat ./*.go | sha256sum | cut -c1-16)

# build_generator <version> <binary>
build_generator() {
  local version=$1 bin=$2 f
  local work="$TMP/build-$version"
  mkdir -p "$work"
  if [[ "$version" == "$CLUSTER_AUTOSCALER_VERSION" ]]; then
    local wrapper="$TOOLS_DIR/src/cluster-autoscaler-$version"
    [[ -f "$wrapper/go.mod" ]] || {
      echo "no $wrapper/go.mod: run hack/tools.sh cluster-autoscaler first" >&2
      return 1
    }
    cp "$wrapper/go.mod" "$wrapper/go.sum" "$ROOT"/hack/ca-wire/*.go "$work/"
    (cd "$work" && go mod edit -module=local.test/ca-wire &&
      GOFLAGS="$GOFLAGS -mod=mod" go build -tags externalgrpc -o "$bin" .)
  else
    local module="$TOOLS_DIR/src/cluster-autoscaler-$version/cluster-autoscaler"
    [[ -f "$module/go.mod" ]] || {
      echo "no $module/go.mod: run hack/tools.sh cluster-autoscaler-${version%.*} first" >&2
      return 1
    }
    [[ ! -e "$module/zz_ca_wire" ]] || {
      echo "$module/zz_ca_wire exists; the overlay needs that path free" >&2
      return 1
    }
    {
      printf '{"Replace": {'
      local sep=''
      for f in "$ROOT"/hack/ca-wire/*.go; do
        printf '%s"%s": "%s"' "$sep" "$module/zz_ca_wire/$(basename "$f")" "$f"
        sep=', '
      done
      printf '}}\n'
    } >"$work/overlay.json"
    (cd "$module" && go build -overlay "$work/overlay.json" -tags externalgrpc -o "$bin" ./zz_ca_wire)
  fi
}

log "npm run build"
if ! build_output=$(cd "$ROOT" && npm run build 2>&1); then
  printf '%s\n' "$build_output" >&2
  echo "npm run build failed; the answers are encoded by dist/" >&2
  exit 1
fi
mkdir -p "$TMP/responses"
(cd "$ROOT" && node --input-type=module -e "
  const { writeCaWireResponses } = await import('./dist/hack/ca-wire/responses.js');
  writeCaWireResponses(process.argv[1]);
" "$TMP/responses")

for version in "${VERSIONS[@]}"; do
  dest="$TOOLS_DIR/ca-wire-$version"
  bin="$dest/bin/ca-wire"
  if [[ -x "$bin" && -f "$dest/source/$SOURCE_HASH" ]]; then
    log "$version: generator cached in $dest"
  else
    log "$version: building the generator against the release's module"
    rm -rf "$dest"
    mkdir -p "$dest/bin" "$dest/source"
    build_generator "$version" "$bin"
    touch "$dest/source/$SOURCE_HASH"
  fi
  out="$FIXTURES/$version"
  rm -rf "$out"
  mkdir -p "$out/responses"
  cp "$TMP"/responses/*.bin "$out/responses/"
  "$bin" --dir="$out" --version="$version"
  log "$version: wrote $out"
done

(cd "$ROOT" && npx prettier --log-level warn --write "$FIXTURES"/*/read-back.json)
