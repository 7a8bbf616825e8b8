#!/usr/bin/env bash
# `npm start`: builds what dev mode needs before it can start — etcd and kube-apiserver, and the
# EC2 emulator for --provider=aws — side by side with the TypeScript build, then runs dev mode
# (dist/cmd/dev.js) with the given arguments. On a new machine the other components (the rest of
# Kubernetes, kwok, the cluster-autoscaler) are built by dev mode while it runs and join as soon as
# each is built; every build is cached (hack/tools.sh), so later starts take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=(etcd kube-apiserver)
for arg in "$@"; do
  if [[ $arg == --provider=aws ]]; then tools+=(moto); fi
done

began=$SECONDS
pids=()
for t in "${tools[@]}"; do
  bash hack/tools.sh "$t" &
  pids+=($!)
done
npm run --silent build &
pids+=($!)
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
if ((failed)); then
  echo "npm start: a build above failed; nothing was started" >&2
  exit 1
fi
if ((SECONDS - began > 5)); then
  echo "npm start: built what dev mode needs in $((SECONDS - began))s; starting it"
fi
exec node --max-semi-space-size=4 dist/cmd/dev.js "$@"
