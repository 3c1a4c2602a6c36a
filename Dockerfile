# syntax=docker/dockerfile:1
#
# The BigFleet libvirt capacity provider: bin/libvirt on a minimal Debian 12
# runtime holding only libvirt's client libraries.
#
#   docker build -t bigfleet/libvirt-provider:dev .
#
# test/chart/dockerfile_test.go checks this file against the Helm chart (user,
# entrypoint) and the binary's shared libraries against the runtime packages.

# ---- build: Go + cgo against libvirt-dev (libvirt.org/go/libvirt) ----------
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o /out/libvirt ./cmd/libvirt

# ---- runtime: libvirt0 (client libraries) + CA certificates, no shell -------
# Same Debian release as the build stage, so the glibc and libvirt sonames the
# binary was linked against are the ones installed here.
FROM debian:12-slim AS runtime
# --base-user-data builds a NoCloud seed ISO with an external tool the default
# image does not carry: build with --build-arg EXTRA_PACKAGES=genisoimage to
# use that flag (docs/configuration.md).
ARG EXTRA_PACKAGES=""
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt0 ca-certificates $EXTRA_PACKAGES \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log \
 && echo 'nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nonroot:x:65532:' >> /etc/group \
 && rm -f /bin/sh /bin/dash /bin/bash /usr/bin/sh /usr/bin/dash /usr/bin/bash /bin/rbash /usr/bin/rbash
COPY --from=build /out/libvirt /usr/local/bin/libvirt
# libvirt's client and libssh look for per-user files under HOME.
ENV HOME=/tmp
USER 65532:65532
EXPOSE 9000 9090
ENTRYPOINT ["/usr/local/bin/libvirt"]
