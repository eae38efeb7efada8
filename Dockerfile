# syntax=docker/dockerfile:1
#
# tracking-bridge: a static binary on distroless (no shell, non-root).
#
#   docker build -t tracking-bridge --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   docker run --rm --env-file bridge.env -p 8080:8080 tracking-bridge
#
# The health check is left to the orchestrator: probe GET /healthz (liveness) and GET /readyz
# (readiness) on port 8080 (docs/operations.md).

# Build on the build machine's platform and cross-compile for the target one (no emulation). The
# default (last) stage is the daemon; 'docker build --target sim' builds the simulator's image for the
# compose demo. The daemon's binary links neither the simulator nor the benchmark.
FROM --platform=$BUILDPLATFORM golang:1.26 AS source
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
ENTRYPOINT ["/bridge", "run"]
