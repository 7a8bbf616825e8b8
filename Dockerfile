# syntax=docker/dockerfile:1
# machine-controller-manager image: the compiled manager and its production dependencies only.
#   docker build -t machine-controller-manager-ts:0.1.0 .
#   docker run --rm machine-controller-manager-ts:0.1.0 --help
# The official node:26-trixie-slim image index (all platforms; Debian 13), pinned by digest: Node 26.10.0,
# built 2026-09-22, as listed in docker-library/repo-info (repos/node/remote/current-trixie-slim.md,
# the same index as 26-trixie-slim and 26.10.0-trixie-slim that day). Update deliberately: take the
# new index digest from there, set NODE_IMAGE_VERSION in hack/versions.env to its Node, and rebuild.
ARG NODE_IMAGE=node:26-trixie-slim@sha256:ec7758ee051e457b468b32bde57b0879010b325bb9862718e9615225ce4aaae1

# 1. Compile: every dependency (TypeScript and esbuild included), then tsc for the manager and lib/
# only, and the bundle of the AWS SDK part the EC2 provider runs (hack/bundle-aws-sdk.mjs): the SDK's
# packages are development dependencies, the image has the bundle alone.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY . .
RUN npx tsc -p tsconfig.build.json \
 && node hack/bundle-aws-sdk.mjs \
 && mkdir -p /out \
 && cp -r dist package.json package-lock.json /out/ \
 && if [ -d protos ]; then cp -r protos /out/; fi

# 2. Production dependencies only, from the same lock file.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force

# 3. Runtime: no compiler, no dev dependencies, no package manager; runs as the image's non-root
# user. The base image's npm, npx, corepack and yarn go (nothing installs at run time), node stays.
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
      /opt/yarn-v* /usr/local/bin/yarn /usr/local/bin/yarnpkg
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /out/ ./
# uid/gid 1000 is the node user of the official images (numeric, so runAsNonRoot can verify it).
USER 1000:1000
# /metrics, /healthz, /readyz (--port) and the externalgrpc server (--grpc-address).
EXPOSE 10258 8086
# --max-semi-space-size: lib/runtime.ts (NODE_FLAGS).
ENTRYPOINT ["node", "--max-semi-space-size=4", "dist/cmd/manager.js"]
