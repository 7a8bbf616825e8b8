# syntax=docker/dockerfile:1
# machine-controller-manager image: the compiled manager and its production dependencies only.
#   docker build -t machine-controller-manager-ts:0.1.0 .
#   docker run --rm machine-controller-manager-ts:0.1.0 --help
ARG NODE_IMAGE=node:22-bookworm-slim

# 1. Compile: every dependency (TypeScript included), then tsc for the manager and lib/ only.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY . .
RUN npx tsc -p tsconfig.build.json \
 && mkdir -p /out \
 && cp -r dist package.json package-lock.json /out/ \
 && if [ -d protos ]; then cp -r protos /out/; fi

# 2. Production dependencies only, from the same lock file.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force

# 3. Runtime: no compiler, no dev dependencies, no npm cache; runs as the image's non-root user.
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /out/ ./
# uid/gid 1000 is the node user of the official images (numeric, so runAsNonRoot can verify it).
USER 1000:1000
# /metrics, /healthz, /readyz (--port) and the externalgrpc server (--grpc-address).
EXPOSE 10258 8086
ENTRYPOINT ["node", "dist/cmd/manager.js"]
