#!/usr/bin/env bash
# `npm start`: builds what dev mode needs before it can start — etcd and kube-apiserver, and the
# EC2 emulator for --provider=aws — side by side with the TypeScript build, then runs dev mode
# (dist/cmd/dev.js) with the given arguments. On a new machine the other components (the rest of
# Kubernetes, kwok, the cluster-autoscaler) are built by dev mode while it runs and join as soon as
# each is built; every build is cached (hack/tools.sh), so later starts take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# On a Node.js outside the supported lines (package.json's engines: 22.12+, 24, 26; Node 20 is past
# its end of life), dev mode runs on the image's release instead, fetched once into the tools cache.
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit((a === 22 && b >= 12) || a === 24 || a >= 26 ? 0 : 1)' 2>/dev/null; then
  echo "npm start: Node.js $(node --version 2>/dev/null || echo '(none)') is not a supported release; using the image's"
  # shellcheck source=node-image.sh
  source hack/node-image.sh
  use_image_node
fi

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
