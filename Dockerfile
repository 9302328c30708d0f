# syntax=docker/dockerfile:1
# patch-agent image: a static binary on distroless (CA certificates, no shell, runs as nonroot).
#   docker build -t patch-agent .                                     # for this machine's architecture
#   docker buildx build --platform linux/amd64,linux/arm64 -t REPO:TAG --push .
# Without Docker: make image (docs/deploy.md), which also stamps the version from git.

ARG GO_VERSION=1.26

# Build on the builder's platform and cross-compile: no emulation for multi-arch images.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -tags nodemo -ldflags "-s -w" -o /out/patch-agent ./cmd/patch-agent

# distroless/static: CA certificates and tzdata, no libc, no shell. The :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/patch-agent /patch-agent
USER nonroot:nonroot
ENTRYPOINT ["/patch-agent"]
CMD ["run"]
