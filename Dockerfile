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

# Build on the build machine's platform and cross-compile for the target one (no emulation).
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" -o /out/bridge ./cmd/bridge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bridge /bridge
# nonroot is uid/gid 65532 in the distroless image; the binary needs no capability and writes no file.
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/bridge", "run"]
