# syntax=docker/dockerfile:1
#
# tracking-bridge: static binaries on distroless (no shell, non-root).
#
#   docker build -t tracking-bridge --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   cp config/bridge.env.example bridge.env      # then fill in the upstream account and NATS
#   docker run --rm --env-file bridge.env -p 8080:8080 tracking-bridge
#   docker run --rm --entrypoint /sim -p 8081:8081 tracking-bridge -addr 0.0.0.0:8081
#
# The health check is left to the orchestrator: probe GET /healthz (liveness) and GET /readyz
# (readiness) on port 8080 (docs/operations.md).
#
# One image holds two separate binaries: /bridge, the entrypoint, and /sim, the upstream simulator that
# the compose demo runs from this same image with its entrypoint set to /sim. One image means one build
# and one copy to pull; the bridge's binary still links neither the simulator nor the benchmark. Base
# images are fully qualified so that engines without Docker Hub as their default registry (podman)
# build it too.

# Build on the build machine's platform and cross-compile for the target one (no emulation).
FROM --platform=$BUILDPLATFORM docker.io/library/golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/sim ./cmd/sim
# Declared after the simulator's build, so that a new version stamp rebuilds only the bridge.
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" -o /out/bridge ./cmd/bridge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bridge /bridge
COPY --from=build /out/sim /sim
# nonroot is uid/gid 65532 in the distroless image; neither binary needs a capability or writes a file.
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/bridge", "run"]
