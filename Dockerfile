# syntax=docker/dockerfile:1
#
# The BigFleet libvirt capacity provider: bin/libvirt on a root filesystem
# holding only libvirt's client library (11.3, from bookworm-backports) and
# what it links, CA certificates and the Debian base files: no shell, no
# package manager, no apt or dpkg state, user 65532.
#
#   docker build -t bigfleet/libvirt-provider:0.1.0 .
#
# `make image` builds the same image with no container engine
# (docs/image.md): its rootfs stage runs the same script on the same package
# list. test/chart/dockerfile_test.go checks this file against the chart and
# the binary's shared libraries; test/image checks that both ways give the
# same files and the same image configuration.

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

# ---- rootfs: scripts/image/packages.txt unpacked by scripts/image/rootfs.sh -
# Same Debian release as the build stage, so the glibc and libvirt sonames the
# binary was linked against are the ones unpacked. --base-user-data builds a
# NoCloud seed ISO with an external tool the default image does not carry:
# build with --build-arg EXTRA_PACKAGES=genisoimage to use that flag
# (docs/configuration.md).
FROM debian:12 AS rootfs
ARG EXTRA_PACKAGES=""
# libvirt's client library comes from bookworm-backports (11.3), not
# bookworm's 9.0 (CVE-2024-4418, docs/libvirt-client.md): rootfs.sh resolves
# the packages against scripts/image/apt's sources and pins alone (libvirt0
# and libvirt-common pinned to backports, everything else bookworm's), not
# this stage's /etc/apt, so make image resolves the very same set. The
# binary is still built against bookworm's libvirt-dev 9.0 (libvirt's ABI
# only grows), so it runs on either library.
COPY scripts/image/rootfs.sh scripts/image/packages.txt /src/scripts/image/
COPY scripts/image/apt/ /src/scripts/image/apt/
RUN /src/scripts/image/rootfs.sh /rootfs /packages.tsv $EXTRA_PACKAGES

# ---- runtime: that tree and the binary, nothing else ------------------------
FROM scratch AS runtime
COPY --from=rootfs /rootfs/ /
COPY --from=build /out/libvirt /usr/local/bin/libvirt
# libvirt's client and libssh look for per-user files under HOME.
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp
USER 65532:65532
EXPOSE 9000 9090
ENTRYPOINT ["/usr/local/bin/libvirt"]
