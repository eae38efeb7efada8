# syntax=docker/dockerfile:1
#
# tracking-bridge: a static binary on distroless (no shell, non-root).
#
#   docker build -t tracking-bridge --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   cp deploy/bridge.env.example bridge.env      # then fill in the upstream account and NATS
#   docker run --rm --env-file bridge.env -p 8080:8080 tracking-bridge
#   docker run --rm --env-file bridge.env tracking-bridge check-config    # any command of the binary
#   docker run --rm tracking-bridge version
#
#   docker build --target sim -t tracking-bridge-sim .       # the upstream simulator, for the demo
#   docker run --rm -p 8081:8081 tracking-bridge-sim
#
# The health check is left to the orchestrator: probe GET /healthz (liveness) and GET /readyz
# (readiness) on port 8080 (docs/operations.md).
#
# The default (last) target is the daemon's image: the bridge's binary alone, which links neither the
# simulator nor the benchmark. The simulator has an image target of its own, built from the same source
# stage, so the compose demo builds the simulator beside the bridge, never a second copy of the bridge.
# Base images are fully qualified so that engines without Docker Hub as their default registry (podman)
# build them too.

# Build on the build machine's platform and cross-compile for the target one (no emulation).
FROM --platform=$BUILDPLATFORM docker.io/library/golang:1.26 AS source
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .

FROM source AS build-sim
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/sim ./cmd/sim

# The upstream simulator (demo only): docker compose --profile demo up.
FROM gcr.io/distroless/static-debian12:nonroot AS sim
COPY --from=build-sim /out/sim /sim
USER nonroot:nonroot
EXPOSE 8081
ENTRYPOINT ["/sim"]
CMD ["-addr", "0.0.0.0:8081"]

FROM source AS build
ARG VERSION=dev
ARG COMMIT=unknown
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" -o /out/bridge ./cmd/bridge

# The daemon (the default target).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bridge /bridge
# nonroot is uid/gid 65532 in the distroless image; the binary needs no capability and writes no file.
USER nonroot:nonroot
EXPOSE 8080
# The binary is the entrypoint and run its default command, so that the arguments of docker run (or a
# container's args) name another command: check-config, version, cursor.
ENTRYPOINT ["/bridge"]
CMD ["run"]
